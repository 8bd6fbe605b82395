"""The null that can fail (lia_spark.studies.exact_claim, docs/math.md §5.12): a target leaking exactly its claim, over
fresh draws of data, coins and release. The default audit's false-positive rate has a Clopper-Pearson upper limit
<= 5%; the same study finds the paper's convention (not a valid bound) over 5%, so it can fail; and the target is
strong, so the bound's calibration is tested where the ceiling is high."""
from __future__ import annotations

import numpy as np
import pytest

from lia_spark.kernels import audit, audit_sweep
from lia_spark.studies.exact_claim import exact_claim_draw, false_positive_limits

DRAWS = 300  # measured: 2 false positives (upper limit 2.1%); the paper's convention 59 (lower limit 16%); ~3 s
CANARIES = 8000  # about 2,400 informative canaries per draw
EPSILON = 2.0


@pytest.fixture(scope="module")
def draws():
    return [exact_claim_draw(draw, canaries=CANARIES, epsilon=EPSILON) for draw in range(DRAWS)]


def test_a_target_leaking_exactly_its_claim_is_a_finding_in_at_most_5_percent_of_audits(draws):
    bounds = np.array([draw.eps_lb for draw in draws])
    false_positives = int(np.sum(bounds > EPSILON))
    low, high = false_positive_limits(false_positives, DRAWS)
    assert high <= 0.05, f"{false_positives}/{DRAWS} audits exceed the claim: 95% upper limit {high:.3f}"
    informative = int(np.median([draw.informative for draw in draws]))
    ceiling = audit_sweep.ceiling(canaries=informative, guesses=audit.geometric_grid(informative),
                                  claimed_epsilon=EPSILON, tests=2 * len(audit.geometric_grid(informative)))
    assert np.median(bounds) >= 0.85 * ceiling.eps_lb  # a strong target: the test sits where the bound is near it
    assert np.all(bounds > EPSILON / 3)  # audited at a third of its eps, it is a finding every time


def test_the_same_study_catches_a_bound_that_is_not_valid(draws):
    """The paper's convention takes the best sweep point, each at the full 95%: on the same draws it exceeds the
    claim well over 5% of the time (its lower limit above 5%), so the first test's pass is evidence."""
    paper = np.array([draw.eps_lb_paper for draw in draws])
    low, _ = false_positive_limits(int(np.sum(paper > EPSILON)), DRAWS)
    assert low > 0.05, f"the paper's convention exceeds the claim in {np.mean(paper > EPSILON):.1%} of draws"


def test_limits_are_clopper_pearsons():
    assert false_positive_limits(4, 100) == pytest.approx((0.01378, 0.08920), abs=1e-5)
    assert false_positive_limits(0, 59)[1] < 0.05 < false_positive_limits(0, 58)[1]  # the rule of three's edge
    assert false_positive_limits(10, 10)[1] == 1.0 and false_positive_limits(0, 10)[0] == 0.0
