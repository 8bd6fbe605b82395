"""PATE (docs/math.md §4.6): accounting through dp-accounting, calibration, vote aggregation, determinism."""
from __future__ import annotations

import dataclasses
import math

import dp_accounting
import numpy as np
import pandas as pd
import pytest
from dp_accounting import rdp
from pyspark.sql import functions as F

from lia_spark.engine.models.pate_teachers import spark_votes
from lia_spark.kernels import features, hashing, model_libraries, pate, training

MODEL = model_libraries.TeacherModel(n_estimators=15, max_depth=3, learning_rate=0.3, seed=3)


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


def test_spark_catboost_teachers_stopping_on_the_validation_split_equal_sequential_ones(spark):
    rng = np.random.default_rng(3)
    n = 1200
    frame = pd.DataFrame({"x": rng.standard_normal(n), "c": rng.integers(0, 5, n).astype(str)})
    labels = (rng.random(n) < 1 / (1 + np.exp(-(frame["x"] + (frame["c"] == "2"))))).astype(np.int8)
    ids = rng.permutation(n).astype(np.int64) * 5 + 2
    model = model_libraries.TeacherModel(n_estimators=20, max_depth=3, learning_rate=0.4, seed=3,
                                         early_stopping_rounds=20, library=model_libraries.CATBOOST_LIBRARY,
                                         cat_features=("c",))
    validation_ids = ids[:100]
    validation = (frame.iloc[:100].reset_index(drop=True), labels[:100])
    students = ids[100:140]
    student_features = frame.iloc[100:140].reset_index(drop=True)
    rows = spark.createDataFrame(frame.assign(row_id=ids, label=labels.astype(np.int32))).repartition(3)
    training_rows = rows.where(~F.col("row_id").isin(validation_ids.tolist()))
    validation_rows = rows.where(F.col("row_id").isin(validation_ids.tolist()))
    parallel = spark_votes(training_rows, ["x", "c"], teachers=3, model=model, validation_rows=validation_rows)(
        students, student_features, 9)
    # the Spark path hands the teachers the validation rows in row-id order, as ModelData holds them
    order = np.argsort(validation_ids, kind="stable")
    sequential = pate.sequential_votes(ids[100:], frame.iloc[100:].reset_index(drop=True), labels[100:], teachers=3,
                                       model=model, validation=(validation[0].iloc[order].reset_index(drop=True),
                                                                validation[1][order]))(students, student_features, 9)
    np.testing.assert_array_equal(parallel, sequential)
    assert parallel.shape == (3, 40) and 0 < parallel.mean() < 1


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
    params = model_libraries.BoostingParams(n_estimators=15, max_depth=3, learning_rate=0.3, threads=1, seed=3)
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
    np.testing.assert_array_equal(runs[0].released_labels[students],
                                  hashing.bernoulli(8, pate.LABEL_PURPOSE, ids, share))
    assert runs[0].report["sigma"] == 0.0 and math.isinf(runs[0].report["epsilon"])
    private = runs[2].report
    assert private["epsilon"] <= 1.0 and private["sigma"] > 0 and private["queries"] == 300.0
    # one teacher on every training row (the student rows included) votes what a teacher fitted on all of them draws
    alone = pate.sequential_votes(data.row_ids[train], data.features[train], data.labels[train], teachers=1,
                                  model=training.teacher_model(params))(ids, data.features[students], 8)
    direct = pate.teacher_votes(data.row_ids[train], data.features[train], data.labels[train], ids,
                                data.features[students], teacher=0, vote_seed=8, model=training.teacher_model(params))
    np.testing.assert_array_equal(alone[0], direct)


@pytest.mark.parametrize("epsilon", [0.01, 0.1, 1.0, 8.0, 50.0])
def test_the_published_noise_scale_inverts_the_data_independent_bound(epsilon):
    scale = pate.data_independent_scale(epsilon=epsilon, queries=200, delta=1e-4)
    assert pate.data_independent_epsilon(scale=scale, queries=200, delta=1e-4) == pytest.approx(epsilon, rel=1e-12)
    # closed form at Wu et al.'s setting: Q = 200, scale 20, delta 1e-4 gives eps = 2 + 0.1 sqrt(400 ln 1e4) = 8.07
    assert pate.data_independent_epsilon(scale=20.0, queries=200, delta=1e-4) == pytest.approx(
        2.0 + 0.1 * math.sqrt(400.0 * math.log(1e4)), rel=1e-12)
    # dp-accounting's RDP analysis of the same Laplace noise is tighter than the closed form
    assert pate.pate_epsilon(sigma=scale, queries=200, delta=1e-4, noise=pate.LAPLACE) < epsilon


def test_the_published_protocol_at_eps_8_uses_scale_20():
    scale = pate.data_independent_scale(epsilon=8.0, queries=200, delta=1e-4)
    assert scale == pytest.approx(20.0, rel=0.01)
    assert pate.data_independent_scale(epsilon=math.inf, queries=200, delta=1e-4) == 0.0
    settings = pate.PateSettings.of_protocol(pate.PUBLISHED)
    assert (settings.queries, settings.noise, settings.student_labels, settings.delta, settings.accounting) == (
        200, pate.LAPLACE, pate.SAMPLED, 1e-4, pate.DATA_INDEPENDENT)
    assert pate.PateSettings.of_protocol(pate.PUBLISHED, queries=300).queries == 300  # a set field wins
    for bad, message in (({"queries": 0}, "queries must be >= 1"), ({"delta": 1.0}, r"delta must be in \(0, 1\)")):
        with pytest.raises(ValueError, match=message):
            pate.data_independent_scale(**{"epsilon": 8.0, "queries": 200, "delta": 1e-4, **bad})
    with pytest.raises(ValueError, match="scale must be non-negative"):
        pate.data_independent_epsilon(scale=-1.0, queries=200, delta=1e-4)


def _published(data: training.ModelData, teachers: int = 4, **fields) -> pate.PateSettings:
    return pate.PateSettings.of_protocol(pate.PUBLISHED, teachers=teachers, **fields)


def test_published_queries_votes_and_labels_are_keyed_by_row_id_not_row_order():
    data = _day(3000, seed=7)
    params = model_libraries.BoostingParams(threads=1, seed=3)
    fit = training.train_pate(data, epsilon=8.0, seed=11, params=params, settings=_published(data))
    order = np.random.default_rng(1).permutation(data.row_ids.size)
    shuffled = training.ModelData(data.features[order], data.labels[order], data.row_ids[order], data.split[order])
    again = training.train_pate(shuffled, epsilon=8.0, seed=11, params=params, settings=_published(shuffled))
    by_id = pd.Series(again.released_labels, index=shuffled.row_ids).reindex(data.row_ids).to_numpy()
    np.testing.assert_array_equal(fit.released_labels, by_id)  # same queries, votes, noise and draws per row id
    students = ~np.isnan(fit.released_labels)
    assert students.sum() == 200 and (data.split[students] == training.SPLIT_TRAIN).all()
    assert set(np.unique(fit.released_labels[students])) <= {0.0, 1.0}  # sampled labels
    report = fit.report
    assert report["epsilon"] == pytest.approx(8.0, rel=1e-9) and report["rdp_epsilon"] < 8.0
    assert report["sigma"] == pytest.approx(20.0, rel=0.01) and report["queries"] == 200.0
    np.testing.assert_allclose(fit.model.predict(data.features[:50]), again.model.predict(data.features[:50]),
                               rtol=1e-6)


def test_published_teachers_and_student_stop_on_the_validation_split_only():
    data = _day(3000, seed=8)
    params = model_libraries.BoostingParams(threads=1, seed=3)
    features_valid, labels_valid = training.validation_rows(data)
    valid = data.split == training.SPLIT_VALID
    assert valid.any() and not (valid & (data.split == training.SPLIT_TRAIN)).any()
    np.testing.assert_array_equal(labels_valid, data.labels[valid])  # held-out rows with their true labels
    fit = training.train_pate(data, epsilon=math.inf, seed=5, params=params, settings=_published(data))
    # the student refitted by hand: the 200 query rows' released labels, stopped on the validation split's
    # true labels with the protocol's trees (100 trees, learning rate 0.4, depth 8)
    students = ~np.isnan(fit.released_labels)
    student_params = training.protocol_params(params, pate.PUBLISHED)
    assert (student_params.n_estimators, student_params.learning_rate, student_params.max_depth) == (100, 0.4, 8)
    by_hand = training.fit_model(data, np.where(valid, data.labels, fit.released_labels), students, valid,
                                 params=student_params)
    assert by_hand.best_iteration == fit.model.best_iteration
    np.testing.assert_allclose(by_hand.predict(data.features), fit.model.predict(data.features), rtol=1e-6)


def test_published_pate_trains_catboost_teachers_and_student():
    rng = np.random.default_rng(2)
    n = 3000
    category = rng.integers(0, 6, n)
    numeric = rng.standard_normal(n)
    labels = (rng.random(n) < 1 / (1 + np.exp(-(0.8 * category - 2.5 + numeric)))).astype(np.int8)
    ids = np.arange(n, dtype=np.int64) * 3 + 1
    frame = pd.DataFrame({"x": numeric, "c": (category * 7919).astype(str)})
    data = training.ModelData(frame, labels, ids, features.split_codes(ids, seed=2, shares=(0.8, 0.04, 0.16)),
                              library=model_libraries.CATBOOST_LIBRARY, cat_features=["c"])
    params = model_libraries.BoostingParams(threads=1, seed=3)
    fit = training.train_pate(data, epsilon=8.0, seed=4, params=params, settings=_published(data, teachers=3))
    assert fit.model.library is model_libraries.CATBOOST_LIBRARY
    assert fit.report["epsilon"] == pytest.approx(8.0, rel=1e-9)
    assert (~np.isnan(fit.released_labels)).sum() == 200
    predictions = fit.model.predict(data.rows(data.split == training.SPLIT_TEST))
    assert np.isfinite(predictions).all() and 0 < predictions.mean() < 1
    soft = training.train_pate(data, epsilon=math.inf, seed=4, params=params,
                               settings=_published(data, teachers=3, student_labels=pate.SHARE))
    assert soft.released_labels is None and np.isfinite(soft.model.predict(data.rows(data.split == 2))).all()


@pytest.mark.parametrize("label", [0, 1])
def test_a_catboost_teacher_whose_rows_hold_one_class_votes_that_class(label):
    # at small sizes a partition of rare clicks can hold no click: CatBoost refuses such labels, the teacher votes
    # the one class it saw on every student row (what any model fitted on those rows predicts)
    rng = np.random.default_rng(5)
    frame = pd.DataFrame({"x": rng.standard_normal(40), "c": rng.integers(0, 3, 40).astype(str)})
    students = pd.DataFrame({"x": rng.standard_normal(7), "c": rng.integers(0, 3, 7).astype(str)})
    model = model_libraries.TeacherModel(n_estimators=5, max_depth=2, learning_rate=0.4, seed=1,
                                         library=model_libraries.CATBOOST_LIBRARY, cat_features=("c",))
    votes = pate.teacher_votes(np.arange(40), frame, np.full(40, label), np.arange(100, 107), students, teacher=0,
                               vote_seed=3, model=model)
    np.testing.assert_array_equal(votes, np.full(7, label))
