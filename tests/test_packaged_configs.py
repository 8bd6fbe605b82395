"""The configs that ship in the wheel: ``--conf demo`` by name, ``lia-spark config --init``, and what help and errors
tell an installed user (the installed wheel itself: tests/test_spark_submit.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

from lia_spark.cli.main import main
from lia_spark.run.checks import ConfigError
from lia_spark.run.config import load_config
from lia_spark.run.packaged_configs import PACKAGED_CONFIGS, config_source, write_packaged_configs

CONF = Path(__file__).resolve().parent.parent / "conf"


def test_every_file_of_conf_is_a_packaged_config():
    assert sorted(PACKAGED_CONFIGS) == sorted(path.stem for path in CONF.glob("*.yaml"))


@pytest.mark.parametrize("name", PACKAGED_CONFIGS)
def test_a_packaged_config_by_name_is_the_repositorys_file(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # an empty folder: no conf/ here
    assert load_config(name) == load_config(CONF / f"{name}.yaml") == load_config(f"{name}.yaml")
    assert config_source(name).read_text(encoding="utf-8") == (CONF / f"{name}.yaml").read_text(encoding="utf-8")


def test_a_file_in_the_working_folder_wins_over_the_packaged_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("demo").write_text("run: {name: mine}\n", encoding="utf-8")
    assert load_config("demo").run.name == "mine"


@pytest.mark.parametrize("path", ["conf/demo.yaml", "absent.yaml", "/nowhere/demo"])
def test_a_missing_file_names_the_packaged_configs_and_init(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a path with a folder never silently becomes a packaged config
    with pytest.raises(ConfigError, match=r"--conf: file not found, got .*packaged configs, by name: demo, defaults, "
                                          r"audit_table.*lia-spark config --init"):
        load_config(path)


def test_init_writes_the_packaged_configs_and_never_overwrites_a_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["config", "--init"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"wrote conf/{name}.yaml" for name in PACKAGED_CONFIGS]
    for name in PACKAGED_CONFIGS:
        assert (tmp_path / "conf" / f"{name}.yaml").read_bytes() == (CONF / f"{name}.yaml").read_bytes()
    edited = tmp_path / "conf" / "demo.yaml"
    edited.write_text("run: {name: edited}\n", encoding="utf-8")
    assert main(["config", "--init"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"kept conf/{name}.yaml (already there; not overwritten)"
                                                    for name in PACKAGED_CONFIGS]
    assert edited.read_text(encoding="utf-8") == "run: {name: edited}\n"
    written, kept = write_packaged_configs(tmp_path / "elsewhere")
    assert [path.name for path in written] == [f"{name}.yaml" for name in PACKAGED_CONFIGS] and kept == []


def test_init_into_a_file_fails_in_one_line_naming_it(tmp_path, capsys):
    blocker = tmp_path / "conf"
    blocker.write_text("not a folder\n", encoding="utf-8")
    assert main(["config", "--init", str(blocker)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("lia-spark: config --init: the folder to write into is a file") and str(blocker) in line
    assert blocker.read_text(encoding="utf-8") == "not a folder\n"


def test_help_names_the_packaged_configs(capsys):
    assert main(["--help"]) == 0
    assert "config --init" in capsys.readouterr().out
    assert main(["audit", "--help"]) == 0
    assert "packaged one by name (demo, defaults, audit_table" in " ".join(capsys.readouterr().out.split())


def test_show_reads_a_packaged_config_by_name(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["config", "--show", "--conf", "demo"]) == 0
    assert "name: demo" in capsys.readouterr().out


def test_a_notebook_outside_databricks_starts_no_session_to_find_its_config(tmp_path):
    """The workspace path's {user} is looked up only on Databricks: elsewhere the notebook falls back to the packaged
    demo without starting Spark, so its config's spark.remote decides the session (a classic one started first
    would be the one every later get_spark returned)."""
    import subprocess
    import sys

    probe = ("from pyspark.sql import SparkSession\n"
             "from lia_spark.cli.main import WORKSPACE_CONF, notebook_conf\n"
             "print(notebook_conf(WORKSPACE_CONF, {}), SparkSession.getActiveSession())")
    found = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert found.returncode == 0 and found.stdout.split() == ["demo", "None"], found.stderr[-2000:]

