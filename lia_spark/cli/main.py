"""Command line: ``lia-spark <stage> --conf FILE [section.key=value ...]`` and the shared job entry point.

Every spark-submit job in ``jobs/`` is ``job_main(command, argv)``: parse ``--conf`` and overrides,
validate the config, get (or reuse) the SparkSession, run one library function, write its full result as
strict JSON to ``<run.output_dir>/results/<command>.json`` and print a short summary on stdout (logs go to
stderr). ``lia-spark config`` prints the resolved config as YAML; ``lia-spark --version`` the version.
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import io
import logging
import os
import signal
import sys
import threading
import time
import warnings
from typing import Any, Mapping, Sequence, TextIO

import yaml

from lia_spark import __version__
from lia_spark.cli.command_help import COMMAND_HELP
from lia_spark.run import interrupts, layout
from lia_spark.run.activity import doing, heartbeat
from lia_spark.run.checks import ConfigError
from lia_spark.run.config import Config, load_config
from lia_spark.run.interrupts import SIGNAL_EXITS, Terminated
from lia_spark.run.interrupts import received as received_signals
from lia_spark.run.json_output import strict_json
from lia_spark.run.packaged_configs import INIT_FOLDER, PACKAGED_CONFIGS, write_packaged_configs
from lia_spark.run.requirements import check_requirements

logger = logging.getLogger("lia_spark")

WORKSPACE_CONF = "/Workspace/Users/{user}/lia_spark/conf/demo.yaml"
# The commands of lia_spark.engine.orchestration.commands.COMMANDS (named here so --help needs no pyspark; a test
# keeps them equal)
COMMAND_NAMES = tuple(COMMAND_HELP)
SPARK_MISSING = (f"lia-spark: pyspark is not installed; install the wheel of `make wheel` with its spark extra (`pip "
                 f"install 'dist/lia_spark-{__version__}-py3-none-any.whl[spark]'`), or run where Spark is provided (a "
                 "Databricks cluster, spark-submit)")


def _parser(prog: str, description: str, epilog: str = "") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description, epilog=epilog, allow_abbrev=False)
    parser.add_argument("--conf", metavar="FILE",
                        help=f"YAML config file, or a packaged one by name ({', '.join(PACKAGED_CONFIGS)}: every key "
                             "with its default, commented); `lia-spark config --init` copies them into ./conf")
    parser.add_argument("overrides", nargs="*", metavar="section.key=value", help="override one config value")
    return parser


def command_parser(command: str) -> argparse.ArgumentParser:
    """The arguments of ``lia-spark <command>`` (:data:`COMMAND_NAMES`): ``--conf FILE``, overrides, what stdout
    carries (``--json``) and how much the log on stderr says (``--quiet``, ``--verbose``); its help says what the
    command does and which config sections it reads (:data:`lia_spark.cli.command_help.COMMAND_HELP`)."""
    entry = COMMAND_HELP[command]
    parser = _parser(f"lia-spark {command}", entry.summary, entry.epilog(command))
    parser.add_argument("--json", action="store_true",
                        help="print the command's result document (JSON, as results/<command>.json) on stdout "
                             "instead of the summary lines")
    talk = parser.add_mutually_exclusive_group()
    talk.add_argument("--quiet", action="store_true", help="log only warnings and errors on stderr")
    talk.add_argument("--verbose", action="store_true", help="log lia-spark's debug messages on stderr too")
    return parser


def config_from_args(argv: Sequence[str] | None, parser: argparse.ArgumentParser) -> Config:
    """Parse ``--conf FILE`` plus ``section.key=value`` overrides with ``parser`` into a validated Config."""
    args = parser.parse_args(argv)
    return load_config(args.conf, args.overrides)


def log_level(args: argparse.Namespace) -> int:
    """The log level ``--quiet`` (WARNING) or ``--verbose`` (DEBUG) asks for; INFO otherwise."""
    return logging.WARNING if args.quiet else logging.DEBUG if args.verbose else logging.INFO


def console_stderr() -> io.TextIOBase | TextIO:
    """Where logs and the failure line go: stderr; under spark-submit, whose launcher merges this driver's stderr
    into its stdout, the launcher's own stderr (:func:`lia_spark.engine.spark.session.launcher_stderr`)."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # not started by a Spark JVM: no pyspark import needed
        return sys.stderr
    from lia_spark.engine.spark.session import launcher_stderr

    return launcher_stderr() or sys.stderr


# MLflow's loggers keep no handler of their own on the process's stderr, which spark-submit's launcher merges into
# its stdout (stdout carries lia-spark's summary only); their records go to lia-spark's log. Unless the user chose.
# (MLflow's "View run ... at" URL lines are turned off by lia_spark.tracking.session for every launcher.)
MLFLOW_CONSOLE = {"MLFLOW_CONFIGURE_LOGGING": "false"}
# pyspark's warning when toPandas fails mid-computation quotes the whole Java stack of the error, which then reaches
# the command anyway (its one line; the traceback in the log): ~80 more lines on the console when Ctrl-C cancels one.
REPEATED_WARNINGS = (r"toPandas attempted Arrow optimization",)
QUIET_LOGGERS = {"py4j": logging.WARNING, "alembic": logging.WARNING, "sqlalchemy.engine": logging.WARNING,
                 "huey": logging.WARNING, "urllib3.connectionpool": logging.ERROR}


def configure_logging(level: int = logging.INFO) -> None:
    """Timestamped logs at ``level`` (INFO by default; DEBUG for lia_spark only) for lia_spark, MLflow and Python's
    warnings on :func:`console_stderr` (MLflow's own handler off: :data:`MLFLOW_CONSOLE`); Spark's own logs stay at
    WARN, MLflow's database migrations at WARNING; urllib3's per-attempt "Retrying" lines (MLflow's HTTP calls) are
    left out: a tracking call that fails after its retries gets one lia_spark warning naming the server; so are
    warnings that repeat an error the command reports (:data:`REPEATED_WARNINGS`)."""
    for name, value in MLFLOW_CONSOLE.items():
        os.environ.setdefault(name, value)
    logging.basicConfig(level=max(level, logging.INFO), format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=console_stderr())
    logging.getLogger().setLevel(max(level, logging.INFO))
    logging.getLogger("lia_spark").setLevel(level)
    logging.captureWarnings(True)  # Python warnings (MLflow's, pandas') as log records, on the same stream
    for message in REPEATED_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=UserWarning)
    for name, level in QUIET_LOGGERS.items():
        logging.getLogger(name).setLevel(level)


def notebook_parameters(namespace: Mapping[str, Any], defaults: Mapping[str, str]) -> dict[str, str]:
    """Notebook parameters: Databricks widgets when ``dbutils`` is in ``namespace``, else ``$LIA_<NAME>`` or the
    default.

    Call as ``notebook_parameters(globals(), {"conf": "conf/demo.yaml"})``; on Databricks each name becomes
    a text widget, locally (CI, plain ``python notebook.py``) environment variables set the values.
    """
    dbutils = namespace.get("dbutils")
    values: dict[str, str] = {}
    for name, default in defaults.items():
        if dbutils is not None:
            dbutils.widgets.text(name, default, name)
            values[name] = dbutils.widgets.get(name)
        else:
            values[name] = os.environ.get(f"LIA_{name.upper()}", default)
    return values


def notebook_conf(path: str, namespace: Mapping[str, Any]) -> str | None:
    """The config file a notebook loads: ``path`` with ``{user}`` replaced by the session's ``current_user()`` (on
    Databricks the workspace user, as in :data:`WORKSPACE_CONF`). Outside Databricks (no ``dbutils`` in
    ``namespace``) no session is started here (the config's ``spark.remote`` decides which one the notebook gets),
    and a file that does not exist, a ``{user}`` path among them, falls back to the packaged demo config
    (``demo``, read by :func:`lia_spark.run.config.load_config`)."""
    on_databricks = "dbutils" in namespace
    if "{user}" in path and on_databricks:  # the cluster's session is active there: the lookup starts nothing
        from lia_spark.engine.spark.session import get_spark

        row = get_spark().sql("SELECT current_user()").first()
        if row is None:
            raise ValueError("SELECT current_user() returns one row")
        path = path.replace("{user}", str(row[0]))
    if on_databricks or os.path.exists(path):
        return path
    logger.info("no config file %s outside Databricks: using lia-spark's packaged demo config (--conf demo)", path)
    return "demo"


def notebook_display(frame: Any, namespace: Mapping[str, Any]) -> None:
    """A table in a notebook: Databricks' ``display()`` when ``namespace`` (the notebook's globals) has it (a
    sortable, scrollable grid), else the frame (Spark or pandas) printed as a pandas table."""
    if "display" in namespace:
        namespace["display"](frame)
        return
    table = frame.toPandas() if hasattr(frame, "toPandas") else frame
    print(table.to_string(index=False, max_colwidth=40))


def result_path(config: Config, command: str) -> str:
    """``<run.output_dir>/results/<command>.json``: the full result of the last run of a command."""
    return layout.output_path(config, layout.RESULTS, f"{command}.json")


def config_yaml(config: Config) -> str:
    """The resolved config as YAML that :func:`lia_spark.run.config.load_config` reads back to the same config."""
    def plain(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {key: plain(item) for key, item in value.items()}
        return [plain(item) for item in value] if isinstance(value, (list, tuple)) else value

    return yaml.safe_dump(plain(dataclasses.asdict(config)), sort_keys=False, default_flow_style=None, width=110)


CANCEL_WAIT_SECONDS = 15.0  # how long a signal waits for Spark to cancel the running jobs before unwinding
CANCEL_REPEAT_SECONDS = 0.5  # after a signal that could not unwind at once: how often later jobs are cancelled
_unwound = threading.Event()  # set once a command stopped by a signal has unwound, or has ended (job_main)
_cancellers: list[threading.Thread] = []  # the threads a signal started to cancel Spark's jobs (joined on unwinding)


def _stop(signum: int, frame: Any) -> None:
    """Ctrl-C or SIGTERM: remember it (:mod:`lia_spark.run.interrupts`), cancel the running Spark jobs (as pyspark's
    own SIGINT handler does) so no task writes into a staging folder while it is deleted, then unwind.

    The cancelling runs in a thread of its own: this one may be inside a py4j call, whose connection a call from the
    handler would re-enter. Inside a py4j call the handler does not raise either: an exception raised there leaves
    the connection one answer behind (every later call, the clean-up's included, would read the previous call's
    answer); the call ends with the jobs' cancellation instead, in step with the JVM, and that error unwinds:
    job_main reports the signal, not the error, and code that goes on after a failure (a failing audit-table cell,
    a best-effort MLflow call) or starts a stage asks ``interrupts.check()`` first. A call that runs no job
    (a file listing) or whose job starts just after the cancel ends normally, though: until the command has unwound,
    a thread cancels every job it starts (:func:`_cancel_until_unwound`), and a command that ends all the same
    exits as stopped (job_main)."""
    received_signals.append(signum)
    if "pyspark" in sys.modules:  # a session may run: no import of pyspark before that
        canceller = threading.Thread(target=_cancel_spark_jobs, name="lia-spark-cancel", daemon=True)
        _cancellers.append(canceller)
        canceller.start()
        canceller.join(CANCEL_WAIT_SECONDS)
        if _inside_py4j(frame):
            if len(received_signals) == 1:  # one such thread per command
                _start_cancelling_later()
            return
    raise SIGNAL_EXITS[signum][1]()


def _start_cancelling_later() -> None:
    """Start :func:`_cancel_until_unwound` with a new event: the one job_main sets once the command has unwound."""
    global _unwound
    _unwound = threading.Event()
    later = threading.Thread(target=_cancel_until_unwound, args=(_unwound,), name="lia-spark-cancel-later", daemon=True)
    _cancellers.append(later)
    later.start()


def _cancel_until_unwound(unwound: threading.Event) -> None:
    """Every CANCEL_REPEAT_SECONDS until ``unwound`` is set (or the recorded signals are cleared), cancel the jobs a
    stopped command starts before its error unwinds it."""
    while not unwound.wait(CANCEL_REPEAT_SECONDS) and received_signals:
        _cancel_spark_jobs()


def _inside_py4j(frame: Any) -> bool:
    """True when ``frame`` or a caller of it runs py4j's code (a call to the JVM waiting for its answer)."""
    while frame is not None:
        if str(frame.f_globals.get("__name__", "")).startswith("py4j."):
            return True
        frame = frame.f_back
    return False


def _cancel_spark_jobs() -> None:
    """Cancel this process's running Spark jobs; a failure is logged (the command unwinds anyway)."""
    from lia_spark.engine.spark.session import cancel_running_jobs

    try:
        cancel_running_jobs()
    except Exception as error:  # noqa: BLE001 - the signal, not this, decides how the command ends
        logger.warning("could not cancel the running Spark jobs: %s", error)


def _end_spark_output() -> None:
    """Let the cancelled jobs' tasks end, then Spark itself (its context; the JVM when this process launched it), so
    what Spark prints about them comes before the command's last line; a failure is logged (the command ends
    anyway)."""
    from lia_spark.engine.spark.session import end_spark_output, wait_for_killed_tasks

    try:
        wait_for_killed_tasks()
        end_spark_output()
    except Exception as error:  # noqa: BLE001 - the signal, not this, decides how the command ends
        logger.warning("could not end Spark's cancelled work: %s", error)


def _stop_on_signals() -> dict[int, Any]:
    """Install :func:`_stop` for SIGINT and SIGTERM and return the handlers it replaced (none outside the main
    thread: signals reach no other)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {signum: signal.signal(signum, _stop) for signum in SIGNAL_EXITS}


def _interrupted(name: str, error: BaseException) -> int:
    """Log how ``name`` was stopped, print the one line and return 130 (SIGINT) or 143 (SIGTERM). The threads that
    cancel Spark's jobs end first: one still inside a call to the JVM when Spark stops would have py4j log that
    call's failure (to the root logger) after the command's last line."""
    _unwound.set()
    while _cancellers:
        _cancellers.pop().join(CANCEL_WAIT_SECONDS)
    signum = received_signals[0] if received_signals else signal.SIGINT
    logger.warning("%s: interrupted by %s", name, signal.Signals(signum).name)
    logger.debug("%s: where the signal stopped it", name, exc_info=error)  # Spark's cancellation, when it came first
    if "pyspark" in sys.modules:  # as in _stop: no session ran before pyspark was imported
        _end_spark_output()
    print(f"lia-spark: interrupted ({signal.Signals(signum).name}); the lock is released, finished stages are kept "
          "and the same command resumes", file=console_stderr())
    return SIGNAL_EXITS[signum][0]


def job_main(name: str, argv: Sequence[str] | None = None) -> int:
    """Run command ``name`` (:data:`COMMAND_NAMES`) holding the output folder's run lock: exit code 0 on success, 2
    on a usage error, 1 on a failed stage, 3 on a FINDING with audit.fail_on_finding (:func:`finding_exit`), 130 /
    143 when Ctrl-C / SIGTERM stops it (Spark's jobs cancelled, the staging folder and the lock removed, finished
    stages kept); a failure ends as one line on stderr
    (:func:`lia_spark.run.failures.failure_line`), its traceback goes to the log."""
    args = command_parser(name).parse_args(list(argv or []))  # a bad flag: argparse's usage line, exit 2
    configure_logging(log_level(args))
    received_signals.clear()
    previous = _stop_on_signals()
    try:
        config = load_config(args.conf, args.overrides)
        check_requirements(config, name)  # before pyspark is imported and the JVM starts
        from lia_spark.engine.spark.deployment import start_spark

        with heartbeat(name, config.run.progress_seconds):  # no silence longer than that from here on
            spark = start_spark(config.spark)
            _stop_on_signals()  # again: the SparkContext installs its own SIGINT handler
            result, seconds, path = execute_command(name, spark, config)
        interrupts.check()  # a signal that came inside a py4j call no later job answered still stops the command
    except (KeyboardInterrupt, Terminated) as interrupt:
        return _interrupted(name, interrupt)
    except Exception as error:  # noqa: BLE001 - the command reports any failure as one clear line
        return _interrupted(name, error) if received_signals else report_failure(name, error)
    finally:
        _unwound.set()
        _cancellers.clear()  # a command that ended all the same leaves no thread to join for the next one
        for signum, handler in previous.items():  # a caller in this process (a test, a notebook) gets its own back
            signal.signal(signum, handler)
    if args.json:
        print(strict_json(result))
    else:
        print(f"{name}: done in {seconds:.1f} s; full result (JSON): {path}")
        if hasattr(result, "console_summary"):
            print(result.console_summary())
    return finding_exit(config, result)


def execute_command(name: str, spark: Any, config: Config) -> tuple[Any, float, str]:
    """Run command ``name`` (``run`` or ``pipeline``, or one of :data:`COMMAND_NAMES`) on ``spark`` holding the
    output folder's run lock (leftovers of an interrupted attempt removed first) and write its result document to
    ``<run.output_dir>/results/<name>.json``: (result, seconds, that path).

    Raises:
        ConfigError: an unknown command, or paths of the config that overlap
            (:func:`lia_spark.run.layout.check_paths_apart`), before the lock is taken; any failure of the command
            itself propagates.
    """
    from lia_spark.engine.orchestration.commands import COMMANDS
    from lia_spark.engine.orchestration.registry import remove_leftovers
    from lia_spark.engine.runtime.lock import run_lock
    from lia_spark.engine.runtime.outputs import write_text

    name = "pipeline" if name == "run" else name
    if name not in COMMANDS:
        raise ConfigError(f"command: must be one of run, {', '.join(COMMANDS)}, got {name!r}")
    layout.check_paths_apart(config)
    with run_lock(spark, config.run.output_dir, command=f"lia-spark {name}", max_age_hours=config.run.stale_lock_hours):
        with doing("looking for what interrupted runs left in the output folder"):
            remove_leftovers(spark, config)  # holding the lock: staging folders are an interrupted attempt's
        started = time.monotonic()
        logger.info("stage %s: started", name)
        with doing(f"running {name}"):
            result = COMMANDS[name](spark, config)
        seconds = time.monotonic() - started
        logger.info("stage %s: finished in %.1f s", name, seconds)
        path = result_path(config, name)
        write_text(spark, path, strict_json(result) + "\n")
    return result, seconds, path


FINDING_EXIT = 3


def finding_exit(config: Config, result: Any) -> int:
    """:data:`FINDING_EXIT` when audit.fail_on_finding is set and the command's audit headline is a FINDING (a bound
    without assumption above the claimed epsilon), with one line on stderr; else 0. The outputs are committed
    either way: the finding is a result, not a failure."""
    headline = getattr(result, "headline", None)
    if not config.audit.fail_on_finding or headline is None or not headline.is_finding:
        return 0
    print(f"lia-spark: FINDING: eps >= {headline.eps_lb:.3f} exceeds the claimed eps = {headline.claimed_epsilon:g} "
          f"(audit.fail_on_finding=true: exit code {FINDING_EXIT})", file=console_stderr())
    return FINDING_EXIT


def report_failure(command: str, error: BaseException) -> int:
    """Log ``error``'s traceback, print its one line on stderr and return the exit code."""
    from lia_spark.run.failures import USAGE_EXIT, failure_line

    line, code = failure_line(error)
    if code == USAGE_EXIT:
        logger.debug("%s: usage error", command, exc_info=error)
    else:
        logger.error("%s failed", command, exc_info=error)
    print(f"lia-spark: {line}", file=console_stderr())
    return code


def show_config(argv: Sequence[str]) -> int:
    """``lia-spark config [--show] [--conf FILE] [overrides]``: the resolved config as YAML on stdout;
    ``lia-spark config --init [FOLDER]``: the packaged configs copied into ./conf (or FOLDER), existing files kept."""
    if argv and argv[0] == "--init":
        return init_configs(argv[1:])
    arguments = [item for item in argv if item != "--show"]
    try:
        config = config_from_args(arguments, _parser("lia-spark config", "Print the resolved config (defaults <- "
                                                     "--conf file <- overrides) as YAML."))
    except Exception as error:  # noqa: BLE001 - as job_main: one line, the exit code of lia_spark.run.failures
        return report_failure("config", error)
    print(config_yaml(config), end="")
    return 0


def init_configs(argv: Sequence[str]) -> int:
    """``lia-spark config --init [FOLDER]``: write the packaged configs (:data:`PACKAGED_CONFIGS`) into FOLDER; one
    stdout line per file, written or kept."""
    parser = argparse.ArgumentParser(prog="lia-spark config --init", allow_abbrev=False,
                                     description="Copy lia-spark's packaged configs (demo, defaults: every key "
                                                 "commented, audit_table) into FOLDER to edit; a file already "
                                                 "there is kept, never overwritten.")
    parser.add_argument("folder", nargs="?", default=INIT_FOLDER, metavar="FOLDER",
                        help=f"where to write them (default: ./{INIT_FOLDER})")
    try:
        written, kept = write_packaged_configs(parser.parse_args(argv).folder)
    except (ConfigError, OSError) as error:
        return report_failure("config", error)
    for path in written:
        print(f"wrote {path}")
    for path in kept:
        print(f"kept {path} (already there; not overwritten)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``lia-spark {run,STAGE,config} [--conf FILE] [overrides]``: ``run`` is the whole pipeline, else one stage's
    job; ``--help`` (stdout, exit 0), ``--version``. A reader that closes stdout early (``lia-spark --help | head``)
    ends the output quietly with exit 0: the command's work is done, only its reader left."""
    try:
        return _dispatch(list(sys.argv[1:] if argv is None else argv))
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's flush at exit would fail again
        return 0


def _dispatch(argv: list[str]) -> int:
    commands = {"run": "pipeline", **{name: name for name in COMMAND_NAMES}}
    usage = (f"usage: lia-spark {{{', '.join(commands)}}} [--conf FILE] [--json] [--quiet | --verbose] "
             "[section.key=value ...]\n"
             "       lia-spark config [--show] [--conf FILE] [section.key=value ...]\n"
             "       lia-spark config --init [FOLDER]\n"
             "       lia-spark --version\n"
             "  run = the whole pipeline (data -> train -> posteriors -> audit -> report, tracked in MLflow)\n"
             "  config [--show] = print the resolved config (defaults <- --conf file <- overrides) as YAML\n"
             f"  config --init = copy the packaged configs ({', '.join(PACKAGED_CONFIGS)}) into ./conf to edit; "
             "--conf demo reads the packaged one\n"
             "  track = log a finished output folder to MLflow (after a tracking server failed mid-run)\n"
             "  <command> --help = what the command does and the config sections it reads\n"
             "  results: <run.output_dir>/results/<command>.json")
    if argv and argv[0] in ("-h", "--help"):
        print(usage)
        return 0
    if argv and argv[0] == "--version":
        print(f"lia-spark {__version__}")
        return 0
    if argv and argv[0] == "config":
        return show_config(argv[1:])
    if not argv or argv[0] not in commands:
        print(usage, file=sys.stderr)
        print(f"lia-spark: unknown command {argv[0]!r}" if argv else "lia-spark: a command is required",
              file=sys.stderr)
        return 2
    command, rest = argv[0], argv[1:]
    if "-h" in rest or "--help" in rest:
        command_parser(commands[command]).print_help()
        return 0
    if importlib.util.find_spec("pyspark") is None:
        print(SPARK_MISSING, file=sys.stderr)
        return 2
    return job_main(commands[command], rest)


if __name__ == "__main__":
    sys.exit(main())
