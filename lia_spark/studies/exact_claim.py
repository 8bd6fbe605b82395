"""A null that can fail (docs/math.md §5.12): the injected audit of a target that leaks about each canary's coin
exactly its claim.

Each draw redraws the data, the game and the release: click probabilities p ~ Beta(1, 3), a proxy M' = p plus
N(0, 0.05) noise (clipped to [0.01, 0.99]), labels y0 ~ Bernoulli(p), the injected design's (y1, b) keyed on the
draw's own seed (:func:`lia_spark.kernels.injected.injected_draws`, y1 ~ Bernoulli(M')), the training labels y^b
released by randomized response at eps (keyed on the same seed), and the target M = P(y^b = 1 | release) with prior
M', the Bayes posterior of a model that memorises every released training label. On an informative canary
(y1 != y0) the release's likelihood ratio between b = 0 and b = 1 is e^{+-eps} whatever x is, so no attacker guesses
b right with probability above e^eps / (1 + e^eps): the target leaks exactly eps. A valid audit at 95% therefore
certifies more than eps in at most 5% of draws, and this target comes close to the claim (its bound is near the
ceiling), so the bound's own calibration is what decides: the paper's convention (every sweep point at the full
confidence) exceeds the claim in far more than 5% of the same draws.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from lia_spark.kernels import audit, audit_sweep, bounds, injected, mechanisms, posteriors
from lia_spark.names import BASELINE_NAMES, BINOMIAL, PAPER, PROXY_PREDICTION, bound_key
from lia_spark.run.model_sections import AuditConfig
from lia_spark.studies import power

PROXY_NOISE = 0.05  # the proxy's error: N(0, PROXY_NOISE) around the true click probability
SEED_BASE = 7919  # draw d keys its coins, counterfactuals and release on SEED_BASE + d (public: a study, no secret)


@dataclasses.dataclass(frozen=True)
class ExactClaimDraw:
    """One draw: the product's default injected audit (``eps_lb``) and the paper's convention on the log-ratio
    score alone (``eps_lb_paper``, not a valid bound) of the exact-claim target, over ``informative`` canaries."""

    eps_lb: float
    eps_lb_paper: float
    informative: int


def exact_claim_draw(draw: int, *, canaries: int, epsilon: float,
                     section: AuditConfig | None = None) -> ExactClaimDraw:
    """Draw ``draw`` of the study (module docstring) with ``canaries`` canaries at eps = ``epsilon``, audited with
    ``section`` (default: the audit's defaults)."""
    section = AuditConfig() if section is None else section
    rng = np.random.default_rng([SEED_BASE, draw])
    probability = rng.beta(1.0, 3.0, canaries)
    proxy = np.clip(probability + rng.normal(0.0, PROXY_NOISE, canaries), 0.01, 0.99)
    label = (rng.random(canaries) < probability).astype(np.int8)
    row_ids = np.arange(canaries, dtype=np.int64) + draw * canaries
    seed = SEED_BASE + draw
    counterfactual, coin = injected.injected_draws(row_ids, label, proxy, key=seed)
    released = mechanisms.rr_release(injected.training_labels(label, counterfactual, coin), row_ids,
                                     epsilon=epsilon, seed=seed)
    target = posteriors.rr(proxy, released, epsilon=epsilon).posterior
    found = power.audit_arrays(row_ids, label, counterfactual, coin, target, {BASELINE_NAMES[PROXY_PREDICTION]: proxy},
                               section, seed=seed, claimed_epsilon=math.inf)
    guesses = audit.sweep_grid(found.informative, section)
    counts = injected.count_correct(row_ids, label, counterfactual, coin, target, proxy, seed=seed, guesses=guesses,
                                    scores=("log_ratio",))["log_ratio"]
    paper = audit_sweep.evaluate_sweep(counts, guesses, canaries=found.informative, confidence=section.confidence,
                                       families=(BINOMIAL,), table_families=(), conventions=(PAPER,))
    return ExactClaimDraw(eps_lb=found.eps_lb, eps_lb_paper=float(paper.best[bound_key(BINOMIAL, PAPER)][0]),
                          informative=found.informative)


def false_positive_limits(failures: int, trials: int, *, confidence: float = 0.95) -> tuple[float, float]:
    """One-sided Clopper-Pearson (lower, upper) limits, each at ``confidence``, of a rate seen ``failures`` times in
    ``trials`` (:func:`lia_spark.kernels.bounds.clopper_pearson_lower`; the upper limit is 1 minus the lower limit of
    the complementary rate)."""
    return (bounds.clopper_pearson_lower(failures, trials, confidence=confidence),
            1.0 - bounds.clopper_pearson_lower(trials - failures, trials, confidence=confidence))
