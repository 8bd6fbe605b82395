"""One self-contained HTML page per pipeline run: steps, metrics, tables (CSV) and plots (PNG, embedded).

The page is built from the stage results' ``metrics()`` and ``artifacts()`` only, so any plot or table a
stage adds shows up without changes here. Rendering only (no Spark): the pipeline
(:func:`lia_spark.engine.pipeline.write_report`) commits it to ``OUT/report/report.html`` and logs it to MLflow.
"""
from __future__ import annotations

import base64
import csv
import dataclasses
import datetime
import html
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from lia_spark.config import Config

REPORT_FILE = "report.html"
MAX_TABLE_ROWS = 60
STYLE = """body{font-family:sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse;margin:.5em 0 1.5em}
td,th{border:1px solid #ccc;padding:2px 8px;text-align:right;font-size:90%}th{background:#eee}
td:first-child,th:first-child{text-align:left}img{max-width:100%;border:1px solid #ddd;margin:.5em 0}
.failed{color:#b00}.skipped{color:#888}"""


@dataclasses.dataclass
class ReportResult:
    """Where the report went: ``path`` under OUT/report, ``html_path`` a local copy (the same file locally)."""

    path: str
    html_path: str
    figures: int
    tables: int

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for the pipeline summary."""
        return dataclasses.asdict(self)

    def metrics(self) -> dict[str, float]:
        """Counts of embedded plots and tables."""
        return {"figures": float(self.figures), "tables": float(self.tables)}

    def artifacts(self) -> list[str]:
        """The local HTML file."""
        return [self.html_path]


def _format(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        return f"{value:.6g}"
    return str(value)


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


def _image(path: Path) -> str:
    encoded = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<h4>{html.escape(path.name)}</h4><img alt="{html.escape(path.name)}" src="data:image/png;base64,{encoded}">'


def _headline(steps: Sequence[Any]) -> list[str]:
    """The audit's valid bound beside the claimed epsilon, first on the page (a finding in red)."""
    audit = next((o.result for o in steps if o.step == "audit" and o.result is not None), None)
    if audit is None:
        return []
    headline = audit.headline
    style = " class='failed'" if headline.is_finding else ""
    return ["<h2>Audit result</h2>", f"<p{style}><strong>{html.escape(headline.text())}</strong></p>",
            "<p>Numbers labelled <em>paper</em> below use the paper's convention (the best sweep point, each at the "
            "full confidence): paper convention, not a valid bound.</p>"]


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
    if mlflow_location:
        parts.append(f"<p>MLflow: {html.escape(mlflow_location)}</p>")
    parts.append("<h2>Steps</h2><table><tr><th>step</th><th>stage</th><th>status</th><th>seconds</th><th>note</th></tr>")
    for o in steps:
        parts.append(f"<tr><td>{o.step}</td><td>{o.stage}</td><td class='{o.status}'>{o.status}</td>"
                     f"<td>{o.seconds:.1f}</td><td>{html.escape(o.error)}</td></tr>")
    parts.append("</table>")
    figures = tables = 0
    for o in steps:
        metrics = o.metrics()
        artifacts = [Path(p) for p in (local_artifacts or {}).get(o.step, o.artifacts())]
        if not metrics and not artifacts:
            continue
        parts.append(f"<h2>{html.escape(o.step)} ({html.escape(o.stage)})</h2>")
        if metrics:
            parts.append(_table(["metric", "value"], sorted(metrics.items())))
        for path in artifacts:
            if not path.is_file():
                continue
            if path.suffix == ".png":
                parts.append(_image(path))
                figures += 1
            elif path.suffix == ".csv":
                parts.append(_csv_section(path))
                tables += 1
        others = [p.name for p in artifacts if p.suffix not in (".png", ".csv")]
        if others:
            parts.append("<p>Other artifacts: " + ", ".join(f"<code>{html.escape(n)}</code>" for n in others) + "</p>")
    config_text = yaml.safe_dump(config.to_dict(), sort_keys=False)
    parts.append(f"<h2>Configuration</h2><details><summary>resolved config</summary><pre>{html.escape(config_text)}"
                 "</pre></details></body></html>")
    return "\n".join(parts), figures, tables

