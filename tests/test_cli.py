"""``lia-spark <command> --help``: what the command does and the config sections it reads, also without pyspark; the
sections agree with the stage declarations."""
from __future__ import annotations

import subprocess
import sys

import pytest
from pipeline_support import REPO

from lia_spark.cli.command_help import ALWAYS_READ, COMMAND_HELP
from lia_spark.cli.main import COMMAND_NAMES, main


@pytest.mark.parametrize("command", ["run", *COMMAND_NAMES])
def test_command_help_says_what_it_does_and_what_it_reads_without_pyspark(monkeypatch, capsys, command):
    monkeypatch.setitem(sys.modules, "pyspark", None)  # as in an environment without pyspark
    monkeypatch.setenv("COLUMNS", "1000")  # argparse wraps to the terminal's width (also at hyphens)
    assert main([command, "--conf", "conf/demo.yaml", "--help"]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    name = "pipeline" if command == "run" else command
    entry = COMMAND_HELP[name]
    assert shown.startswith(f"usage: lia-spark {name} [-h] [--conf FILE] [--json] [--quiet | --verbose] "
                            "[section.key=value ...]")
    assert " ".join(entry.summary.split()) in shown
    assert f"config sections it reads: {', '.join(entry.sections)}, plus run and spark" in shown
    assert f"<run.output_dir>/results/{name}.json" in shown


def _sections(stage, config) -> set[str]:
    """The config sections of the fields a stage declares and of its input tables, but the always read ones."""
    fields = [*stage.fields, *(item.field for item in stage.inputs(config))]
    return {field.split(".", 1)[0] for field in fields} - set(ALWAYS_READ)


def test_the_help_lists_the_sections_of_the_stages_each_command_runs():
    from lia_spark.engine.orchestration.registry import STAGES
    from lia_spark.run.config import Config

    config = Config()
    read = {name: _sections(stage, config) for name, stage in STAGES.items()}
    data = read["generate"] | read["ingest"]
    expected = {name: read[name] for name in ("generate", "ingest", "train", "posteriors", "utility", "audit",
                                               "inject")}
    expected.update({
        "pipeline": data | read["train"] | read["posteriors"] | read["utility"] | read["audit"] | read["report"]
                    | {"tracking"},
        "track": {"tracking"},
        "audit-table": data | read["train"] | read["audit"] | {"table", "tracking"},
        "logloss-attack": read["logloss"] | {"tracking"},
    })
    assert {name: set(entry.sections) for name, entry in COMMAND_HELP.items()} == expected
    assert all(list(entry.sections) == sorted(entry.sections) for entry in COMMAND_HELP.values())


def test_a_reader_that_closes_stdout_early_gets_no_traceback():
    """``lia-spark --help | head -1``: the pipe closes before the help is written; the command ends quietly."""
    process = subprocess.Popen([sys.executable, "-m", "lia_spark.cli.main", "--help"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, cwd=REPO)
    process.stdout.close()  # the reader is gone before the first write
    _, error = process.communicate(timeout=60)
    assert process.returncode == 0 and error == b"", error.decode()


def test_the_commands_log_keeps_warnings_that_repeat_a_reported_error_out():
    """pyspark's "toPandas attempted Arrow optimization" warning quotes the Java stack of an error the command then
    reports itself; other warnings still reach the log."""
    script = ("import warnings\nfrom lia_spark.cli.main import configure_logging\nconfigure_logging()\n"
              "warnings.warn(\"toPandas attempted Arrow optimization because ... Caused by: ...\", UserWarning)\n"
              "warnings.warn(\"a warning of its own\", UserWarning)\n")
    completed = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120,
                               check=True)
    assert "a warning of its own" in completed.stderr and "toPandas" not in completed.stderr, completed.stderr
