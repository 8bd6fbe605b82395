"""PATE (docs/math.md §4.6): accounting through dp-accounting, calibration, vote aggregation, determinism."""
from __future__ import annotations

import dataclasses
import math

import dp_accounting
import numpy as np
import pandas as pd
import pytest
from dp_accounting import rdp

from lia_spark.engine.models.pate_teachers import spark_votes
from lia_spark.kernels import features, hashing, pate, training

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


def test_vote_counts_and_shares_on_hand_made_votes():
    votes = np.array([[1, 0, 1, 0],
                      [1, 0, 0, 1],
                      [0, 0, 1, 1],
                      [1, 0, 0, 0]], dtype=np.int8)  # 4 teachers x 4 queries
    counts = pate.vote_counts(votes)
    np.testing.assert_array_equal(counts, [[1, 3], [4, 0], [2, 2], [2, 2]])
    np.testing.assert_allclose(pate.vote_shares(counts), [0.75, 0.0, 0.5, 0.5])
    # negative noisy counts are clipped at 0; a query with both clipped to 0 gets the share over all queries
    noisy = np.array([[-1.0, 3.0], [2.0, -0.5], [-2.0, -1.0], [3.0, 1.0]])
    np.testing.assert_allclose(pate.vote_shares(noisy), [1.0, 0.0, 4.0 / 9.0, 0.25])
    np.testing.assert_allclose(pate.vote_shares(np.array([[-1.0, -1.0]])), [0.5])


@pytest.mark.parametrize("noise, variance", [(pate.GAUSSIAN, 4.0), (pate.LAPLACE, 8.0)])
def test_noise_is_centred_with_the_configured_scale(noise, variance):
    ids = np.arange(200_000)
    added = pate.noisy_counts(np.zeros((ids.size, 2)), ids, sigma=2.0, seed=1, noise=noise)  # N(0, 4) or Lap(2)
    assert np.abs(added.mean(axis=0)).max() < 0.03
    np.testing.assert_allclose(added.var(axis=0), variance, rtol=0.03)  # Lap(b): variance 2 b^2
    assert abs(np.corrcoef(added[:, 0], added[:, 1])[0, 1]) < 0.01  # independent per class


def test_teacher_partition_covers_every_training_row_once_for_any_order():
    ids = np.random.default_rng(1).permutation(50_000).astype(np.int64) * 3 + 11
    teacher = pate.teacher_index(ids, teachers=100, seed=5)
    assert teacher.shape == ids.shape and teacher.min() == 0 and teacher.max() == 99
    sizes = np.bincount(teacher, minlength=100)
    assert sizes.sum() == ids.size and sizes.min() > 380 and sizes.max() < 620  # about 500 rows each
    order = np.argsort(ids)
    np.testing.assert_array_equal(pate.teacher_index(ids[order], teachers=100, seed=5), teacher[order])
    assert (pate.teacher_index(ids, teachers=100, seed=6) != teacher).mean() > 0.9


def test_votes_and_labels_are_draws_keyed_on_seed_purpose_and_row_id():
    ids = np.arange(100_000, dtype=np.int64) * 13
    p = np.linspace(0.0, 1.0, ids.size)
    votes = pate.sampled_votes(p, ids, teacher=7, seed=3)
    np.testing.assert_array_equal(votes, (hashing.uniform(3, pate.VOTE_PURPOSE, ids, 7) < p).astype(np.int8))
    assert abs(votes.mean() - 0.5) < 0.01 and votes[p == 0].sum() == 0 and votes[p == 1].all()
    shuffle = np.random.default_rng(0).permutation(ids.size)
    np.testing.assert_array_equal(pate.sampled_votes(p[shuffle], ids[shuffle], teacher=7, seed=3), votes[shuffle])
    assert (pate.sampled_votes(p, ids, teacher=8, seed=3) != votes).mean() > 0.3  # teachers draw independently
    votes = (np.arange(100)[:, None] < (np.arange(ids.size) % 101)[None, :]).astype(np.int8)  # n_1 = i mod 101
    answer = pate.student_labels(votes, ids, np.zeros(ids.size), epsilon=math.inf, seed=3,
                                 settings=pate.PateSettings(queries=ids.size, student_labels=pate.SAMPLED))
    share = (np.arange(ids.size) % 101) / 100.0
    np.testing.assert_array_equal(answer.labels, hashing.bernoulli(3, pate.LABEL_PURPOSE, ids, share))
    assert abs(answer.labels.mean() - share.mean()) < 0.01 and answer.sigma == 0.0
    assert answer.label_rate == answer.labels.mean() and answer.true_rate == 0.0
    assert answer.agreement == pytest.approx(1.0 - answer.labels.mean(), rel=1e-12)  # every true label is 0
    soft = pate.student_labels(votes, ids, np.ones(ids.size), epsilon=math.inf, seed=3,
                               settings=pate.PateSettings(queries=ids.size))  # the default: the share itself
    np.testing.assert_allclose(soft.labels, share, rtol=1e-15)
    assert soft.agreement == pytest.approx(share.mean(), rel=1e-12) and soft.true_rate == 1.0
    with pytest.raises(ValueError, match="pate.student_labels must be one of share, sampled"):
        pate.student_labels(votes, ids, np.ones(ids.size), epsilon=1.0, seed=3,
                            settings=pate.PateSettings(student_labels="argmax"))


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


def test_missing_teachers_are_refused_naming_the_field(spark):
    data = _day(40, seed=6)
    with pytest.raises(ValueError, match=r"pate.teachers: \d+ of the 500 teachers have no training row"):
        pate.sequential_votes(data.row_ids, data.features, data.labels, teachers=500, model=MODEL)(
            data.row_ids[:5], data.features[:5], 1)
    columns = [f"f{index}" for index in range(data.features.shape[1])]
    rows = spark.createDataFrame(pd.DataFrame(data.features, columns=columns).assign(
        row_id=data.row_ids, label=data.labels.astype(np.int32)))
    with pytest.raises(ValueError, match=r"pate.teachers: \d+ of the 500 teachers have no training row .* among "
                                         r"the 40 training rows"):
        spark_votes(rows, columns, teachers=500, model=MODEL)(data.row_ids[:5], data.features[:5], 1)


def test_students_query_the_teachers_own_rows_and_are_calibrated_at_infinity():
    data = _day(4000, seed=5)
    params = training.BoostingParams(n_estimators=15, max_depth=3, learning_rate=0.3, threads=1, seed=3)
    train = data.split == training.SPLIT_TRAIN
    fresh = pate.sequential_votes(data.row_ids[train], data.features[train], data.labels[train], teachers=5,
                                  model=training.teacher_model(params))
    reused = pate.ReusedVotes(fresh)
    settings = pate.PateSettings(teachers=5, queries=300, votes=reused, student_labels=pate.SAMPLED)
    runs = [training.train_pate(data, epsilon=epsilon, seed=8, params=params, settings=settings)
            for epsilon in (math.inf, math.inf, 1.0)]
    soft = training.train_pate(data, epsilon=math.inf, seed=8, params=params,
                               settings=dataclasses.replace(settings, student_labels=pate.SHARE))
    assert soft.released_labels is None and soft.report["share_labels"] == 1.0  # no per-row label released
    assert reused.fits == 1  # the votes do not depend on epsilon: one fit of the teachers for the three runs
    np.testing.assert_array_equal(runs[0].released_labels, runs[1].released_labels)
    students = ~np.isnan(runs[0].released_labels)
    assert students.sum() == 300 and train[students].all()  # the queries are training rows
    # eps = inf: the released labels are draws from the plain vote share of freshly fitted teachers
    ids = data.row_ids[students]
    votes = fresh(ids, data.features[students], 8)
    share = votes.mean(axis=0)
    np.testing.assert_array_equal(runs[0].released_labels[students], hashing.bernoulli(8, pate.LABEL_PURPOSE, ids, share))
    assert runs[0].report["sigma"] == 0.0 and math.isinf(runs[0].report["epsilon"])
    private = runs[2].report
    assert private["epsilon"] <= 1.0 and private["sigma"] > 0 and private["queries"] == 300.0
    # one teacher on every training row (the student rows included) votes what a teacher fitted on all of them draws
    alone = pate.sequential_votes(data.row_ids[train], data.features[train], data.labels[train], teachers=1,
                                  model=training.teacher_model(params))(ids, data.features[students], 8)
    direct = pate.teacher_votes(data.row_ids[train], data.features[train], data.labels[train], ids,
                                data.features[students], teacher=0, vote_seed=8,
                                **dataclasses.asdict(training.teacher_model(params)))
    np.testing.assert_array_equal(alone[0], direct)
