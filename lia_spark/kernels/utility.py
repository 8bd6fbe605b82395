"""Privacy-utility tradeoff (auditing paper, Figure 3): target test AUC against reconstruction advantage.

Each setting (mechanism, epsilon, bag size) of the utility grid gives one point: y = test AUC of the target
trained on that release, x = the posterior stage's summary for the same setting (mean additive advantage,
or the 98th percentile of |I|). Training mechanisms without a posterior summary of their own (rr_debiased,
lp_2st, rr_with_prior) release RR(eps) labels (rr_debiased exactly RR's release, the others RR on a part of the rows
or among the prior's likely labels): they get RR's posterior summary at the same eps where the posteriors stage
computed it (``posteriors_rr``: the same release and prior as the rr row, so the numbers compare), else RR's
closed-form expected additive advantage E[(min(eta, 1-eta) - pi) 1{pi <= eta <= 1-pi}] over the non-private
target's predictions as eta, and |I| = eps (``rr_closed_form``; exact for RR under that prior, which differs from
the posteriors stage's: a smoother prior puts fewer rows in [pi, 1 - pi]).
PATE has neither (no posterior summary, and its (eps, delta) guarantee gives no closed form here): its rows keep
NaN advantages (advantage_source "none") and the plots leave them out, saying how many.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd

from lia_spark.kernels.advantage import rr_closed_form_advantage
from lia_spark.kernels.mechanism_registry import RR_FAMILY, label_mechanism
from lia_spark.names import LLP, LLP_GEOMETRIC, LLP_LAPLACE, RR

ADVANTAGES = {"mean_additive_advantage": "expected additive advantage", "abs_I_p98": "98th percentile of |I|"}


def utility_grid(*, epsilons: Sequence[float], bag_sizes: Sequence[int],
                 extra_mechanisms: Sequence[str] = ()) -> list[tuple[str, float, int]]:
    """Settings (mechanism, epsilon, bag size): rr x eps (inf = true labels), llp x k, noisy llp x finite eps x k,
    each extra mechanism x finite eps when it trains on the true labels at eps = inf (as rr does), else x every
    eps (pate: at eps = inf no noise on the vote counts). LLP rows carry epsilon NaN, the others bag size 1."""
    finite = [float(e) for e in epsilons if math.isfinite(e)]
    grid = [(RR, float(e), 1) for e in epsilons]
    grid += [(LLP, math.nan, int(k)) for k in bag_sizes]
    grid += [(name, e, int(k)) for name in (LLP_LAPLACE, LLP_GEOMETRIC) for k in bag_sizes for e in finite]
    for name in extra_mechanisms:
        plain_at_infinity = label_mechanism(name, "utility.extra_mechanisms").true_labels_at_infinity
        grid += [(name, float(e), 1) for e in (finite if plain_at_infinity else epsilons)]
    return grid


def _keyed(frame: pd.DataFrame) -> pd.DataFrame:
    keyed = frame.copy()
    keyed["epsilon_key"] = np.round(keyed["epsilon"].astype(float).fillna(-1.0), 9)
    keyed["bag_size"] = keyed["bag_size"].astype(int)
    return keyed


def tradeoff_table(utility: pd.DataFrame, summary: pd.DataFrame | None, *, priors: np.ndarray) -> pd.DataFrame:
    """Join test AUCs (columns mechanism, epsilon, bag_size, auc, log_loss) with advantages.

    Args:
        utility: one row per trained setting.
        summary: posterior summaries (OUT/posteriors/summary contract) or None.
        priors: eta per training row for RR's closed form.
    Returns:
        utility columns plus mean_additive_advantage, abs_I_p98 and advantage_source
        ("posteriors", "posteriors_rr", "rr_closed_form" or "none").
    """
    table = _keyed(utility)
    keyed = _keyed(summary) if summary is not None and len(summary) else None
    if keyed is not None:
        columns = ["mechanism", "epsilon_key", "bag_size", *ADVANTAGES]
        table = table.merge(keyed[columns], on=["mechanism", "epsilon_key", "bag_size"], how="left")
    else:
        for column in ADVANTAGES:
            table[column] = math.nan
    table["advantage_source"] = np.where(table["mean_additive_advantage"].notna(), "posteriors", "none")
    family = table["mechanism"].isin(RR_FAMILY) & table["mean_additive_advantage"].isna()
    if keyed is not None:
        rr_rows = keyed[keyed["mechanism"] == RR].drop_duplicates("epsilon_key").set_index("epsilon_key")
        for index in table.index[family & table["epsilon_key"].isin(rr_rows.index)]:
            for column in ADVANTAGES:
                table.at[index, column] = rr_rows.at[table.at[index, "epsilon_key"], column]
            table.at[index, "advantage_source"] = "posteriors_rr"
    closed = table["mechanism"].isin(RR_FAMILY) & table["mean_additive_advantage"].isna()
    for index in table.index[closed]:
        epsilon = float(table.at[index, "epsilon"])
        table.at[index, "mean_additive_advantage"] = (rr_closed_form_advantage(priors, epsilon=epsilon)
                                                      if math.isfinite(epsilon) else
                                                      float(np.mean(np.minimum(priors, 1.0 - priors))))
        table.at[index, "abs_I_p98"] = epsilon
        table.at[index, "advantage_source"] = "rr_closed_form"
    return table.drop(columns="epsilon_key")


def point_label(mechanism: str, epsilon: float, bag_size: int) -> str:
    """What varies along a tradeoff curve: ``k=<k>`` on plain LLP's (over k), ``eps=<e>`` on the others."""
    return f"k={int(bag_size)}" if mechanism == LLP else f"eps={float(epsilon):g}"


def hidden_settings_text(advantages: pd.Series) -> str:
    """What a plot leaves out: settings with an unbounded advantage (inf) and settings without one (NaN: no posterior
    summary and no closed form, e.g. pate); "" when every advantage is finite."""
    values = advantages.astype(float)
    parts = [f"{count} settings {what}" for count, what in (
        (int(np.isinf(values).sum()), "with unbounded value"), (int(values.isna().sum()), "without an advantage"))
             if count]
    return f" ({', '.join(parts)} not shown)" if parts else ""


