"""PATE (docs/math.md §4.6): accounting through dp-accounting, calibration, vote aggregation, determinism."""
from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pandas as pd
import pytest
from dp_accounting import rdp

from lia_spark.engine.pate_teachers import spark_votes
from lia_spark.kernels import features, pate, training

MODEL = pate.TeacherModel(n_estimators=15, max_depth=3, learning_rate=0.3, seed=3)


@pytest.mark.parametrize("noise, sigma, queries", [(pate.GAUSSIAN, 40.0, 1000), (pate.GAUSSIAN, 300.0, 10_000),
                                                   (pate.LAPLACE, 25.0, 500)])
def test_epsilon_equals_a_direct_dp_accounting_computation(noise, sigma, queries):
    # Reference: the accountant fed Q single queries (compose(event, count=Q)) rather than one self-composed
    # event; GNMax = Gaussian mechanism with L2 sensitivity sqrt 2, LNMax = Laplace with L1 sensitivity 2.
    if noise == pate.GAUSSIAN:
        query = dp_accounting.GaussianDpEvent(noise_multiplier=sigma / math.sqrt(2.0))
    else:
        query = dp_accounting.LaplaceDpEvent(noise_multiplier=sigma / 2.0)
    accountant = rdp.RdpAccountant()
    accountant.compose(query, count=queries)
    direct = accountant.get_epsilon(1e-5)
    assert pate.pate_epsilon(sigma=sigma, queries=queries, delta=1e-5, noise=noise) == pytest.approx(direct, rel=1e-12)


@pytest.mark.parametrize("noise", pate.NOISES)
@pytest.mark.parametrize("epsilon", [0.1, 1.0, 8.0])
def test_sigma_calibration_hits_the_requested_epsilon(noise, epsilon):
    sigma = pate.calibrate_sigma(epsilon=epsilon, queries=10_000, noise=noise)
    reached = pate.pate_epsilon(sigma=sigma, queries=10_000, noise=noise)
    assert reached <= epsilon and epsilon - reached < 1e-3
    assert pate.pate_epsilon(sigma=0.99 * sigma, queries=10_000, noise=noise) > epsilon  # the smallest such sigma


def test_vote_aggregation_and_argmax_on_hand_made_votes():
    votes = np.array([[1, 0, 1, 0],
                      [1, 0, 0, 1],
                      [0, 0, 1, 1],
                      [1, 0, 0, 0]], dtype=np.int8)  # 4 teachers x 4 queries
    counts = pate.vote_counts(votes)
    np.testing.assert_array_equal(counts, [[1, 3], [4, 0], [2, 2], [2, 2]])
    ids = np.array([11, 12, 13, 14])
    labels = pate.noisy_argmax(counts, ids, sigma=0.0, seed=7)
    np.testing.assert_array_equal(labels[:2], [1, 0])
    coin = pate.noisy_argmax(counts, ids, sigma=0.0, seed=7)[2:]  # ties: a coin by (seed, row id)
    np.testing.assert_array_equal(coin, pate.noisy_argmax(counts[2:], ids[2:], sigma=0.0, seed=7))
    assert set(np.unique([pate.noisy_argmax(counts[2:], ids[2:], sigma=0.0, seed=s) for s in range(20)])) == {0, 1}


def test_noise_is_centred_with_the_configured_scale():
    ids = np.arange(200_000)
    counts = np.zeros((ids.size, 2))
    gaussian = pate.noisy_argmax(counts + [[0, 1]], ids, sigma=2.0, seed=1)  # P(N(0, 8) < 1) = Phi(1 / sqrt 8)
    assert gaussian.mean() == pytest.approx(0.6382, abs=0.005)
    laplace = pate.noisy_argmax(counts + [[0, 1]], ids, sigma=2.0, seed=1, noise=pate.LAPLACE)
    # difference of two Lap(b): P(D < 1) = 1 - (1/2)(1 + 1/(2b)) e^{-1/b}, b = 2
    assert laplace.mean() == pytest.approx(1 - 0.5 * 1.25 * math.exp(-0.5), abs=0.005)


def _day(n: int, seed: int) -> training.ModelData:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 4)).astype(np.float32)
    labels = (rng.random(n) < 1 / (1 + np.exp(-(2 * x[:, 0] - x[:, 1])))).astype(np.int8)
    ids = rng.permutation(n).astype(np.int64) * 7 + 5
    return training.ModelData(x, labels, ids, features.split_codes(ids, seed=seed, shares=(0.8, 0.04, 0.16)))


def test_spark_teachers_equal_sequential_ones_for_any_row_order(spark):
    data = _day(3000, seed=4)
    students = data.row_ids[:50]
    sequential = pate.sequential_votes(data.row_ids, data.features, data.labels, teachers=6, model=MODEL)(
        students, data.features[:50], 9)
    shuffled = np.random.default_rng(0).permutation(data.row_ids.size)
    columns = [f"f{index}" for index in range(data.features.shape[1])]
    frame = pd.DataFrame(data.features[shuffled], columns=columns).assign(
        row_id=data.row_ids[shuffled], label=data.labels[shuffled].astype(np.int32))
    rows = spark.createDataFrame(frame).repartition(3)
    parallel = spark_votes(rows, columns, teachers=6, model=MODEL)(students, data.features[:50], 9)
    np.testing.assert_array_equal(parallel, sequential)
    assert 0 < sequential.mean() < 1


def test_teachers_vote_for_the_upper_half_of_the_student_rows():
    """A rare positive class: a 1/2 threshold would make every vote 0; the median threshold splits the student
    rows in halves, the riskier half voted 1."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4000, 2)).astype(np.float32)
    labels = (rng.random(4000) < 1 / (1 + np.exp(4.0 - 1.5 * x[:, 0]))).astype(np.int8)  # about 4% positives
    students = rng.standard_normal((1000, 2)).astype(np.float32)
    found = pate.teacher_votes(np.arange(4000), x, labels, students, **vars(MODEL))
    assert labels.mean() < 0.1 and 0.5 <= found.mean() < 0.55
    assert found[students[:, 0] > 1.0].mean() > 0.9 and found[students[:, 0] < -1.0].mean() < 0.1


def test_student_labels_deterministic_and_non_private_at_infinity():
    data = _day(4000, seed=5)
    params = training.BoostingParams(n_estimators=15, max_depth=3, learning_rate=0.3, threads=1, seed=3)
    train = data.split == training.SPLIT_TRAIN
    fresh = pate.sequential_votes(data.row_ids[train], data.features[train], data.labels[train], teachers=5,
                                  model=training.teacher_model(params))
    reused = pate.ReusedVotes(fresh)
    settings = pate.PateSettings(teachers=5, queries=300, votes=reused)
    runs = [training.train_pate(data, epsilon=epsilon, seed=8, params=params, settings=settings)
            for epsilon in (math.inf, math.inf, 1.0)]
    assert reused.fits == 1  # the votes do not depend on epsilon: one fit of the teachers for the three runs
    np.testing.assert_array_equal(runs[0].released_labels, runs[1].released_labels)
    students = ~np.isnan(runs[0].released_labels)
    assert students.sum() == 300
    # eps = inf: the released labels are the plain majority vote of freshly fitted teachers (ties: the hashed coin)
    votes = fresh(data.row_ids[students], data.features[students], 8)
    majority = pate.noisy_argmax(pate.vote_counts(votes), data.row_ids[students], sigma=0.0, seed=8)
    np.testing.assert_array_equal(runs[0].released_labels[students], majority)
    assert runs[0].report["sigma"] == 0.0 and math.isinf(runs[0].report["epsilon"])
    private = runs[2].report
    assert private["epsilon"] <= 1.0 and private["sigma"] > 0 and private["queries"] == 300.0
    assert runs[0].report["student_label_agreement"] > private["student_label_agreement"]
