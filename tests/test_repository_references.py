"""The repository explains itself: no file may point outside it.

Fails, naming file and line, on any reference to a design document or paper copy that users of the repository
do not have: the team folder (``../shared``, ``shared/SPEC``), citations of the team's SPEC by section
("SPEC 3", "SPEC section 3") or any other standalone mention of it, and papers cited by a local file name
(the source papers' text files, or any ``word-word-word.txt``-style name). Math is cited as ``docs/math.md §n``
and papers by their key in ``docs/references.md``. This file is exempt (it has to spell the patterns out).
"""
from __future__ import annotations

import os
import re
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
THIS_FILE = os.path.relpath(os.path.abspath(__file__), ROOT)
SKIP_DIRS = {".git", ".venv", "venv", "runs", "build", "dist", "mlruns", "__pycache__", ".pytest_cache",
             "spark-warehouse", "metastore_db", ".ipynb_checkpoints"}

# The plain-text copies of the source papers the team works from (stems; ".txt" optional in the pattern).
PAPER_STEMS = (
    "auditing-privacy-mechanisms-via-label-inference-attacks",
    "label-inference-attacks-from-log-loss-scores",
    "membership-privacy-via-information-leakage-slides",
    "observational-auditing-of-label-privacy",
    "unified-analysis-of-label-inference-attacks",
)

FORBIDDEN = (
    ("team folder outside the repository",
     re.compile(r"(?:\.\./|/work/)shared\b|\bshared/(?:SPEC|papers|NOTES|STYLE)")),
    ("citation of the team SPEC (cite docs/math.md §n)", re.compile(r"\bSPEC\b|\bSPEC\.md\b")),
    ("paper cited by its local file name (cite its docs/references.md key)",
     re.compile(r"\b(?:" + "|".join(re.escape(stem) for stem in PAPER_STEMS) + r")(?:\.txt)?\b")),
    ("paper-like local .txt file name (cite its docs/references.md key)",
     re.compile(r"\b[A-Za-z0-9]+(?:-[A-Za-z0-9]+){2,}\.txt\b")),
)


def repository_files() -> list[str]:
    """Tracked and untracked-but-not-ignored files (git), else a walk that skips tool and output folders."""
    try:
        listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                                check=True, capture_output=True).stdout.decode("utf-8").split("\0")
        files = [name for name in listed if name and os.path.isfile(os.path.join(ROOT, name))]
        if files:
            return sorted(set(files))
    except (OSError, subprocess.CalledProcessError):
        pass
    files = []
    for folder, dirs, names in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        files += [os.path.relpath(os.path.join(folder, name), ROOT) for name in names]
    return sorted(files)


def violations(path: str, text: str) -> list[str]:
    """``path:line: reason: the line`` for every forbidden reference in ``text``."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for reason, pattern in FORBIDDEN:
            if pattern.search(line):
                found.append(f"{path}:{number}: {reason}: {line.strip()[:160]}")
    return found


def _text(path: str) -> str | None:
    with open(os.path.join(ROOT, path), "rb") as handle:
        data = handle.read()
    if b"\0" in data[:8192]:
        return None  # binary (images, parquet, ...)
    return data.decode("utf-8", errors="replace")


def test_no_file_points_outside_the_repository():
    files = repository_files()
    assert len(files) > 20, f"expected the repository's files under {ROOT}, found {files}"
    found = []
    for path in files:
        if path == THIS_FILE:
            continue
        text = _text(path)
        if text is not None:
            found += violations(path, text)
    assert not found, ("files refer to documents users of the repository do not have; cite docs/math.md §n and "
                       "docs/references.md keys instead:\n" + "\n".join(found))


def test_math_and_references_exist_and_cited_keys_resolve():
    for name in ("math.md", "references.md"):
        assert os.path.isfile(os.path.join(ROOT, "docs", name)), f"docs/{name} is missing"
    with open(os.path.join(ROOT, "docs", "references.md"), encoding="utf-8") as handle:
        defined = set(re.findall(r"^\*\*\[([A-Za-z0-9+]+)\]\*\*", handle.read(), flags=re.MULTILINE))
    assert defined, "docs/references.md defines no **[KEY]** entries"
    key = re.compile(r"\[([A-Z]{2,}\+?[0-9]{2})\]")  # [BDG+24], [SNJ23], [CP34], ...
    unknown = []
    for path in repository_files():
        text = _text(path) if path.endswith((".py", ".md", ".yaml", ".cfg", ".toml", ".ini")) else None
        for number, line in enumerate((text or "").splitlines(), start=1):
            unknown += [f"{path}:{number}: [{k}]" for k in key.findall(line) if k not in defined]
    assert not unknown, "reference keys not defined in docs/references.md:\n" + "\n".join(unknown)


def test_math_sections_cited_exist():
    with open(os.path.join(ROOT, "docs", "math.md"), encoding="utf-8") as handle:
        headings = set(re.findall(r"^#{2,3} ([0-9]+(?:\.[0-9]+)?) ", handle.read(), flags=re.MULTILINE))
    cited = re.compile(r"math\.md §([0-9]+(?:\.[0-9]+)?)((?:, §[0-9]+(?:\.[0-9]+)?)*)")
    missing = []
    for path in repository_files():
        text = _text(path) if path.endswith((".py", ".md", ".yaml", ".cfg", ".toml", ".ini")) else None
        for number, line in enumerate((text or "").splitlines(), start=1):
            for first, rest in cited.findall(line):
                for section in [first, *re.findall(r"§([0-9]+(?:\.[0-9]+)?)", rest)]:
                    if section not in headings:
                        missing.append(f"{path}:{number}: docs/math.md §{section}")
    assert not missing, "cited sections that docs/math.md does not have:\n" + "\n".join(missing)


@pytest.mark.parametrize("line", [
    "see ../shared/SPEC.md",
    "the math is in shared/SPEC.md",
    "posteriors per SPEC 3.",
    "(SPEC section 3)",
    "(SPEC 1.2)",
    "as the SPEC says",
    "auditing-privacy-mechanisms-via-label-inference-attacks" + ".txt sec. 4",
    "observational-auditing-of-label-privacy sec. 6",
    "some-other-paper-name" + ".txt, Fig. 2",
])
def test_the_checker_flags_forbidden_references(line):
    assert violations("example.py", line), line


@pytest.mark.parametrize("line", [
    "posteriors per docs/math.md §3 ([BDG+24] sec. 4)",
    "INT_SPECS = {}  # SPEC_BLOCKS, CAT_SPECS",
    "Kaggle train.txt and day_0.gz",
    "shared caches and memory bandwidth; a shared mount",
])
def test_the_checker_accepts_allowed_lines(line):
    assert not violations("example.py", line), line
