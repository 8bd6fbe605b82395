"""A small run through the command line, read the way a reviewer reads it: every JSON file under its output folders
matches its shipped schema and holds no NaN / Infinity literal; the report lists the valid bounds first and never
shows a raw nan or inf; the console headline reads the claim and flags a bound of 0 as no evidence."""
from __future__ import annotations

import contextlib
import copy
import io
import math
import re
from pathlib import Path

import pytest
import yaml
from json_support import check_file, strict_load

from lia_spark.records.wording import NO_EVIDENCE, NOT_VALID

pytestmark = pytest.mark.e2e  # the end-to-end tier: `make test-e2e` (README); about 2 min on 2 shared cores

# the default target (training mechanism none: claimed eps = inf) on 2 days x 3000 rows, 3 trees, 2 mechanism
# settings, one utility epsilon; the twin also written as Criteo files for the ingest command
SMALL = {"run": {"name": "outputs"}, "synthetic": {"rows_per_day": 3000, "days": 2, "write_tsv": True},
         "mechanisms": {"names": ["rr", "llp"], "epsilons": [2.0], "bag_sizes": [8]},
         "models": {"n_estimators": 3, "early_stopping_rounds": 0, "hash_buckets": 1024},
         "utility": {"epsilons": [math.inf], "bag_sizes": [8], "extra_mechanisms": []},
         "logloss": {"decimals": [2], "noises": ["laplace"], "noise_scales": [1e-3], "queries": 1,
                     "single_query_rows": 500},
         "tracking": {"enabled": False}}
STAGE_COMMANDS = ("generate", "train", "posteriors", "utility", "audit")  # after the pipeline: each reuses its output


@pytest.fixture(scope="module")
def run(spark, tmp_path_factory) -> dict:
    """``lia-spark run`` (the pipeline), each stage command again, ``logloss-attack``, and ``ingest`` of the twin's
    Criteo files into a second folder; what each command printed on stdout."""
    root = tmp_path_factory.mktemp("run-outputs")
    out, ingested = root / "out", root / "ingested"
    values = copy.deepcopy(SMALL)
    values["run"]["output_dir"] = str(out)
    conf = root / "conf.yaml"
    conf.write_text(yaml.safe_dump(values), encoding="utf-8")
    commands = [("run", ()), *((name, ()) for name in STAGE_COMMANDS), ("logloss-attack", ()),
                ("ingest", (f"run.output_dir={ingested}", "data.source=criteo", f"data.criteo_paths=[{out}/criteo]"))]
    printed = {}
    for command, overrides in commands:
        stdout = io.StringIO()
        with contextlib.redirect_stdout(stdout):
            assert main_exit(command, conf, overrides) == 0, command
        printed[command] = stdout.getvalue()
    return {"out": out, "ingested": ingested, "printed": printed}


def main_exit(command: str, conf: Path, overrides: tuple[str, ...]) -> int:
    from lia_spark.cli.main import main

    return main([command, "--conf", str(conf), *overrides])


def test_every_json_file_of_the_run_matches_its_schema_without_nan_or_infinity(run):
    files = sorted(path for folder in (run["out"], run["ingested"]) for path in folder.rglob("*.json"))
    assert sorted(path.stem for path in files if path.parent.name == "results") == sorted(
        ["pipeline", *STAGE_COMMANDS, "logloss-attack", "ingest"])
    assert {"summary.json", "metrics.json", "proxy.output.json", "target.output.json"} <= {p.name for p in files}
    for path in files:
        check_file(path)  # strict parse (no NaN / Infinity literal), then its schema
    for path in (run["out"] / "models" / "metrics.json", run["out"] / "results" / "train.json"):
        assert strict_load(path)["epsilon"] == "inf", path  # no noise: written as "inf", never Infinity


def test_the_report_lists_valid_bounds_first_and_never_a_raw_nan_or_inf(run):
    text = (run["out"] / "report" / "report.html").read_text(encoding="utf-8")
    cells = re.findall(r"<td[^>]*>(.*?)</td>", text)
    assert cells and [cell for cell in cells if cell.strip().lower() in ("nan", "inf", "-inf", "none")] == []
    assert "∞" in cells  # plain LLP's epsilon (no noise) in the settings table
    audit = text[text.index("<h2>Audit result</h2>"):]
    rows = [re.findall(r"<td[^>]*>(.*?)</td>", row)
            for row in re.findall(r"<tr>(.*?)</tr>", audit[:audit.index("</table>")])[1:]]
    conventions = [row[2] for row in rows]
    assert "paper" in conventions and conventions == sorted(conventions, key=lambda c: c != "bonferroni")
    assert all((NOT_VALID in row) == (row[2] == "paper") for row in rows)
    summary = strict_load(run["out"] / "results" / "audit.json")["summary"]
    assert {row[0]: row[-1] == NO_EVIDENCE for row in rows} == {  # the note of a valid bound that is 0 throughout
        row[0]: row[2] == "bonferroni" and summary["best"][row[0]]["max"] == 0.0 for row in rows}
    headline = re.search(r"<strong>(.*?)</strong>", audit).group(1)
    assert headline.endswith(NO_EVIDENCE) == (summary["headline"]["eps_lb"] == 0.0)


def test_the_console_headline_reads_the_claim_and_flags_no_evidence(run):
    headline = strict_load(run["out"] / "results" / "audit.json")["summary"]["headline"]
    printed = run["printed"]["audit"].strip().splitlines()[-1]
    assert printed == f"audit: {headline['text']}" == run["printed"]["run"].strip().splitlines()[-1]
    assert "at claimed eps = inf (non-private)" in printed and not re.search(r"\b(nan|NaN)\b", printed)
    assert printed.endswith(NO_EVIDENCE) == (headline["eps_lb"] == 0.0)
