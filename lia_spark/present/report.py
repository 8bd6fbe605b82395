"""One self-contained HTML page per pipeline run that states its findings first, then the evidence.

Order: the audit headline and every epsilon bound with its confidence and delta (the valid bounds first, then the
paper's convention, labelled as not valid; a valid bound of 0 flagged as no evidence at this size); one table of the
mechanism settings (mean additive advantage, 98th percentile of |I|, share of infinite |I|, target AUC;
:mod:`lia_spark.present.findings`); the mechanisms side by side at matched utility; then per step its plots (PNG,
embedded) with its metrics (paper-convention values last, labelled) and CSV tables folded away; last the git commit,
package versions and config. No cell reads a raw nan or inf (:mod:`lia_spark.records.wording`). Built from the stage
results' ``metrics()``, ``artifacts()``, ``setting_rows()`` and the audit's summary, so any plot or table a stage adds
shows up without changes here. Rendering only (no Spark): the pipeline (the report stage,
:mod:`lia_spark.engine.report.stage`) commits it to ``OUT/report/report.html`` and logs it to MLflow.
"""
from __future__ import annotations

import base64
import csv
import datetime
import html
import math
import tempfile
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from lia_spark.kernels import audit_sweep
from lia_spark.names import EPSILON, PAPER
from lia_spark.present import findings
from lia_spark.records.audit_summary import AuditSummary
from lia_spark.records.wording import NO_EVIDENCE, NOT_COMPUTED, NOT_VALID, bound_text, ceiling_text, number_text
from lia_spark.run.config import Config
from lia_spark.run.environment import git_commit
from lia_spark.run.fingerprint import recorded_versions

REPORT_FILE = "report.html"
MAX_TABLE_ROWS = 60
STYLE = """body{font-family:sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse;margin:.5em 0 1.5em}
td,th{border:1px solid #ccc;padding:2px 8px;text-align:right;font-size:90%}th{background:#eee}
td:first-child,th:first-child{text-align:left}img{max-width:100%;border:1px solid #ddd;margin:.5em 0}
.failed{color:#b00}.skipped{color:#888}details{margin:.5em 0 1em}summary{cursor:pointer;color:#246}"""


def _format(value: Any) -> str:
    """A table cell's text: numbers to 6 significant digits, NaN and None as "n/a", infinities as "∞"."""
    if value is None:
        return NOT_COMPUTED
    return number_text(value) if isinstance(value, float) else str(value)


def _cell(text: str) -> str:
    try:
        return html.escape(_format(float(text)))
    except ValueError:
        return html.escape(text)


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(name))}</th>" for name in header)
    body = "".join("<tr>" + "".join(f"<td>{_cell(str(v)) if isinstance(v, str) else html.escape(_format(v))}</td>"
                                    for v in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _csv_section(path: Path) -> str:
    with path.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    if not rows:
        return f"<p>{html.escape(path.name)}: empty</p>"
    header, body = rows[0], rows[1:]
    note = f" (first {MAX_TABLE_ROWS} of {len(body)} rows)" if len(body) > MAX_TABLE_ROWS else ""
    return f"<h4>{html.escape(path.name)}{note}</h4>" + _table(header, body[:MAX_TABLE_ROWS])


def _is_paper(metric: str) -> bool:
    return PAPER in metric.split("_")  # e.g. eps_binomial_paper_mean


def _metrics_table(metrics: Mapping[str, float]) -> str:
    """A step's metrics by name, the values of the paper's convention last, each labelled as not a valid bound."""
    rows = sorted(metrics.items(), key=lambda item: (_is_paper(item[0]), item[0]))
    if not any(_is_paper(name) for name in metrics):
        return _table(["metric", "value"], rows)
    return _table(["metric", "value", "note"], [(name, value, NOT_VALID if _is_paper(name) else "")
                                                for name, value in rows])


def _image(path: Path) -> str:
    encoded = base64.b64encode(path.read_bytes()).decode("ascii")
    return (f'<h4>{html.escape(path.name)}</h4><img alt="{html.escape(path.name)}" '
            f'src="data:image/png;base64,{encoded}">')


def _frame_table(frame: Any) -> str:
    return _table(list(frame.columns), list(frame.itertuples(index=False)))


def _headline(steps: Sequence[Any]) -> list[str]:
    """The audit's valid bound beside the claimed epsilon, first on the page (a finding in red), then every bound
    with its confidence and delta (:func:`lia_spark.present.findings.bounds_table`)."""
    audit = next((o.result for o in steps if o.step == "audit" and o.result is not None), None)
    if audit is None:
        return []
    headline = audit.headline
    style = " class='failed'" if headline.is_finding else ""
    return ["<h2>Audit result</h2>", f"<p{style}><strong>{html.escape(headline.text())}</strong></p>",
            *_ceiling(audit.summary),
            "<p>Every epsilon lower bound (best over the sweep; mean and std over the repetitions) with the confidence "
            "and delta it holds at, the valid bounds first. Binomial bounds hold at <code>audit.delta</code>, GDP "
            "bounds at the delta their mu was converted at. A valid bound of 0 is " + html.escape(NO_EVIDENCE) + ". "
            "The rows after the valid ones use the paper's convention (the best sweep point, each at the full "
            f"confidence): {NOT_VALID}.</p>", _frame_table(findings.bounds_table(audit.summary)),
            *_tau_sensitivity(audit.summary)]


def _ceiling(summary: AuditSummary) -> list[str]:
    """What the audit could have found (docs/math.md §5.12), beside its bound, and what the scores compared with."""
    ceiling = summary.ceiling
    described = {"shadow_prediction": "the label-blind shadow fits' baseline (docs/math.md §5.13)",
                 "proxy_prediction": "the proxy's predictions"}
    baseline = " and with ".join(described[column] for column in summary.baselines)
    exact = ceiling_text(ceiling.eps_lb, ceiling.eps_lb_95, ceiling.claimed_epsilon)
    how = ("" if ceiling.accuracy >= 1.0 else
           f" (each guess right with probability exactly {ceiling.accuracy:.4g}, the most the claim allows; typical: "
           f"the bound at the expected counts; the percentile over {audit_sweep.CEILING_DRAWS:,} simulated audits; "
           f"a reference, not a cap)")
    return [f"<p>Ceiling (docs/math.md §5.12): with {summary.canaries} canaries, {summary.tests} tests and this "
            f"confidence, {html.escape(exact + how)}. The scores compared the target's predictions with "
            f"{html.escape(baseline)}.</p>"]


def _tau_sensitivity(summary: AuditSummary) -> list[str]:
    """Observational design only: the proxy's measured error and the bound at it (on the twin), the break-even tau*,
    the label-blind reference at the headline's tau (with the calibrated figure, labelled not a bound) and the
    first repetition's bound at each hypothetical tau (a bound only at taus that cover the proxy's error)."""
    checks = summary.observational
    if checks is None:
        return []
    by_tau, reference, calibrated, measured = (checks.eps_lb_by_tau, checks.reference, checks.calibrated,
                                               checks.proxy_tv)
    lines = [f"break-even tau* = {_tau(checks.tau_break_even.first)} (the bound is 0 for any larger tau)"]
    if measured is None:
        lines.insert(0, "the proxy's error is not measured (no true P(y=1|x) for these canaries): no bound holds "
                        "without an assumption on it")
    else:
        lines.insert(0, f"the proxy's TV error against the twin's truth on the {measured.canaries} canaries: max "
                        f"{_tau(measured.max)}, 99th percentile {_tau(measured.p99)}, mean {_tau(measured.mean)};"
                        f" valid bound at the max: eps >= {bound_text(measured.eps_lb)}")
    if reference is None:
        lines.append("no label-blind reference audited (add a reference_prediction column to the canary table)")
    elif calibrated is None:
        raise ValueError("observational checks with a label-blind reference hold its calibrated figure (set together)")
    else:
        lines.append(f"label-blind reference: eps_lb {bound_text(reference.eps_lb)} at the headline's tau = "
                     f"{_tau(reference.tau)}, its own tau* {_tau(reference.tau_break_even)}; not a bound: the "
                     f"target at tau = {_tau(calibrated.tau)} (the reference's largest tau*) reaches "
                     f"{bound_text(calibrated.eps_lb)}")
    return ["<p>Observational design: the bound holds only if the proxy is within total variation tau of the true "
            "label distribution on every canary. " + "; ".join(html.escape(line) for line in lines) + ".</p>",
            _table(["tau", *by_tau], [("eps_lb if the proxy's worst-case error were tau (not a bound; first "
                                       "repetition)",
                                       *(bound_text(v) for v in by_tau.values()))])]


def _tau(value: float) -> str:
    return number_text(value, ".4g")


def _settings(steps: Sequence[Any], stage: str) -> list[dict[str, Any]]:
    outcome = next((o for o in steps if o.stage == stage and o.result is not None), None)
    return outcome.setting_rows() if outcome is not None and hasattr(outcome, "setting_rows") else []


def _mechanisms(steps: Sequence[Any], folder: Path) -> tuple[list[str], int]:
    """The settings table and the matched-utility figure (when two mechanisms have AUC and advantage): HTML and the
    number of figures."""
    table = findings.settings_table(_settings(steps, "posteriors"), _settings(steps, "utility"))
    if table.empty:
        return [], 0
    parts = ["<h2>Mechanisms</h2>", "<p>Per setting <code>&lt;mechanism&gt;.eps&lt;e&gt;.k&lt;k&gt;</code> (epsilon "
             "∞: no noise): mean additive advantage and 98th percentile of |I| of the attacker's posterior (∞: some "
             "rows' labels are revealed for sure; share_infinite is their share), and the target model's test AUC "
             f"when trained on that release; {NOT_COMPUTED} where the posteriors or utility grid has no such "
             "setting. <code>advantage_source</code>: "
             + "; ".join(f"<code>{name}</code> {html.escape(text)}"
                         for name, text in findings.ADVANTAGE_SOURCES.items())
             + ".</p>", _frame_table(table.assign(**{EPSILON: table[EPSILON].fillna(math.inf)}))]
    plot = findings.matched_utility_plot(table, path=str(folder / "mechanisms_at_matched_utility.png"))
    if plot is None:
        return parts, 0
    return [*parts, _image(Path(plot))], 1


def _environment() -> str:
    commit = git_commit() or "unknown (not a git checkout)"
    return (f"<h2>Code and packages</h2><p>git commit <code>{html.escape(commit)}</code></p>"
            + _table(["package", "version"], sorted(recorded_versions().items())))


def render_report(config: Config, steps: Sequence[Any], *, mlflow_location: str = "",
                  local_artifacts: Mapping[str, Sequence[str]] | None = None) -> tuple[str, int, int]:
    """HTML text plus the number of embedded figures and tables.

    ``steps`` are pipeline outcomes with ``step``, ``stage``, ``status``, ``seconds``, ``error``,
    ``metrics()`` and ``artifacts()``; ``local_artifacts`` (step -> local files) replaces a step's
    ``artifacts()`` where they are not local files (a remote output folder).
    """
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>lia-spark {html.escape(config.run.name)}"
             f"</title><style>{STYLE}</style></head><body>",
             f"<h1>lia-spark run {html.escape(config.run.name)}</h1>",
             f"<p>{now} &middot; seed {config.run.seed} &middot; output <code>{html.escape(config.run.output_dir)}"
             f"</code> &middot; data source {html.escape(config.data.source)}</p>"]
    parts.extend(_headline(steps))
    with tempfile.TemporaryDirectory(prefix="lia-report-") as folder:
        mechanisms, figures = _mechanisms(steps, Path(folder))
    parts.extend(mechanisms)
    if mlflow_location:
        parts.append(f"<p>MLflow: {html.escape(mlflow_location)}</p>")
    parts.append("<h2>Steps</h2><table><tr><th>step</th><th>stage</th><th>status</th><th>seconds</th><th>note</th></tr>")
    for o in steps:
        parts.append(f"<tr><td>{o.step}</td><td>{o.stage}</td><td class='{o.status}'>{o.status}</td>"
                     f"<td>{o.seconds:.1f}</td><td>{html.escape(o.error)}</td></tr>")
    parts.append("</table>")
    tables = 0
    for o in steps:
        metrics = o.metrics()
        artifacts = [Path(p) for p in (local_artifacts or {}).get(o.step, o.artifacts())]
        if not metrics and not artifacts:
            continue
        parts.append(f"<h2>{html.escape(o.step)} ({html.escape(o.stage)})</h2>")
        folded = [_metrics_table(metrics)] if metrics else []
        for path in artifacts:
            if not path.is_file():
                continue
            if path.suffix == ".png":
                parts.append(_image(path))
                figures += 1
            elif path.suffix == ".csv":
                folded.append(_csv_section(path))
                tables += 1
        if folded:
            parts.append(f"<details><summary>{html.escape(o.step)}: {len(metrics)} metrics and its tables</summary>"
                         + "".join(folded) + "</details>")
        others = [p.name for p in artifacts if p.suffix not in (".png", ".csv")]
        if others:
            parts.append("<p>Other artifacts: " + ", ".join(f"<code>{html.escape(n)}</code>" for n in others) + "</p>")
    parts.append(_environment())
    config_text = yaml.safe_dump(config.to_dict(), sort_keys=False)
    parts.append(f"<h2>Configuration</h2><details><summary>resolved config</summary><pre>{html.escape(config_text)}"
                 "</pre></details></body></html>")
    return "\n".join(parts), figures, tables

