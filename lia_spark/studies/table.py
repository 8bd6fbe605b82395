"""The audit table (Kalemaj, Melis, Boucher, Mironov, Mahloujifar, "Observational Auditing of Label Privacy", 2025,
arXiv:2511.14084, Table 2 and Table 5): its grid of cells, the published values, the tables and the plot.

Pure (pandas, matplotlib): the Spark command that trains and audits one target per cell is
:func:`lia_spark.engine.orchestration.audit_table.run_audit_table`. A *cell* is one training mechanism at one claimed
epsilon (and bag size for the LLP mechanisms): ``none`` is the non-private baseline (one cell, epsilon = inf), plain
``llp`` releases exact bag proportions (one cell per bag size, claimed epsilon = inf), ``llp_laplace`` /
``llp_geometric`` get a cell per epsilon and bag size and the label mechanisms one per epsilon.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Sequence, TypedDict

import pandas as pd

from lia_spark.kernels.mechanism_registry import label_mechanism
from lia_spark.names import (BINOMIAL, BONFERRONI, GDP, LP_2ST, OBSERVATIONAL, PAPER, PATE, RECALIBRATE_NONE, RR,
                             RR_DEBIASED, RR_WITH_PRIOR, bound_key)
from lia_spark.records.audit_summary import AuditSummary, BoundStatistics
from lia_spark.run.capabilities import unsupported
from lia_spark.run.checks import ConfigError
from lia_spark.run.config import Config

CONVENTION = BONFERRONI


class PaperAudit(TypedDict):
    """The fields of :class:`lia_spark.run.model_sections.AuditConfig` the paper's audit sets."""

    design: str
    scores: tuple[str, ...]
    canaries: int
    repetitions: int
    delta: float
    confidence: float
    bounds: tuple[str, ...]
    convention: str
    recalibrate: str
    tau: float


# The paper's audit (Kalemaj et al. 2025, sec. 6.2 and Table 2): the observational game on 200k of the target's
# training rows (their training labels), the difference score with t = 2, 100 repetitions, delta = 1e-5 with the
# f-DP (GDP) bound, the best point of the c' sweep each at 95%: comparable with the published values, not a valid
# bound. Applied to an audit section by ``dataclasses.replace(section, **PAPER_AUDIT)``.
PAPER_AUDIT: PaperAudit = {
    "design": OBSERVATIONAL, "scores": ("difference_t2",), "canaries": 200_000, "repetitions": 100, "delta": 1e-5,
    "confidence": 0.95, "bounds": (BINOMIAL, GDP), "convention": PAPER, "recalibrate": RECALIBRATE_NONE, "tau": 0.0}
PAPER_WAY_LABEL = ("paper convention, not a valid bound: observational game on 200k training rows, difference "
                   "score t = 2, delta = 1e-5, GDP, best sweep point each at 95%")


def bound_keys(summary: AuditSummary | None) -> tuple[str, str]:
    """The audit summary's keys of the headline family's valid (Bonferroni over the sweep) best bound and of its
    paper-convention best bound (best over the sweep, not a valid joint bound)."""
    family = summary.headline.family if summary is not None else BINOMIAL
    return bound_key(family, BONFERRONI), bound_key(family, PAPER)

# ---------------------------------------------------------------------------------------------------------
# Published values: Kalemaj, Melis, Boucher, Mironov, Mahloujifar, "Observational Auditing of Label Privacy",
# 2025, arXiv:2511.14084. Table 2 (Criteo, 1M rows per day, CatBoost, delta = 1e-5; the highest epsilon over
# the c' sweep at 95% confidence *per test*, averaged over 100 repetitions: the paper's convention, not a valid
# 95% bound) and Table 5 (test log-loss). None = not reported ("the training process did not produce
# meaningful outcomes").
PUBLISHED_LABEL = "published values (paper convention, not a valid bound)"
PUBLISHED_SOURCE = ('Kalemaj et al., "Observational Auditing of Label Privacy", 2025, arXiv:2511.14084, '
                    "Table 2 (eps_lb mean +- std, Criteo, CatBoost, delta = 1e-5) and Table 5 (test log-loss)")
PUBLISHED_EPSILONS: tuple[float, ...] = (math.inf, 8.0, 4.0, 2.0, 1.0, 0.1)
PUBLISHED_EPS_LB: dict[str, tuple[tuple[float, float] | None, ...]] = {
    "LP-1ST": ((1.37, .14), (1.29, .12), (1.22, .17), (0.59, .05), (0.34, .02), (0.06, .01)),
    "LP-1ST (domain prior)": ((1.47, .22), (1.37, .10), (1.28, .21), None, None, None),
    "LP-1ST (noise correction)": ((1.31, .12), (1.26, .11), (1.04, .16), (0.52, .07), (0.40, .08), (0.06, .01)),
    "LP-2ST": ((1.52, .14), (1.46, .11), (1.24, .15), (0.75, .05), (0.61, .07), (0.06, .01)),
    "PATE": ((1.60, .15), (1.48, .14), (1.28, .12), (0.71, .07), (0.59, .05), (0.06, .01)),
}
PUBLISHED_LOG_LOSS: dict[str, tuple[float | None, ...]] = {
    "LP-1ST": (0.130, 0.130, 0.136, 0.206, 0.362, 0.653),
    "LP-1ST (domain prior)": (0.130, 0.130, 0.136, None, None, None),
    "LP-1ST (noise correction)": (0.130, 0.130, 0.131, 0.156, 0.171, 0.645),
    "LP-2ST": (0.130, 0.130, 0.123, 0.207, 0.342, 0.527),
    "PATE": (0.130, 0.151, 0.156, 0.188, 0.255, 0.680),
}
PUBLISHED_MECHANISMS: dict[str, str | None] = {"LP-1ST": RR, "LP-1ST (domain prior)": RR_WITH_PRIOR,
                                               "LP-1ST (noise correction)": RR_DEBIASED, "LP-2ST": LP_2ST,
                                               "PATE": PATE}


@dataclasses.dataclass(frozen=True)
class Cell:
    """One cell of the table: a training mechanism at a claimed epsilon (inf = none) and a bag size (1 unless LLP)."""

    mechanism: str
    epsilon: float
    bag_size: int = 1

    @property
    def name(self) -> str:
        """Folder-safe name: ``none``, ``rr-eps8``, ``rr-eps0.1``, ``llp-k8``, ``llp_laplace-k8-eps1``."""
        mechanism = label_mechanism(self.mechanism, "table.mechanisms")
        bag = f"-k{self.bag_size}" if mechanism.bag_release else ""
        if not mechanism.private:
            return f"{self.mechanism}{bag}"
        return f"{self.mechanism}{bag}-eps{epsilon_text(self.epsilon)}"

    @property
    def algorithm(self) -> str:
        """Row label of the wide table: the paper's name of the mechanism, with k for the LLP mechanisms."""
        mechanism = label_mechanism(self.mechanism, "table.mechanisms")
        return f"{mechanism.display_name} (k={self.bag_size})" if mechanism.bag_release else mechanism.display_name


def epsilon_text(epsilon: float) -> str:
    """``inf``, ``8``, ``0.1``: the column name of an epsilon."""
    return "inf" if math.isinf(epsilon) else f"{epsilon:g}"


def table_cells(config: Config) -> tuple[list[Cell], dict[str, str]]:
    """The cells of ``config.table`` in row order, and the mechanisms skipped as unsupported (name -> reason).

    Raises:
        ConfigError: naming table.mechanisms when no mechanism can be trained with models.library /
            models.execution.
    """
    section, models = config.table, config.models
    skipped = {name: reason for name in section.mechanisms
               if (reason := unsupported(name, library=models.library, execution=models.execution,
                                         game=config.audit.audit_design))}
    cells: list[Cell] = []
    for name in section.mechanisms:
        if name in skipped:
            continue
        mechanism = label_mechanism(name, "table.mechanisms")
        epsilons = section.epsilons if mechanism.private else (math.inf,)
        bag_sizes = section.bag_sizes if mechanism.bag_release else (1,)
        cells.extend(Cell(name, epsilon, k) for k in bag_sizes for epsilon in epsilons)
    if not cells:
        reasons = "; ".join(f"{name}: {reason}" for name, reason in skipped.items())
        raise ConfigError(f"table.mechanisms: none can be trained with models.library={models.library}, "
                          f"models.execution={models.execution} ({reasons}), got {list(section.mechanisms)!r}")
    return cells, skipped


def mean_std_text(mean: float, std: float) -> str:
    """``1.234 +- 0.056``."""
    return f"{mean:.3f} +- {std:.3f}"


def exceeds_claim(eps_lb_mean: float, claimed: float) -> bool:
    """A finding: the mean valid lower bound is above the claimed epsilon (never for a claim of inf)."""
    return math.isfinite(eps_lb_mean) and eps_lb_mean > claimed


def _column_order(epsilons: Sequence[float]) -> list[str]:
    return [epsilon_text(e) for e in epsilons]


def wide_table(cells: pd.DataFrame, *, epsilons: Sequence[float]) -> pd.DataFrame:
    """Rows = mechanisms (with k for LLP), columns = claimed epsilons, cells ``mean +- std`` of the valid bound.

    ``cells`` is the long table (:data:`CELL_COLUMNS`); a failed cell reads ``failed``, a finding gets
    `` (exceeds claimed eps)``; combinations without a cell are empty.
    """
    columns = _column_order(sorted({*epsilons, math.inf}, reverse=True))
    rows = []
    for (algorithm, mechanism, bag_size), group in cells.groupby(["algorithm", "mechanism", "bag_size"], sort=False):
        line = {"mechanism": mechanism, "algorithm": algorithm, "bag_size": int(bag_size)}
        for record in group.itertuples(index=False):
            if record.status == "failed":
                text = "failed"
            else:
                text = mean_std_text(record.eps_lb_mean, record.eps_lb_std)
                if record.exceeds_claimed:
                    text += " (exceeds claimed eps)"
            line[epsilon_text(record.claimed_epsilon)] = text
        rows.append(line)
    frame = pd.DataFrame(rows)
    used = [c for c in columns if c in frame.columns]
    return frame.reindex(columns=["mechanism", "algorithm", "bag_size", *used]).fillna("")


CELL_COLUMNS = ("cell", "mechanism", "algorithm", "claimed_epsilon", "bag_size", "status", "eps_lb_mean", "eps_lb_std",
                "eps_lb_min", "eps_lb_max", "exceeds_claimed", "convention", "bound", "confidence", "delta", "canaries",
                "repetitions", "eps_lb_paper_convention_mean", "eps_lb_paper_convention_std", "eps_lb_paper_way_mean",
                "eps_lb_paper_way_std", "test_auc", "test_log_loss", "train_seconds", "audit_seconds", "seconds",
                "error", "output_dir")


def paper_way(summary: AuditSummary | None) -> BoundStatistics | None:
    """The paper-convention best bound (mean, std, ...) of an audit run with :data:`PAPER_AUDIT` (its headline
    family: GDP at delta = 1e-5); None without one."""
    return summary.best.get(bound_keys(summary)[1]) if summary is not None else None


def _statistic(bound: BoundStatistics | None, name: str) -> float:
    return float(getattr(bound, name)) if bound is not None else math.nan


def cell_record(cell: Cell, *, status: str, summary: AuditSummary | None, test_metrics: Mapping[str, float] | None,
                train_seconds: float, audit_seconds: float, seconds: float, error: str, output_dir: str,
                paper_summary: AuditSummary | None = None) -> dict:
    """One row of the long table from a cell's audit summary (``AuditResult.summary``), its paper-way audit's
    (``paper_summary``, table.paper_convention) and the target's test metrics (``TrainResult.test_metrics``, keys
    ``<metric>@target``); NaN where the cell failed or was not audited that way."""
    nan = math.nan
    best = summary.best if summary is not None else {}
    valid_key, paper_key = bound_keys(summary)
    valid, paper, way = best.get(valid_key), best.get(paper_key), paper_way(paper_summary)
    mean = _statistic(valid, "mean")
    metrics = test_metrics or {}
    return {
        "cell": cell.name, "mechanism": cell.mechanism, "algorithm": cell.algorithm, "claimed_epsilon": cell.epsilon,
        "bag_size": cell.bag_size, "status": status, "eps_lb_mean": mean, "eps_lb_std": _statistic(valid, "std"),
        "eps_lb_min": _statistic(valid, "min"), "eps_lb_max": _statistic(valid, "max"),
        "exceeds_claimed": exceeds_claim(mean, cell.epsilon), "convention": CONVENTION, "bound": valid_key,
        **{name: getattr(summary, name) if summary is not None else nan
           for name in ("confidence", "delta", "canaries", "repetitions")},
        "ceiling": float(summary.ceiling.eps_lb) if summary is not None else nan,
        "ceiling_95": float(summary.ceiling.eps_lb_95) if summary is not None else nan,
        "training_runs": summary.headline.training_runs if summary is not None else nan,
        "eps_lb_paper_convention_mean": _statistic(paper, "mean"),
        "eps_lb_paper_convention_std": _statistic(paper, "std"),
        "eps_lb_paper_way_mean": _statistic(way, "mean"), "eps_lb_paper_way_std": _statistic(way, "std"),
        "test_auc": float(metrics.get("auc@target", nan)), "test_log_loss": float(metrics.get("log_loss@target", nan)),
        "train_seconds": train_seconds, "audit_seconds": audit_seconds, "seconds": seconds, "error": error,
        "output_dir": output_dir,
    }


def utility_table(cells: pd.DataFrame) -> pd.DataFrame:
    """Test log-loss and AUC of the target per cell (the paper's Table 5 reports the log-loss)."""
    return cells.loc[:, ["cell", "mechanism", "algorithm", "claimed_epsilon", "bag_size", "status", "test_log_loss",
                         "test_auc"]]


def published_text(algorithm: str, epsilon: float) -> tuple[str, str]:
    """The paper's eps_lb ``mean +- std`` and test log-loss of ``algorithm`` (its display name) at ``epsilon`` as
    text; "" where the paper reports none (or has no such algorithm or epsilon)."""
    if algorithm not in PUBLISHED_EPS_LB or epsilon not in PUBLISHED_EPSILONS:
        return "", ""
    index = PUBLISHED_EPSILONS.index(epsilon)
    value, loss = PUBLISHED_EPS_LB[algorithm][index], PUBLISHED_LOG_LOSS[algorithm][index]
    return ("" if value is None else f"{value[0]:.2f} +- {value[1]:.2f}", "" if loss is None else f"{loss:.3f}")


def published_table() -> pd.DataFrame:
    """The paper's Criteo values, one row per algorithm: eps_lb ``mean +- std`` and test log-loss per epsilon,
    labelled :data:`PUBLISHED_LABEL` and :data:`PUBLISHED_SOURCE`."""
    rows = []
    for algorithm in PUBLISHED_EPS_LB:
        line = {"algorithm": algorithm, "mechanism": PUBLISHED_MECHANISMS[algorithm] or "", "values": PUBLISHED_LABEL}
        for epsilon in PUBLISHED_EPSILONS:
            column = epsilon_text(epsilon)
            line[f"eps_lb@{column}"], line[f"test_log_loss@{column}"] = published_text(algorithm, epsilon)
        line["source"] = PUBLISHED_SOURCE
        rows.append(line)
    return pd.DataFrame(rows)


def paper_way_table(cells: pd.DataFrame) -> pd.DataFrame:
    """Per cell: the valid bound, the paper-way value (:data:`PAPER_WAY_LABEL`) and the published value of the
    same algorithm and claimed epsilon (empty where the paper has none), with the test log-loss beside Table 5's."""
    rows = []
    for record in cells.itertuples(index=False):
        value, loss = published_text(record.algorithm, record.claimed_epsilon)
        rows.append({"cell": record.cell, "algorithm": record.algorithm,
                     "claimed_epsilon": epsilon_text(record.claimed_epsilon), "status": record.status,
                     "eps_lb_valid": mean_std_text(record.eps_lb_mean, record.eps_lb_std),
                     "eps_lb_paper_way": mean_std_text(record.eps_lb_paper_way_mean, record.eps_lb_paper_way_std),
                     "eps_lb_published": value, "test_log_loss": f"{record.test_log_loss:.3f}",
                     "test_log_loss_published": loss, "paper_way": PAPER_WAY_LABEL})
    return pd.DataFrame(rows)


def inf_position(epsilons: Sequence[float]) -> float:
    """x position of epsilon = inf on the log axis: twice the largest finite epsilon (1 when there is none)."""
    finite = [e for e in epsilons if math.isfinite(e)]
    return 2.0 * max(finite) if finite else 1.0


