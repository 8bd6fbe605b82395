"""The audit headline: the valid bound first, beside the claimed epsilon; findings flagged."""
from __future__ import annotations

import math

from lia_spark.records.headline import Headline
from lia_spark.records.wording import NO_EVIDENCE


def _headline(**changes) -> Headline:
    values = dict(eps_lb=0.912, eps_lb_mean=0.9, eps_lb_std=0.031, repetitions=20, confidence=0.95, tests=101,
                  delta=1e-5, mechanism="rr", claimed_epsilon=1.0)
    return Headline(**{**values, **changes})


def test_without_the_truth_the_observational_headline_leads_with_no_bound_without_an_assumption():
    headline = _headline(tau_break_even=0.8315)
    assert headline.text() == (
        "no bound without an assumption on the proxy (observational design; binomial bound, Bonferroni over 101 "
        "tests, delta = 1e-05) for a target trained with rr at claimed eps = 1: eps >= 0.912 at 95% if the proxy is "
        "within TV tau = 0 of the truth; the 20 repetitions' bounds (a spread of bounds, not a bound): mean 0.900, "
        "std 0.031; the bound is 0 for any tau above tau* = 0.8315; no label-blind reference audited")
    assert headline.assumption == "if the proxy is within TV tau = 0 of the truth"
    assert not _headline(eps_lb=5.0).is_finding  # above the claim, but only under the assumption
    assert headline.tags()["audit.eps_lb"] == "none without an assumption on the proxy"
    assert headline.tags()["audit.assumption"] == headline.assumption
    assert set(headline.metrics()) >= {"eps_lb_if_tau", "tau_break_even"} and "eps_lb" not in headline.metrics()


def test_on_the_twin_the_observational_headline_leads_with_the_bound_at_the_measured_error():
    headline = _headline(eps_lb=0.29, eps_lb_mean=0.27, eps_lb_std=0.02, measured_tau=0.7812, canaries=20000,
                         tau_break_even=0.8315, reference_eps_lb=0.0, reference_tau_break_even=0.2759)
    assert headline.text() == (
        "eps >= 0.290 at 95% at the proxy's worst-case TV error tau = 0.7812 on the 20000 canaries, measured against "
        "the twin's true P(y=1|x) (observational design; binomial bound, Bonferroni over 101 tests, delta = 1e-05) "
        "for a target trained with rr at claimed eps = 1; the 20 repetitions' bounds (a spread of bounds, not a "
        "bound): mean 0.270, std 0.020; the bound is 0 for any tau above tau* = 0.8315; a label-blind reference "
        "certifies 0 at this tau (0.7812; its own tau* = 0.2759, same repetition)")
    assert "tau = 0:" not in headline.text() and "closer" not in headline.text()  # no hypothetical tau here
    assert headline.assumption == "" and headline.metrics()["measured_tau"] == 0.7812
    assert headline.tags()["audit.assumption"] == "none: the proxy's measured worst-case TV error is 0.7812"
    assert _headline(eps_lb=1.2, measured_tau=0.01).is_finding  # no assumption: a finding


def test_the_injected_headline_says_it_assumes_nothing_about_the_proxy():
    text = _headline(design="injected", informative_canaries=9400, repetitions=1, eps_lb_std=0.0).text()
    assert text == ("eps >= 0.912 at 95% (injected canaries, no assumption on the proxy; binomial bound, Bonferroni "
                    "over 101 tests, delta = 1e-05; 9400 informative canaries, one training run) for a target trained "
                    "with rr at claimed eps = 1")

def test_a_bound_of_zero_says_the_audit_found_no_evidence_not_that_the_target_is_private():
    vacuous = _headline(design="injected", eps_lb=0.0).text()
    assert "eps >= 0.000 at 95%" in vacuous and vacuous.endswith(f" - {NO_EVIDENCE}")
    assert "not that the target is private" in NO_EVIDENCE
    tiny = _headline(design="injected", eps_lb=0.0003).text()  # evidence, however small: never written as 0.000
    assert "eps >= 0.0003 at 95%" in tiny and NO_EVIDENCE not in tiny
    assert NO_EVIDENCE in _headline(eps_lb=0.0, eps_lb_mean=0.0, eps_lb_std=0.0).text()  # observational too


def test_a_bound_of_zero_says_what_the_audit_could_have_found():
    vacuous = _headline(design="injected", eps_lb=0.0, claimed_epsilon=2.0, ceiling=1.8958, ceiling_95=1.9712,
                        canaries=9393, informative_canaries=9393).text()
    assert vacuous.endswith(f" - {NO_EVIDENCE}; with 9393 informative canaries an attacker at exactly the claimed "
                            "eps = 2 typically certifies 1.896 (95th percentile 1.971)")
    unknown = _headline(eps_lb=0.0, claimed_epsilon=math.nan, ceiling=4.87, ceiling_95=4.87, canaries=1000).text()
    assert unknown.endswith("; with 1000 canaries an attacker with every guess right certifies 4.870 (no claimed eps)")
    infinite = _headline(eps_lb=0.0, claimed_epsilon=math.inf, ceiling=7.33, ceiling_95=7.33, canaries=1000).text()
    assert infinite.endswith("; with 1000 canaries an attacker with every guess right certifies 7.330 (claimed eps = "
                             "inf)")  # q = 1: no percentile, nothing random
    assert "typically certifies" not in _headline(design="injected", ceiling=1.9).text()  # said only beside a 0
    assert "at most" not in vacuous + unknown  # the ceiling is a reference, not a cap: such attackers exceed it
    assert {"eps_lb_ceiling": 1.9, "eps_lb_ceiling_95": 2.0}.items() <= _headline(ceiling=1.9,
                                                                                    ceiling_95=2.0).metrics().items()


def test_the_observational_headline_names_the_references_own_tau_and_when_it_matches_the_target():
    headline = _headline(tau_break_even=0.4, reference_eps_lb=0.3, reference_tau_break_even=0.04)
    assert headline.text().endswith("; a label-blind reference reaches 0.300 at this tau (0; its own tau* = 0.04, "
                                    "same repetition)")
    matched = _headline(eps_lb=0.0, reference_eps_lb=0.08, reference_tau_break_even=0.01)
    assert ("reaches 0.080 at this tau (0; its own tau* = 0.01, same repetition) - the target shows no more than a "
            "model that never saw the labels") in matched.text()
    single = _headline(repetitions=1, eps_lb_std=0.0, reference_eps_lb=0.0, reference_tau_break_even=0.0).text()
    assert "spread" not in single and "a label-blind reference certifies 0 at this tau" in single
    assert "calibrat" not in headline.text()  # not a bound: not in the headline
    assert headline.metrics()["reference_eps_lb"] == 0.3 and Headline.from_dict(headline.to_dict()) == headline
    assert None in _headline().to_dict().values()  # NaN is written as null, never as NaN


def test_a_bound_above_the_claim_is_a_finding():
    found = _headline(design="injected", eps_lb=1.2, claimed_epsilon=1.0)
    assert found.is_finding and "FINDING" in found.text() and found.tags()["audit.finding"] == "true"
    assert not _headline(design="injected", eps_lb=1.0, claimed_epsilon=1.0).is_finding  # equal is not more leakage


def test_no_noise_and_unstated_claims():
    none = _headline(mechanism="none", claimed_epsilon=math.inf)
    assert "claimed eps = inf (non-private):" in none.text() and not none.is_finding
    assert "claimed_eps" not in none.metrics() and none.tags()["audit.claimed_eps"] == "inf"
    unstated = _headline(claimed_epsilon=math.nan)
    assert not unstated.is_finding and "claimed eps = not stated" in unstated.text()
    assert math.isnan(Headline.from_dict(unstated.to_dict()).claimed_epsilon)


def test_round_trip_and_mlflow_names():
    headline = _headline(claimed_epsilon=math.inf)
    assert Headline.from_dict(headline.to_dict()) == headline
    assert set(_headline().tags()) >= {"audit.eps_lb", "audit.claimed_eps", "audit.mechanism"}
    assert _headline(design="injected").metrics() == {"eps_lb": 0.912, "eps_lb_mean": 0.9, "eps_lb_std": 0.031,
                                                      "claimed_eps": 1.0}


def test_headline_family_is_fixed_by_the_config():
    """GDP at delta > 0 (the binomial bound's delta term grows with m), binomial at delta = 0."""
    from lia_spark.engine.audit.stage import headline_family
    from lia_spark.run.config import load_config

    assert headline_family(load_config(None, []).audit) == "binomial"
    assert headline_family(load_config(None, ["audit.delta=1e-5"]).audit) == "gdp"
    assert headline_family(load_config(None, ["audit.delta=1e-5", "audit.bounds=[binomial]",
                                              "audit.table_bounds=[binomial]"]).audit) == "binomial"
    assert headline_family(load_config(None, ["audit.bounds=[gdp]", "audit.table_bounds=[gdp]"]).audit) == "gdp"
    assert "gdp bound" in _headline(family="gdp").text()


def test_the_membership_headline_names_its_own_canaries():
    text = _headline(design="membership", repetitions=1).text()
    assert text.startswith("eps >= 0.912 at 95% (membership canaries, one training run; binomial bound")
    assert "proxy" not in text
