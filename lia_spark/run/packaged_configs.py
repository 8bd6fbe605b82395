"""The configs that ship with lia-spark: the repository's ``conf/demo.yaml``, ``conf/defaults.yaml`` (every key with
its default, commented) and ``conf/audit_table.yaml``, inside the wheel as ``lia_spark/conf/`` (setup.py copies them
when it builds), so an installed user has them without a checkout.

``--conf demo`` (a bare name, or ``demo.yaml``) reads the packaged file when no file of that name exists in the working
folder; ``lia-spark config --init [FOLDER]`` copies them into ``./conf`` (or FOLDER) to edit, never over a file.
"""
from __future__ import annotations

import importlib.resources
import os
from pathlib import Path
from typing import Protocol

from lia_spark.run.checks import ConfigError

PACKAGED_CONFIGS = ("demo", "defaults", "audit_table")
# A checkout (or an editable install) has them beside the package, not in it.
CHECKOUT_CONFIGS = Path(__file__).resolve().parents[2] / "conf"
INIT_FOLDER = "conf"


class ConfigText(Protocol):
    """A config file to read: a path, or a file inside the installed package (a wheel or a zip on the path)."""

    def is_file(self) -> bool: ...

    def read_text(self, encoding: str = ...) -> str: ...

    def read_bytes(self) -> bytes: ...


def packaged_config(name: str) -> ConfigText | None:
    """The packaged config ``name`` (:data:`PACKAGED_CONFIGS`, with or without ``.yaml``): the wheel's copy, else the
    checkout's; None for any other name."""
    stem = name[:-len(".yaml")] if name.endswith(".yaml") else name
    if stem not in PACKAGED_CONFIGS:
        return None
    installed = importlib.resources.files("lia_spark").joinpath("conf", f"{stem}.yaml")
    if installed.is_file():
        return installed
    checkout = CHECKOUT_CONFIGS / f"{stem}.yaml"
    return checkout if checkout.is_file() else None


def config_source(path: str | os.PathLike) -> ConfigText:
    """What ``--conf path`` reads: the file at ``path`` if there is one, else the packaged config of that bare name;
    a missing file fails naming the packaged configs and ``lia-spark config --init``."""
    local = Path(path)
    if local.is_file():
        return local
    packaged = packaged_config(str(path)) if local.name == str(path) else None
    if packaged is not None:
        return packaged
    raise ConfigError(f"--conf: file not found, got {str(path)!r} (packaged configs, by name: "
                      f"{', '.join(PACKAGED_CONFIGS)}, e.g. --conf demo; `lia-spark config --init` copies them "
                      f"into ./{INIT_FOLDER} to edit)")


def write_packaged_configs(folder: str | os.PathLike = INIT_FOLDER) -> tuple[list[Path], list[Path]]:
    """Copy every packaged config into ``folder`` (created if needed): (written, kept) paths; a file already there is
    kept as it is, never overwritten."""
    target = Path(folder)
    if target.exists() and not target.is_dir():
        raise ConfigError(f"config --init: the folder to write into is a file, got {str(target)!r}")
    target.mkdir(parents=True, exist_ok=True)
    written, kept = [], []
    for name in PACKAGED_CONFIGS:
        source = packaged_config(name)
        if source is None:
            raise ConfigError(f"config --init: lia-spark's packaged {name}.yaml is missing from this installation, "
                              "got none; reinstall the wheel (`make wheel` builds it with conf/ inside)")
        destination = target / f"{name}.yaml"
        try:
            with destination.open("x", encoding="utf-8") as handle:  # "x": an existing file is never replaced
                handle.write(source.read_text(encoding="utf-8"))
        except FileExistsError:
            kept.append(destination)
            continue
        written.append(destination)
    return written, kept
