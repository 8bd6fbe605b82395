"""Train stage on local Spark: canary table contract, resumability, in-memory vs xgboost.spark, LLP targets, the
membership baseline's candidates (with its audit)."""
from __future__ import annotations

import dataclasses
import json
import math
import os

import numpy as np
import pandas as pd
import pytest
from json_support import check_file, check_result
from key_support import key_file, stored_key

from lia_spark.engine.models.bags import row_bag_proportions
from lia_spark.engine.models.execution import membership_candidates
from lia_spark.engine.models.feature_frames import read_day
from lia_spark.engine.models.preparation import (Preparation, TargetJob, boosting_params, check_driver_fits,
                                                 prepare_days, training_seed)
from lia_spark.engine.orchestration.registry import run_stage
from lia_spark.engine.runtime.outputs import MARKER
from lia_spark.engine.spark.memory import byte_size
from lia_spark.engine.train import metrics
from lia_spark.kernels import features, injected, label_mechanisms, mechanisms, membership, pate, synthetic, training
from lia_spark.kernels.criteo import CAT_COLUMNS, INT_COLUMNS, STORAGE_DDL
from lia_spark.names import RUN_COLUMNS
from lia_spark.run.checks import ConfigError
from lia_spark.run.config import load_config

ROWS_PER_DAY = 5000


@pytest.fixture(scope="module")
def parquet_path(spark, tmp_path_factory):
    """Two days of the synthetic twin (25% clicks for a clear signal on few rows) in the storage schema."""
    params = synthetic.calibrate_twin(seed=7, click_rate=0.25, days=2, sample_rows=20_000)
    frames = []
    for day in (0, 1):
        batch = synthetic.generate_rows(params, day=day, positions=np.arange(ROWS_PER_DAY))
        frame = {"row_id": batch.row_id, "day": batch.day, "label": batch.label}
        for name in INT_COLUMNS + CAT_COLUMNS:
            frame[name] = pd.array(np.where(batch.missing[name], None, batch.values[name]).tolist(), dtype="Int64")
        frames.append(pd.DataFrame(frame))
    path = str(tmp_path_factory.mktemp("train") / "data")
    spark.createDataFrame(pd.concat(frames), STORAGE_DDL).write.partitionBy("day").parquet(path)
    return path


def _config(parquet_path: str, out: str, *overrides: str):
    """Small fits; no shadow fits (audit.shadows) but where a test asks for them (the in-memory run's); one fixed audit
    key beside the data (audit.key_path), so runs in different folders draw the same coins and compare."""
    key = key_file(os.path.join(os.path.dirname(parquet_path), "audit_key"), label="lia-spark tests: train stage")
    return load_config(None, [f"run.output_dir={out}", f"data.parquet_path={parquet_path}", "models.n_estimators=25",
                              "models.max_depth=4", "models.learning_rate=0.3", "models.min_category_count=3",
                              "audit.shadows=0", f"audit.key_path={key}", *overrides])


RR_SETTINGS = ("models.training_mechanism=rr", "models.epsilon=2.0")
RUNS = ("audit.shadows=2", "audit.runs=2")  # two shadow fits and one extra training run beside each target


@pytest.fixture(scope="module")
def in_memory_run(spark, parquet_path, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("in_memory"))
    config = _config(parquet_path, out, *RR_SETTINGS, "audit.shadows=4", "audit.runs=3")
    return config, run_stage("train", spark, config)


def test_in_memory_writes_canaries_and_resumes(spark, in_memory_run):
    config, result = in_memory_run
    out = config.run.output_dir
    canaries = spark.read.parquet(os.path.join(out, "models", "canaries"))
    assert canaries.dtypes == [("row_id", "bigint"), ("label", "int"), ("released_label", "int"),
                               ("target_prediction", "double"), ("proxy_prediction", "double"),
                               ("counterfactual_label", "int"), ("hidden_bit", "int"),
                               ("reference_prediction", "double"), ("shadow_prediction", "double"),
                               ("run_hidden_bits", "array<int>"), ("run_target_predictions", "array<double>")]
    local = canaries.toPandas()
    assert len(local) == result.rows["train_target"] and 0.75 < len(local) / ROWS_PER_DAY < 0.85
    assert local["row_id"].is_unique and np.all(local["row_id"].to_numpy() >> 40 == 1)
    # the injected design (default): y1 ~ M'(x) and b keyed on (the audit key, purpose, row_id); RR released y^b
    y1, coin = injected.injected_draws(local["row_id"].to_numpy(), local["label"].to_numpy(),
                                       local["proxy_prediction"].to_numpy(), key=stored_key(config))
    np.testing.assert_array_equal(local["counterfactual_label"], y1)
    np.testing.assert_array_equal(local["hidden_bit"], coin)
    assert local["reference_prediction"].isna().all()
    # audit.shadows = 4 label-blind shadow fits (in memory): their baseline on every canary, not the target's
    assert local["shadow_prediction"].between(0, 1).all() and result.seconds["fit_shadows"] > 0
    assert not np.allclose(local["shadow_prediction"], local["target_prediction"])
    # audit.runs = 3: two extra runs, each with its own coins (not the target's) and its own model
    for run in (1, 2):
        np.testing.assert_array_equal(local["run_hidden_bits"].map(lambda bits: bits[run - 1]),
                                      injected.run_coins(local["row_id"].to_numpy(), key=stored_key(config), run=run))
    extra = np.stack(local["run_target_predictions"].to_numpy())
    assert extra.shape == (len(local), 2) and ((extra > 0) & (extra < 1)).all() and result.seconds["fit_runs"] > 0
    assert not np.allclose(extra[:, 0], local["target_prediction"]) and not np.allclose(extra[:, 0], extra[:, 1])
    trained = injected.training_labels(local["label"].to_numpy(), y1, coin)
    informative = (local["label"] != y1).mean()  # 2 p (1 - p)-like at a 25% click rate: about 0.3
    assert (0.15 < informative < 0.5
            and abs((trained != local["label"]).mean() - informative / 2) < 0.03)  # b = 1 on half
    assert result.rows["informative_canaries"] == (local["label"] != y1).sum()
    assert "injected_labels" not in result.rows  # nothing derived from the coins leaves the audit
    flips = (trained != local["released_label"]).mean()
    pi = 1 / (1 + math.exp(2.0))
    assert abs(flips - pi) < 5 * math.sqrt(pi * (1 - pi) / len(local))
    assert local[["target_prediction", "proxy_prediction"]].apply(lambda c: c.between(0, 1).all()).all()
    found = result.metrics()
    # 4,000 training rows, 16% of their labels injected and RR at eps = 2 on top: a weaker target than the proxy
    assert found["auc_test_target"] > 0.55 and found["auc_test_proxy"] > 0.6, found
    assert all(os.path.exists(path) for path in result.artifacts())
    metrics_json = check_file(os.path.join(out, "models", "metrics.json"))  # standard JSON matching its schema
    assert metrics_json == check_result(result, "train") and metrics_json["test_metrics"] == result.test_metrics
    assert [check_file(path)["link"] for path in result.encoding_files if path.endswith(".output.json")] == [
        "sigmoid", "sigmoid"]  # proxy and target
    again = run_stage("train", spark, config)
    assert again.skipped and again.test_metrics == result.test_metrics
    assert os.path.exists(os.path.join(out, "models", MARKER))


def test_extra_training_runs_pool_into_one_game(spark, in_memory_run):
    """audit.runs = 3 (docs/math.md §5.14): the audit plays every (canary, run) pair, m = 3 x the informative
    canaries, and its bound is the pooled game computed in process (run r's pair keyed r << 48 | row_id, its coin
    and prediction the run's, the canary's y0, y1 and shadow baseline)."""
    from lia_spark.studies import power

    config, _ = in_memory_run
    local = pd.read_parquet(os.path.join(config.run.output_dir, "models", "canaries"))
    audited = run_stage("audit", spark, config)
    informative = int((local["label"] != local["counterfactual_label"]).sum())
    assert audited.summary.canaries == 3 * informative and audited.headline.training_runs == 3
    assert f"{3 * informative} informative canaries, 3 training runs pooled" in audited.headline.text()
    pooled, runs = power.pooled_canaries(local)
    assert runs == 3 and pooled["row_id"].is_unique and len(pooled) == 3 * len(local)
    second = pooled[pooled["row_id"].to_numpy() >> 48 == 2]
    second = second.set_index(second["row_id"].to_numpy() & ((1 << 48) - 1))
    expected = local.set_index("row_id")["run_hidden_bits"].map(lambda bits: bits[1])
    assert (second["hidden_bit"] == expected.loc[second.index]).all() and len(second) == len(local)
    studied = power.audit_choice(pooled, config.audit, seed=config.run.seed, claimed_epsilon=2.0,
                                 baselines=audited.summary.baselines)
    assert audited.summary.baselines == ("shadow_prediction",) and studied.informative == 3 * informative
    assert studied.eps_lb == audited.headline.eps_lb and studied.tests == audited.summary.tests
    import lia_spark  # the Python API pools the table's runs too, in process and on the executors

    for table in (local, spark.createDataFrame(local)):
        found = lia_spark.audit_predictions(table, seed=config.run.seed)
        assert found.eps_lb == audited.headline.eps_lb and found.training_runs == 3
        assert "3 training runs pooled" in found.summary() and audited.headline.tags()["audit.training_runs"] == "3"
    broken = local.assign(run_target_predictions=local["run_target_predictions"].map(lambda values: values[:1]))
    with pytest.raises(ValueError, match="must list the same number of runs on every canary, got 1 to 2"):
        lia_spark.audit_predictions(broken)
    with pytest.raises(Exception, match="must list the same number of runs on every canary, got 1 to 2"):
        lia_spark.audit_predictions(spark.createDataFrame(broken))


def _assert_priors_are_the_proxy_predictions(out: str, result, days: tuple[int, ...] = (1,)) -> pd.DataFrame:
    """models/priors: (row_id, proxy_prediction) for every row of the released days (mechanisms.days; default the
    target day 1), equal to the proxy predictions the stage computed for the target's canary and test rows."""
    priors = pd.read_parquet(os.path.join(out, "models", "priors"))
    assert list(priors.dtypes.astype(str).items()) == [("row_id", "int64"), ("proxy_prediction", "float64")]
    assert len(priors) == len(days) * ROWS_PER_DAY == result.rows["priors"] and priors["row_id"].is_unique
    assert sorted(set(priors["row_id"].to_numpy() >> 40)) == list(days)
    known = pd.concat([pd.read_parquet(os.path.join(out, "models", name), columns=["row_id", "proxy_prediction"])
                       for name in ("canaries", "test_predictions")])
    merged = known.merge(priors, on="row_id", suffixes=("", "_prior"))
    assert len(merged) == len(known) > 0.9 * ROWS_PER_DAY
    np.testing.assert_allclose(merged["proxy_prediction_prior"], merged["proxy_prediction"], rtol=0, atol=1e-6)
    return priors


PROXY_PRIORS = "mechanisms.prior_column=proxy_prediction"


def test_in_memory_trains_on_the_seeded_day_sample(spark, parquet_path, tmp_path, in_memory_run):
    """models.sample_rows_per_day below the day's rows: proxy and target see about that many rows of their day,
    the canaries are the sample's training split, and the sample does not depend on the partitioning."""
    config = _config(parquet_path, str(tmp_path / "sampled"), *RR_SETTINGS, "models.sample_rows_per_day=2000")
    result = run_stage("train", spark, config)
    rows = sum(result.rows[name] for name in ("train_target", "valid_target", "test_target"))
    assert abs(rows - 2000) < 5 * math.sqrt(2000 * 0.6)  # Bernoulli(0.4) over 5000 rows
    canaries = spark.read.parquet(os.path.join(config.run.output_dir, "models", "canaries")).toPandas()
    sample = features.in_day_sample(canaries["row_id"].to_numpy(), seed=config.run.seed, share=2000 / ROWS_PER_DAY)
    assert sample.all() and len(canaries) == result.rows["train_target"]
    whole = in_memory_run[1]
    assert whole.rows["train_target"] > 3500  # the default (1M) keeps a 5000-row day whole


def test_whole_day_that_cannot_fit_the_driver_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match=r"models.sample_rows_per_day: in-memory training would collect "
                                          r"6,500,000 rows of day 1 .* more than spark.driver.maxResultSize .* "
                                          r"set models.sample_rows_per_day to at most 4,473,924"):
        check_driver_fits(6_500_000, {"spark.driver.maxResultSize": byte_size("1g"),
                                      "half of spark.driver.memory": byte_size("4g") // 2},
                          day=1, total=6_500_000, sample_rows=0)
    check_driver_fits(1_010_000, {"spark.driver.maxResultSize": byte_size("1g")}, day=1, total=6_500_000,
                      sample_rows=1_000_000)
    assert (byte_size("512m"), byte_size("4096k"), byte_size("2048"), byte_size("0")) == (2**29, 2**22, 2048, 0)


def test_synthetic_default_prior_writes_no_proxy_priors(in_memory_run):
    config, result = in_memory_run
    assert not os.path.exists(os.path.join(config.run.output_dir, "models", "priors")) and "priors" not in result.rows


def test_in_memory_proxy_priors_score_every_row_of_the_released_days(spark, parquet_path, tmp_path, caplog):
    """Scored on the executors (the pickled proxy in mapInPandas) for every day of mechanisms.days=all in one pass:
    equal to the in-memory proxy's predictions; the proxy's own day is released with a warning, and the resolved
    days are in the fingerprint."""
    with caplog.at_level("WARNING", logger="lia_spark.engine.train.stage"):
        result = run_stage("train", spark, _config(parquet_path, str(tmp_path), PROXY_PRIORS, "mechanisms.days=all"))
    _assert_priors_are_the_proxy_predictions(str(tmp_path), result, days=(0, 1))
    assert result.metrics()["rows_priors"] == 2 * ROWS_PER_DAY
    assert "mechanisms.days includes models.proxy_day 0" in caplog.text
    with open(os.path.join(str(tmp_path), "models", MARKER), encoding="utf-8") as handle:
        assert json.load(handle)["lia_fingerprint"]["parameters"]["mechanisms.days"] == [0, 1]


@pytest.mark.slow  # 40-100 s: the end-to-end tier (README)
def test_distributed_matches_in_memory_auc(spark, parquet_path, tmp_path, in_memory_run):
    in_memory = in_memory_run[1]
    distributed = run_stage("train", spark, _config(parquet_path, str(tmp_path), *RR_SETTINGS,
                                                  "models.execution=distributed", PROXY_PRIORS))
    priors = _assert_priors_are_the_proxy_predictions(str(tmp_path), distributed)
    _assert_equal_to_saved_proxy(spark, _config(parquet_path, str(tmp_path), "models.execution=distributed"), priors)
    released = spark.read.parquet(os.path.join(str(tmp_path), "models", "canaries")).toPandas()
    expected = spark.read.parquet(os.path.join(in_memory.output_dir, "canaries")).toPandas()
    assert sorted(released["row_id"]) == sorted(expected["row_id"])
    config = _config(parquet_path, str(tmp_path), *RR_SETTINGS)
    for canaries in (released, expected):  # each path: y1 from its own proxy, b, and RR applied to y^b, per row id
        ids, label = canaries["row_id"].to_numpy(), canaries["label"].to_numpy()
        key = stored_key(config)
        y1, coin = injected.injected_draws(ids, label, canaries["proxy_prediction"].to_numpy(), key=key)
        np.testing.assert_array_equal(canaries["counterfactual_label"], y1)
        np.testing.assert_array_equal(canaries["hidden_bit"], coin)
        np.testing.assert_array_equal(canaries["released_label"], label_mechanisms.randomized_response(
            injected.training_labels(label, y1, coin), ids, epsilon=2.0, seed=training_seed(config, key)))
    a, b = in_memory.metrics()["auc_test_target"], distributed.metrics()["auc_test_target"]
    # The same mechanism on labels injected from each path's own proxy, same features and hyper-parameters;
    # histogram and partition details differ: AUCs agree to 0.03 (~1.5 standard errors of AUC on ~800 test rows).
    assert a > 0.55 and abs(a - b) < 0.04, (a, b)  # 0.55: see test_in_memory_writes_canaries_and_resumes
    assert distributed.model_files[-1].endswith("target.ubj") and os.path.exists(distributed.model_files[-1])


@pytest.mark.slow  # 40-100 s: the end-to-end tier (README)
def test_llp_targets_in_memory_and_distributed(spark, parquet_path, tmp_path):
    """Proportion matching in memory and the debiased bag-proportion regression on xgboost.spark (docs/math.md
    §4.7) both learn from bags of 2; neither writes per-row released labels."""
    aucs = {}
    for execution in ("in_memory", "distributed"):
        out = str(tmp_path / execution)
        result = run_stage("train", spark, _config(parquet_path, out, "models.training_mechanism=llp",
                                                 "models.bag_size=2", f"models.execution={execution}"))
        canaries = spark.read.parquet(os.path.join(out, "models", "canaries")).toPandas()
        assert canaries["released_label"].isna().all() and canaries["target_prediction"].between(0, 1).all()
        aucs[execution] = result.metrics()["auc_test_target"]
    # ~800 test rows: one standard error of AUC is ~0.02, and the two estimators differ (in numpy on these rows,
    # 5 seeds: |difference| <= 0.017 at k = 2; up to 0.05 at k = 4 with early stopping after 1-2 trees): 0.05.
    assert aucs["in_memory"] > 0.58 and abs(aucs["in_memory"] - aucs["distributed"]) < 0.05, aucs


@pytest.mark.parametrize("mechanism, epsilon", [("llp", math.inf), ("llp_geometric", 1.0)])
def test_bag_proportions_on_spark_equal_the_kernel(spark, mechanism, epsilon):
    """Each row's proportion from the executors' per-unit bagging equals the in-memory kernel's on the whole set,
    over 8 bagging units and 7 input partitions."""
    rng = np.random.default_rng(3)
    ids = rng.choice(10**9, size=20_000, replace=False).astype(np.int64)
    labels = (rng.random(ids.size) < 0.3).astype(np.int32)
    rows = spark.createDataFrame(pd.DataFrame({"row_id": ids, "label": labels})).repartition(7)
    released = row_bag_proportions(rows, mechanism=mechanism, epsilon=epsilon, bag_size=8, seed=11,
                                   rows_per_unit=2_000).toPandas().set_index("row_id").loc[ids, "bag_proportion"]
    index, alpha = label_mechanisms.bag_proportions(ids, labels, mechanism=mechanism, epsilon=epsilon, bag_size=8,
                                                    seed=11, unit_bits=3)
    assert np.array_equal(released.to_numpy(), alpha[index])
    unit_sizes = np.bincount(mechanisms.bagging_units(mechanisms.bagging_keys(ids, seed=11), unit_bits=3))
    assert unit_sizes.size == 8 and index.max() + 1 == np.ceil(unit_sizes / 8).sum()  # one remainder bag per unit


def _assert_equal_to_saved_proxy(spark, config, priors: pd.DataFrame) -> None:
    """The distributed priors equal the saved xgboost.spark proxy's predictions computed in memory on the
    driver for the same rows (features of the proxy's own encoding, its saved output transform)."""
    import xgboost as xgb

    from lia_spark.engine.models import preparation
    from lia_spark.kernels import model_output

    proxy_rows = read_day(spark, config.parquet_path, config.models.proxy_day)
    spec = preparation.feature_spec(proxy_rows, config)
    day = read_day(spark, config.parquet_path, config.models.target_day)  # days = target
    data = preparation.collect_model_data(preparation.model_features(day, spec, config), spec,
                                          config.models.model_library)
    model_file = os.path.join(config.run.output_dir, "models", "proxy.ubj")
    booster = xgb.Booster(model_file=model_file)
    output = model_output.load_output_transform(model_output.output_transform_file(model_file))
    expected = pd.DataFrame({"row_id": data.row_ids,
                             "expected": output.probabilities(output.raw_output(booster, data.features))})
    merged = expected.merge(priors, on="row_id")
    assert len(merged) == len(priors)
    np.testing.assert_allclose(merged["proxy_prediction"], merged["expected"], rtol=0, atol=1e-12)


def test_catboost_in_memory_with_the_observational_reference(spark, parquet_path, tmp_path):
    result = run_stage("train", spark, _config(parquet_path, str(tmp_path), "models.library=catboost",
                                             "utility.bag_sizes=[]", PROXY_PRIORS, "audit.design=observational"))
    _assert_priors_are_the_proxy_predictions(str(tmp_path), result)
    canaries = pd.read_parquet(os.path.join(str(tmp_path), "models", "canaries"))
    assert canaries["reference_prediction"].between(0, 1).all()  # the label-blind reference on every canary
    assert canaries[["counterfactual_label", "hidden_bit"]].isna().all().all()  # trained on the true labels
    assert not np.allclose(canaries["reference_prediction"], canaries["target_prediction"])
    assert result.metrics()["auc_test_target"] > 0.6
    assert {os.path.basename(path) for path in result.model_files} == {"proxy.cbm", "target.cbm"}


@pytest.mark.slow  # 40-100 s: the end-to-end tier (README)
def test_cells_of_one_process_share_the_proxy_and_match_a_fresh_process(spark, parquet_path, tmp_path):
    """A second target on the same data and models fields reuses the prepared proxy / target day and PATE's
    teachers' votes; its outputs equal those of a process that prepares them itself (everything in the
    preparation is deterministic)."""
    pate_fields = ("models.training_mechanism=pate", "pate.teachers=4", "pate.queries=300")
    preparation = Preparation()
    run_stage("train", spark, _config(parquet_path, str(tmp_path / "first"), *pate_fields), preparation=preparation)
    second = _config(parquet_path, str(tmp_path / "second"), *pate_fields, "models.epsilon=1.0")
    shared = run_stage("train", spark, second, preparation=preparation)
    assert "proxy_reused" in shared.seconds and "collect_proxy" not in shared.seconds
    assert [settings.votes.fits for settings in preparation.pate.values()] == [1]  # one key: one set of teachers
    fresh = run_stage("train", spark, dataclasses.replace(
        second, run=dataclasses.replace(second.run, output_dir=str(tmp_path / "fresh"))))
    assert "collect_proxy" in fresh.seconds  # not shared: a fresh preparation
    read = lambda result: (spark.read.parquet(os.path.join(result.output_dir, "canaries")).toPandas()
                           .sort_values("row_id").reset_index(drop=True))
    pd.testing.assert_frame_equal(read(shared), read(fresh))
    assert shared.test_metrics == fresh.test_metrics


@pytest.mark.parametrize("partitions", [1, 7])
def test_spark_metrics_equal_the_in_memory_metrics_with_ties(spark, partitions):
    """Exact AUC (ties counted half) and log-loss on the executors equal sklearn's, whatever the partitioning."""
    rng = np.random.default_rng(partitions)
    labels = (rng.random(20_000) < 0.2).astype(np.int32)
    predictions = np.round(np.clip(0.2 + 0.3 * (labels - 0.2) + rng.normal(0, 0.2, labels.size), 0, 1), 3)
    predictions[:50] = 0.0  # clipped to 1e-7 like the in-memory metrics
    frame = spark.createDataFrame(pd.DataFrame({"label": labels, "p": predictions})).repartition(partitions)
    expected = training.binary_metrics(labels, predictions)
    found = metrics.binary_metrics(frame, label="label", prediction="p")
    assert found["auc"] == pytest.approx(expected["auc"], abs=1e-12)
    assert found["log_loss"] == pytest.approx(expected["log_loss"], rel=1e-12)
    one_class = metrics.binary_metrics(frame.where("label = 0"), label="label", prediction="p")
    assert math.isnan(one_class["auc"]) and one_class["log_loss"] > 0


def test_membership_attack_leaves_out_the_non_members_and_audits_them(spark, parquet_path, tmp_path):
    config = _config(parquet_path, str(tmp_path), *RR_SETTINGS, "audit.attack=membership",
                     "audit.membership_candidates=600", "audit.sweep=linear",
                     "audit.sweep_step_percent=10")
    result = run_stage("train", spark, config)
    out = config.run.output_dir
    candidates = pd.read_parquet(os.path.join(out, "models", "membership"))
    assert list(candidates.columns) == ["row_id", "label", "member", "target_prediction", "proxy_prediction"]
    ids, member = candidates["row_id"].to_numpy(np.int64), candidates["member"].to_numpy(np.int8)
    assert len(candidates) == 600 and candidates["row_id"].is_unique
    np.testing.assert_array_equal(member, membership.membership(ids, key=stored_key(config)))
    canary_ids = set(pd.read_parquet(os.path.join(out, "models", "canaries"))["row_id"])
    assert canary_ids.isdisjoint(ids[member == 0]) and canary_ids.issuperset(ids[member == 1])
    assert result.rows["left_out_target"] == (member == 0).sum() and 250 < (member == 0).sum() < 350
    assert result.attack == "membership" and os.path.join(out, "models", "membership") in result.row_data()
    audited = run_stage("audit", spark, config)
    guesses, correct = membership.sweep_counts(ids, candidates["label"].to_numpy(), member,
                                               candidates["target_prediction"].to_numpy(),
                                               candidates["proxy_prediction"].to_numpy(), seed=config.run.seed,
                                               sweep=config.audit)
    frame = pd.read_csv(os.path.join(out, "audit", "results.csv"))
    np.testing.assert_array_equal(frame["guesses"], guesses)
    np.testing.assert_array_equal(frame["correct"], correct[0])
    assert audited.canaries == 600 and audited.repetitions == 1 and audited.summary.attack == "membership"
    assert audited.summary.design == "membership" and "membership canaries" in audited.console_summary()
    assert check_file(os.path.join(out, "audit", "summary.json"))["attack"] == "membership"
    assert 0.0 <= audited.headline.eps_lb <= 2.0 and audited.headline.claimed_epsilon == 2.0


@pytest.mark.slow  # 40-100 s: the end-to-end tier (README)
def test_pate_teachers_on_spark_do_not_see_the_membership_non_members(spark, parquet_path, tmp_path):
    """The Spark teachers' student labels equal the sequential reference on the membership run's training rows."""
    config = _config(parquet_path, str(tmp_path), "models.training_mechanism=pate", "models.epsilon=inf",
                     "pate.teachers=4", "pate.queries=300", "pate.student_labels=sampled", "audit.attack=membership",
                     "audit.membership_candidates=1000")
    run_stage("train", spark, config)
    m = config.models
    prepared = prepare_days(spark, config, read_day(spark, parquet_path, m.proxy_day),
                            read_day(spark, parquet_path, m.target_day), Preparation())
    key = stored_key(config)
    data, member = membership_candidates(prepared.target_data, config, key)
    reference = training.train_pate(data, epsilon=math.inf, seed=training_seed(config, key),
                                    params=boosting_params(config),
                                    settings=pate.PateSettings(teachers=4, queries=300, student_labels=pate.SAMPLED))
    students = ~np.isnan(reference.released_labels)
    released = pd.read_parquet(os.path.join(config.run.output_dir, "models", "canaries")).set_index("row_id")
    assert students.sum() == 300 and (member == 0).sum() > 400
    np.testing.assert_array_equal(released.loc[data.row_ids[students], "released_label"].to_numpy(),
                                  reference.released_labels[students])


def _utility_config(parquet_path: str, out: str, *overrides: str):
    return _config(parquet_path, out, "utility.epsilons=[1.0, inf]", "utility.bag_sizes=[8]",
                   "utility.extra_mechanisms=[rr_debiased]", *overrides)


def test_utility_grid_in_parallel_tasks_equals_the_driver_grid(spark, parquet_path, tmp_path):
    """The grid's fits as parallel Spark tasks (spark.parallel_fits) give the same table as the fits one after another
    on the driver: same seeds, and XGBoost gives the same model whatever the thread count (AUC and log-loss exact)."""
    results = {}
    for parallel in (True, False):
        config = _utility_config(parquet_path, str(tmp_path / str(parallel)), f"spark.parallel_fits={parallel}")
        results[parallel] = run_stage("utility", spark, config)
    assert results[True].fits_where == "spark tasks" and results[False].fits_where == "driver"
    tables = {parallel: pd.DataFrame(result.table).drop(columns="fit_seconds") for parallel, result in results.items()}
    assert len(tables[True]) == 6 and (tables[True]["error"] == "").all() and not results[True].failures()
    pd.testing.assert_frame_equal(tables[True], tables[False], check_exact=True)


def test_a_failing_parallel_fit_names_its_setting_and_the_others_finish(spark, parquet_path, tmp_path):
    """One job of the grid fails (an unknown training mechanism) in its Spark task: its outcome names the setting and
    the error, and every other job's outcome equals its fit on the driver."""
    from lia_spark.engine.models import parallel_fits
    from lia_spark.engine.utility import stage as utility

    config = _utility_config(parquet_path, str(tmp_path))
    data = training.ModelData(*_sample_matrix(spark, config))
    params = dataclasses.replace(boosting_params(config), n_estimators=10)
    jobs = [(f"rr@{epsilon}", utility.GridJob(TargetJob("rr", epsilon, 1, seed=3, params=params),
                                              keep_priors=epsilon == 1.0)) for epsilon in (1.0, 4.0)]
    jobs.insert(1, ("broken@2.0", utility.GridJob(TargetJob("no_such_mechanism", 2.0, 1, seed=3, params=params))))
    in_tasks = parallel_fits.run_fits(spark, data, jobs, utility.fit_grid_job, purpose="test")
    on_driver = parallel_fits.run_fits(spark, data, jobs, utility.fit_grid_job, purpose="test", in_tasks=False)
    assert [outcome.name for outcome in in_tasks] == ["rr@1.0", "broken@2.0", "rr@4.0"]
    broken = in_tasks[1]
    assert broken.failed and broken.value is None and broken.where == "spark tasks"
    assert (broken.error.startswith("ValueError: models.training_mechanism must be one of")
            and "no_such_mechanism" in broken.error)
    for task, driver in zip(in_tasks[::2], on_driver[::2]):
        assert not task.failed and task.where == "spark tasks" and driver.where == "driver"
        assert task.value["scores"] == driver.value["scores"]
    np.testing.assert_array_equal(in_tasks[0].value["priors"], on_driver[0].value["priors"])
    assert in_tasks[2].value["priors"] is None


def _sample_matrix(spark, config):
    """Features, labels, row ids and splits of the target day as the utility stage collects them (hash encoding)."""
    from lia_spark.engine.models.preparation import collect_model_data, feature_spec, in_memory_rows, model_features

    rows = in_memory_rows(spark, config, config.models.target_day)
    spec = feature_spec(rows, config)
    data = collect_model_data(model_features(rows, spec, config), spec, config.models.model_library)
    return data.features, data.labels, data.row_ids, data.split


def test_targets_and_shadows_fitted_in_parallel_tasks_equal_the_fits_on_the_driver(spark, parquet_path, tmp_path,
                                                                                    caplog):
    """``lia-spark audit-table`` fits its cells' targets, their shadow models and extra runs ahead as parallel Spark
    tasks (execution.fit_ahead); each cell's train stage takes its own and writes the same canary table, shadow
    baseline and extra runs included, as a train stage that fits everything on the driver (spark.parallel_fits=false)
    and as one that fits them in parallel tasks itself. Two settings with two shadows and one extra run (audit.runs =
    2) each, so eight tasks; the bag
    mechanism's table (released proportions, noise, proportion matching) is compared; the utility grid's test
    covers per-row label mechanisms in parallel tasks."""
    import logging

    from lia_spark.engine.models.execution import fit_ahead

    settings = [("llp_laplace", 1.0, 8), ("rr", 2.0, 1)]
    ahead = Preparation()
    with caplog.at_level(logging.INFO, logger="lia_spark.engine.models.parallel_fits"):
        first = _config(parquet_path, str(tmp_path / "first"), *RUNS)
        fit_ahead(spark, [(first.with_target(*setting), stored_key(first)) for setting in settings], ahead)
    assert "audit-table: 8 fits in parallel tasks" in caplog.text
    assert set(ahead.fits) == set(ahead.shadow_fits) == set(ahead.run_fits) == set(settings)
    tables = []
    for name, preparation, (mechanism, epsilon, bag_size), where in (
            ("ahead", ahead, settings[0], "true"), ("driver", Preparation(), settings[0], "false"),
            ("tasks", Preparation(), settings[0], "true"), ("ahead", ahead, settings[1], "true")):
        out = str(tmp_path / f"{name}-{mechanism}")
        config = _config(parquet_path, out, *RUNS, f"spark.parallel_fits={where}").with_target(
            mechanism, epsilon, bag_size)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="lia_spark.engine.models.parallel_fits"):
            run_stage("train", spark, config, preparation=preparation)
        fits_logged = [record.getMessage() for record in caplog.records if record.name.endswith("parallel_fits")]
        expected = {"driver": "train: fit 4/4 run 1 done", "tasks": "train: 4 fits in parallel tasks"}
        assert (fits_logged == [] if name == "ahead" else any(expected[name] in line for line in fits_logged)), (
            name, fits_logged)
        tables.append(spark.read.parquet(f"{out}/models/canaries").toPandas().sort_values("row_id")
                      .reset_index(drop=True))
    assert tables[0]["shadow_prediction"].between(0, 1).all()
    assert tables[0]["run_target_predictions"].map(len).eq(1).all()
    for table in tables:  # the runs' lists compared as columns
        for column in RUN_COLUMNS:
            table[column] = table.pop(column).map(lambda values: values[0])
    pd.testing.assert_frame_equal(tables[0], tables[1], check_exact=True)
    pd.testing.assert_frame_equal(tables[0], tables[2], check_exact=True)
    assert ahead.fits == ahead.shadow_fits == ahead.run_fits == {}  # each cell took its own


def test_an_output_that_records_failed_fits_is_recomputed_not_reused(spark, parquet_path, tmp_path, caplog):
    """A utility output committed with a failed fit (UtilityResult.failed) is recomputed by the next run, naming the
    failed setting, while a complete one is reused."""
    import dataclasses as dc
    import logging

    from lia_spark.engine.orchestration.registry import STAGES
    from lia_spark.engine.runtime.outputs import committed_output

    config = _config(parquet_path, str(tmp_path), "utility.epsilons=[inf]", "utility.bag_sizes=[]",
                     "utility.extra_mechanisms=[]")
    first = run_stage("utility", spark, config)
    assert not first.skipped and run_stage("utility", spark, config).skipped
    assert check_result(first, "utility")["table"][0]["epsilon"] == "inf"
    stage = STAGES["utility"]
    failed = dc.replace(first, failed={"rr.epsinf.k1": "ValueError: a fit that failed"})
    with committed_output(spark, stage.outputs(config)[0], failed.marker(),
                          fingerprint=stage.fingerprint(spark, config)):
        pass
    with caplog.at_level(logging.WARNING, logger="lia_spark.engine.orchestration.registry"):
        again = run_stage("utility", spark, config)
    assert not again.skipped and not again.failures()
    assert "recomputing: the committed output records failed parts: rr.epsinf.k1: ValueError" in caplog.text


def test_split_and_sample_filters_keep_every_int64_value_exact(spark):
    """The row filters of the train stage read only row_id: a nullable I column holding 2^63 - 1 or 2^53 + 1 passes
    through exactly (a pandas round trip of every column turned them into float64: refused or rounded)."""
    from lia_spark.engine.models.feature_frames import sample_rows, split_rows

    values = [2**63 - 1, None, 2**53 + 1, -2**63, 7] * 40
    frame = spark.createDataFrame(pd.DataFrame({"row_id": np.arange(len(values), dtype=np.int64),
                                                "I1": pd.array(values, dtype="Int64")}), "row_id long, I1 long")
    parts = [split_rows(frame, seed=3, shares=(0.8, 0.04, 0.16), code=code) for code in (0, 1, 2)]
    kept = {row["row_id"]: row["I1"] for part in parts for row in part.collect()}
    assert kept == dict(enumerate(values))  # every row in exactly one split, values exact
    sampled = sample_rows(frame, seed=3, share=0.5).collect()
    assert 0 < len(sampled) < len(values) and all(row["I1"] == values[row["row_id"]] for row in sampled)
