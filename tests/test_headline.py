"""The audit headline: the valid bound first, beside the claimed epsilon; findings flagged."""
from __future__ import annotations

import math

from lia_spark.headline import Headline


def _headline(**changes) -> Headline:
    values = dict(eps_lb=0.912, eps_lb_mean=0.9, eps_lb_std=0.031, repetitions=20, confidence=0.95, tests=101,
                  delta=1e-5, mechanism="rr", claimed_epsilon=1.0)
    return Headline(**{**values, **changes})


def test_text_states_bound_confidence_tests_delta_mechanism_and_claim():
    text = _headline().text()
    assert text == ("eps >= 0.912 at 95% (binomial bound, Bonferroni over 101 tests, delta = 1e-05, tau = 0) for a target "
                    "trained with rr at claimed eps = 1; over 20 repetitions 0.900 +- 0.031")
    assert not _headline().is_finding


def test_a_bound_above_the_claim_is_a_finding():
    found = _headline(eps_lb=1.2, claimed_epsilon=1.0)
    assert found.is_finding and "FINDING" in found.text() and found.tags()["audit.finding"] == "true"
    assert not _headline(eps_lb=1.0, claimed_epsilon=1.0).is_finding  # equal is not more leakage than claimed


def test_no_noise_and_unstated_claims():
    none = _headline(mechanism="none", claimed_epsilon=math.inf)
    assert "claimed eps = inf" in none.text() and not none.is_finding
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
    from lia_spark.config import load_config
    from lia_spark.engine.audit import headline_family

    assert headline_family(load_config(None, []).audit) == "binomial"
    assert headline_family(load_config(None, ["audit.delta=1e-5"]).audit) == "gdp"
    assert headline_family(load_config(None, ["audit.delta=1e-5", "audit.bounds=[binomial]",
                                              "audit.table_bounds=[binomial]"]).audit) == "binomial"
    assert headline_family(load_config(None, ["audit.bounds=[gdp]", "audit.table_bounds=[gdp]"]).audit) == "gdp"
    assert "gdp bound" in _headline(family="gdp").text()
