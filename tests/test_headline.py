"""The audit headline: the valid bound first, beside the claimed epsilon; findings flagged."""
from __future__ import annotations

import math

from lia_spark.present.headline import Headline
from lia_spark.present.wording import NO_EVIDENCE


def _headline(**changes) -> Headline:
    values = dict(eps_lb=0.912, eps_lb_mean=0.9, eps_lb_std=0.031, repetitions=20, confidence=0.95, tests=101,
                  delta=1e-5, mechanism="rr", claimed_epsilon=1.0)
    return Headline(**{**values, **changes})


def test_text_states_bound_confidence_tests_delta_mechanism_and_claim():
    text = _headline().text()
    assert text == ("eps >= 0.912 at 95% if the proxy is within TV tau = 0 of the truth (observational design; "
                    "binomial bound, Bonferroni over 101 tests, delta = 1e-05; the bound reaches 0 at tau* = not "
                    "computed) for a target trained with rr at claimed eps = 1; over 20 repetitions 0.900 +- 0.031; no "
                    "label-blind reference audited")
    assert not _headline().is_finding


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
    vacuous = _headline(design="injected", eps_lb=0.0, claimed_epsilon=2.0, ceiling=1.8958, canaries=9393,
                        informative_canaries=9393).text()
    assert vacuous.endswith(f" - {NO_EVIDENCE}; with 9393 informative canaries this audit can certify at most 1.896 "
                            "at the claimed eps = 2")
    unknown = _headline(eps_lb=0.0, claimed_epsilon=math.nan, ceiling=4.87, canaries=1000).text()
    assert unknown.endswith("; with 1000 canaries this audit can certify at most 4.870 with every guess right (no "
                            "claimed eps)")
    assert "certify at most" not in _headline(design="injected", ceiling=1.9).text()  # said only beside a 0
    assert _headline(ceiling=1.9).metrics()["eps_lb_ceiling"] == 1.9


def test_the_observational_headline_names_the_reference_and_the_calibrated_bound():
    text = _headline(tau_break_even=0.4, reference_eps_lb=0.3, calibrated_tau=0.15, calibrated_eps_lb=0.61).text()
    assert "the bound reaches 0 at tau* = 0.4" in text
    assert text.endswith("a label-blind reference reaches 0.300 (tau* = 0.15), and the target's bound calibrated on "
                         "it (resting on that reference) is 0.610")
    headline = _headline(tau_break_even=0.4, reference_eps_lb=0.3, calibrated_tau=0.15, calibrated_eps_lb=0.61)
    assert headline.metrics()["reference_eps_lb"] == 0.3 and Headline.from_dict(headline.to_dict()) == headline
    assert None in _headline().to_dict().values()  # NaN is written as null, never as NaN


def test_a_bound_above_the_claim_is_a_finding():
    found = _headline(eps_lb=1.2, claimed_epsilon=1.0)
    assert found.is_finding and "FINDING" in found.text() and found.tags()["audit.finding"] == "true"
    assert not _headline(eps_lb=1.0, claimed_epsilon=1.0).is_finding  # equal is not more leakage than claimed


def test_no_noise_and_unstated_claims():
    none = _headline(mechanism="none", claimed_epsilon=math.inf)
    assert "claimed eps = inf (non-private);" in none.text() and not none.is_finding
    assert "claimed_eps" not in none.metrics() and none.tags()["audit.claimed_eps"] == "inf"
    unstated = _headline(claimed_epsilon=math.nan)
    assert not unstated.is_finding and "claimed eps = not stated" in unstated.text()
    assert math.isnan(Headline.from_dict(unstated.to_dict()).claimed_epsilon)


def test_round_trip_and_mlflow_names():
    headline = _headline(claimed_epsilon=math.inf)
    assert Headline.from_dict(headline.to_dict()) == headline
    assert set(_headline().tags()) >= {"audit.eps_lb", "audit.claimed_eps", "audit.mechanism"}
    assert _headline().metrics() == {"eps_lb": 0.912, "eps_lb_mean": 0.9, "eps_lb_std": 0.031, "claimed_eps": 1.0}


def test_headline_family_is_fixed_by_the_config():
    """GDP at delta > 0 (the binomial bound's delta term grows with m), binomial at delta = 0."""
    from lia_spark.run.config import load_config
    from lia_spark.engine.audit import headline_family

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
