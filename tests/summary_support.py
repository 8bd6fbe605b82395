"""A typed audit summary for the tests that read one (tests/test_audit_summary.py, tests/test_findings.py)."""
from __future__ import annotations

import dataclasses
import math
from typing import Any

from lia_spark.kernels.audit_sweep import Ceiling
from lia_spark.records.audit_summary import (AuditSummary, BoundStatistics, Calibrated, ObservationalChecks, ProxyError,
                                             RecalibrationMap, ReferenceBound, TauBreakEven)
from lia_spark.records.headline import Headline


def audit_summary(design: str, **changes: Any) -> AuditSummary:
    """A small but complete audit summary of ``design`` (observational checks only for that design), with
    ``changes`` to its fields."""
    stats = BoundStatistics(mean=0.5, std=0.1, min=0.0, max=1.0, share_positive=0.5)
    observational = ObservationalChecks(
        proxy_tv=ProxyError(max=0.2, p99=0.1, p95=0.05, mean=0.01, canaries=100, eps_lb=0.0, eps_lb_mean=0.0,
                            eps_lb_std=0.0),
        tau_break_even=TauBreakEven(first=math.inf, mean=0.3, repetitions=2), eps_lb_by_tau={"0": 0.5, "0.1": 0.0},
        reference=ReferenceBound(eps_lb=0.0, mean=0.0, std=0.0, min=0.0, max=0.0, share_positive=0.0, tau=0.2,
                                 tau_break_even=0.0, canaries=100),
        calibrated=Calibrated(tau=0.0, eps_lb=0.5, eps_lb_mean=0.5, note="not a bound"))
    headline = Headline(eps_lb=0.5, eps_lb_mean=0.5, eps_lb_std=0.1, repetitions=2, confidence=0.95, tests=8,
                        delta=0.0, mechanism="rr", claimed_epsilon=2.0, design=design, canaries=100)
    summary = AuditSummary(
        attack="label_inference", design=design, canaries=100, repetitions=2, guesses=(10, 20), confidence=0.95,
        delta=0.0, tau=0.0, gdp_delta=math.nan, gdp_tau_vacuous=False, scores=("log_ratio",), tests=8,
        default_convention="bonferroni",
        recalibration={"proxy_prediction": RecalibrationMap(mapped="proxy", bins=3.0, canaries=100.0, min=0.1,
                                                            max=0.4)},
        baselines=("proxy_prediction",), best={"eps_binomial_bonferroni": stats, "eps_binomial_paper": stats},
        best_guesses_median={"eps_binomial_bonferroni": 10.0},
        best_score_share={"eps_binomial_bonferroni": {"log_ratio": 1.0}},
        per_score={"log_ratio": {"eps_binomial_bonferroni": stats}},
        ceiling=Ceiling(eps_lb=1.2, eps_lb_95=1.3, guesses=20, accuracy=0.88, claimed_epsilon=math.inf),
        headline=headline,
        observational=observational if design == "observational" else None)
    return dataclasses.replace(summary, **changes)
