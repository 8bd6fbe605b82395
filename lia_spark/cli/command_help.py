"""What each ``lia-spark`` command does and which configuration sections it reads: the text of
``lia-spark <command> --help``, kept here free of pyspark so the help works where Spark is not installed.

The sections of a stage's command are those of the fields its declaration reads and of its input tables
(:class:`lia_spark.engine.runtime.stage.Stage`); a composite command reads those of the stages it runs plus its own
(tests/test_cli.py keeps them equal). ``run`` and ``spark`` are read by every command and not listed.
"""
from __future__ import annotations

import dataclasses

ALWAYS_READ = ("run", "spark")


@dataclasses.dataclass(frozen=True)
class CommandHelp:
    """One command: what it does (``summary``) and the config sections it reads besides :data:`ALWAYS_READ`."""

    summary: str
    sections: tuple[str, ...]

    def epilog(self, command: str) -> str:
        """The closing paragraph of the command's help: its sections and where its result goes."""
        return (f"config sections it reads: {', '.join(self.sections)}, plus {' and '.join(ALWAYS_READ)} (output "
                "folder, seed, reuse, progress lines, the session), as every command does; every key with its "
                "default: conf/defaults.yaml (packaged: --conf defaults; lia-spark config --init copies it); the "
                "resolved config: lia-spark config --show --conf FILE. Full "
                f"result: <run.output_dir>/results/{command}.json, a short summary on stdout, logs on stderr.")


# In the order of lia_spark.engine.orchestration.commands.COMMANDS (tests/test_architecture.py keeps the names equal).
COMMAND_HELP: dict[str, CommandHelp] = {
    "generate": CommandHelp(
        "Generate the synthetic Criteo twin, rows with known click probabilities (docs/math.md §1.2): "
        "<run.output_dir>/data (Parquet by day) and truth (eta); Criteo-format day files with synthetic.write_tsv.",
        ("synthetic",)),
    "ingest": CommandHelp(
        "Ingest the real Criteo files of data.criteo_paths (day_N[.gz], Kaggle train.txt): validated rows into "
        "<run.output_dir>/data (Parquet by day), malformed lines with their file and line number into quarantine.",
        ("data",)),
    "train": CommandHelp(
        "Train the proxy (on models.proxy_day) and the target (on models.target_day, its labels released through "
        "models.training_mechanism; with audit.design=injected the audit's canaries are injected first): "
        "<run.output_dir>/models.",
        ("audit", "data", "models", "pate")),
    "posteriors": CommandHelp(
        "Release the labels of mechanisms.days through every mechanism x epsilon x bag size and compute each row's "
        "exact posterior and the reconstruction advantages: <run.output_dir>/posteriors.",
        ("data", "mechanisms")),
    "utility": CommandHelp(
        "The privacy-utility tradeoff: a target trained per setting of the utility grid, its test AUC against the "
        "mechanism's advantage: <run.output_dir>/utility.",
        ("data", "models", "pate", "utility")),
    "audit": CommandHelp(
        "The label-inference audit of the trained target (injected canaries, or the observational game for a "
        "given model) and its epsilon lower bounds: <run.output_dir>/audit.",
        ("audit",)),
    "inject": CommandHelp(
        "The injected design for a model you train yourself: the target day's rows with every label replaced by y^b "
        "(a counterfactual y1 on a fair coin b, docs/math.md §5.9) in <run.output_dir>/inject/export for your "
        "trainer; the coins stay sealed in inject/sealed for `lia-spark audit audit.model_uri=...`.",
        ("audit", "data", "models")),
    "pipeline": CommandHelp(
        "The whole pipeline (also `lia-spark run`): data -> train -> posteriors -> utility -> audit -> report, the "
        "steps of run.stages, tracked in MLflow; a finished stage is reused while its fingerprint matches.",
        ("audit", "data", "mechanisms", "models", "pate", "synthetic", "tracking", "utility")),
    "track": CommandHelp(
        "Log a finished output folder to MLflow as a new pipeline run, read from the committed outputs (nothing "
        "is recomputed): for a run whose tracking server failed mid-run.",
        ("tracking",)),
    "audit-table": CommandHelp(
        "Table 2: train and audit one target per training mechanism x claimed epsilon of the table grid, on "
        "shared data, resumable per cell: <run.output_dir>/table.",
        ("audit", "data", "models", "pate", "synthetic", "table", "tracking")),
    "logloss-attack": CommandHelp(
        "Label inference from log-loss scores against a Spark oracle holding the labels of logloss.day "
        "(docs/math.md §8): <run.output_dir>/logloss.",
        ("data", "logloss", "tracking")),
}
