"""In-memory training: proportion-matching derivatives, utility ordering of the training mechanisms, CatBoost."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from lia_spark.kernels import features
from lia_spark.kernels import label_mechanisms as lm
from lia_spark.kernels import mechanism_registry, model_libraries, proportion_matching, training

PARAMS = model_libraries.BoostingParams(n_estimators=40, max_depth=3, learning_rate=0.3, early_stopping_rounds=10,
                                 threads=1, seed=1)


def _data(n: int, *, intercept: float, seed: int) -> training.ModelData:
    """Gaussian features, logit = intercept + 2 x0 + x1 - x2 + x3 x4 (a learnable signal)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 6)).astype(np.float32)
    logit = intercept + 2 * x[:, 0] + x[:, 1] - x[:, 2] + x[:, 3] * x[:, 4]
    labels = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.int8)
    ids = np.arange(n, dtype=np.int64) + (1 << 40)
    return training.ModelData(x, labels, ids, features.split_codes(ids, seed=seed, shares=(0.8, 0.04, 0.16)))


@pytest.fixture(scope="module")
def balanced():
    return _data(30_000, intercept=0.0, seed=2)


def _test_auc(data: training.ModelData, **kwargs) -> float:
    fit = mechanism_registry.train_target(data, seed=5, params=PARAMS, **kwargs)
    test = data.split == training.SPLIT_TEST
    return training.binary_metrics(data.labels[test], fit.model.predict(data.rows(test)))["auc"]


def test_proportion_matching_derivatives_equal_finite_differences():
    rng = np.random.default_rng(0)
    bag_index = np.repeat(np.arange(5), [1, 3, 4, 7, 2])
    margins = rng.normal(0, 1.5, bag_index.size)
    alpha = np.array([1.0, 0.3, 0.25, 0.6, -0.2])  # includes a noisy proportion outside [0, 1] (clipped)
    gradient, exact, gauss_newton = proportion_matching.proportion_matching_grad_hess(margins, bag_index, alpha)
    step = 1e-5
    for j in range(margins.size):
        up, down = margins.copy(), margins.copy()
        up[j] += step
        down[j] -= step
        fd_gradient = (proportion_matching.proportion_matching_loss(up, bag_index, alpha)
                       - proportion_matching.proportion_matching_loss(down, bag_index, alpha)) / (2 * step)
        fd_hessian = (proportion_matching.proportion_matching_grad_hess(up, bag_index, alpha)[0][j]
                      - proportion_matching.proportion_matching_grad_hess(down, bag_index, alpha)[0][j]) / (2 * step)
        assert gradient[j] == pytest.approx(fd_gradient, rel=1e-6, abs=1e-9)
        assert exact[j] == pytest.approx(fd_hessian, rel=1e-5, abs=1e-8)
    assert np.all(gauss_newton > 0)


def test_proportion_matching_with_singleton_bags_is_logistic_loss():
    margins = np.array([-2.0, 0.5, 3.0])
    labels = np.array([0.0, 1.0, 0.0])
    gradient, exact, _ = proportion_matching.proportion_matching_grad_hess(margins, np.arange(3), labels)
    p = 1 / (1 + np.exp(-margins))
    np.testing.assert_allclose(gradient, p - labels, rtol=1e-12)
    np.testing.assert_allclose(exact, p * (1 - p), rtol=1e-9)


def test_rr_auc_decreases_as_epsilon_decreases(balanced):
    aucs = [_test_auc(balanced, mechanism="rr", epsilon=eps) for eps in (math.inf, 0.5, 0.3, 0.1)]
    # Measured (seeds fixed): 0.880, 0.843, 0.769, 0.629; margins leave room for library changes.
    assert aucs[0] > aucs[1] + 0.01 and aucs[1] > aucs[2] + 0.01 and aucs[2] > aucs[3] + 0.01, aucs
    assert aucs[0] > 0.85


def test_lp2st_beats_lp1st_at_small_epsilon(balanced):
    # Balanced classes, strong signal: the stage-1 prior lets RRWithPrior keep most labels at eps = 0.5.
    lp1 = _test_auc(balanced, mechanism="rr", epsilon=0.5)
    lp2 = _test_auc(balanced, mechanism="lp_2st", epsilon=0.5)
    assert lp2 >= lp1, (lp1, lp2)


def test_rr_debiased_keeps_ranking_and_calibrates(balanced):
    test = balanced.split == training.SPLIT_TEST
    plain = mechanism_registry.train_target(balanced, mechanism="rr", epsilon=1.0, seed=5, params=PARAMS)
    debiased = mechanism_registry.train_target(balanced, mechanism="rr_debiased", epsilon=1.0, seed=5, params=PARAMS)
    raw, corrected = plain.model.predict(balanced.rows(test)), debiased.model.predict(balanced.rows(test))
    # Same booster (same released labels), predictions mapped by (q - pi)/(1 - 2 pi), clipped.
    np.testing.assert_allclose(corrected, lm.debias_rr_predictions(raw, epsilon=1.0), rtol=1e-12)
    labels = balanced.labels[test]
    assert training.binary_metrics(labels, corrected)["log_loss"] < training.binary_metrics(labels, raw)["log_loss"]


def test_proportion_matching_learns_and_degrades_with_bag_size(balanced):
    auc_8 = _test_auc(balanced, mechanism="llp", epsilon=math.inf, bag_size=8)
    auc_256 = _test_auc(balanced, mechanism="llp", epsilon=math.inf, bag_size=256)
    assert auc_8 > 0.8, auc_8
    assert auc_8 > auc_256 + 0.02, (auc_8, auc_256)


def test_catboost_native_categoricals_learn():
    rng = np.random.default_rng(4)
    n = 6000
    category = rng.integers(0, 20, n)
    effect = np.linspace(-2, 2, 20)[rng.permutation(20)]
    numeric = rng.standard_normal(n)
    labels = (rng.random(n) < 1 / (1 + np.exp(-(effect[category] + numeric)))).astype(np.int8)
    frame = pd.DataFrame({"x": numeric, "c": category.astype(np.int64) * 7919})
    ids = np.arange(n, dtype=np.int64)
    data = training.ModelData(frame, labels, ids, features.split_codes(ids, seed=3, shares=(0.8, 0.04, 0.16)),
                              library=model_libraries.CATBOOST_LIBRARY, cat_features=["c"])
    auc = _test_auc(data, mechanism="none", epsilon=math.inf)
    assert auc > 0.75, auc
    with pytest.raises(ValueError, match="catboost"):
        mechanism_registry.train_target(data, mechanism="llp", epsilon=math.inf, seed=1, params=PARAMS, bag_size=4)


@pytest.mark.parametrize("overrides, rows, trained, left_out", [
    ([], 20_000, ["rr_debiased", "lp_2st", "pate"], []),
    (["models.library=catboost", "utility.bag_sizes=[]"], 20_000, ["rr_debiased", "lp_2st", "pate"], []),
    (["models.execution=distributed"], 20_000, ["rr_debiased", "lp_2st", "pate"], []),  # utility trains in memory
    (["pate.queries=500", "utility.extra_mechanisms=[pate]"], 500, ["pate"], []),  # queries are training rows
    (["pate.queries=500", "utility.extra_mechanisms=[pate]"], 499, [], ["pate"]),
    (["pate.queries=50", "pate.teachers=600", "utility.extra_mechanisms=[pate]"], 599, [], ["pate"]),
    (["pate.protocol=published", "pate.teachers=10", "utility.extra_mechanisms=[pate]"], 200, ["pate"], []),
    (["pate.protocol=published", "pate.teachers=10", "utility.extra_mechanisms=[pate]"], 199, [], ["pate"]),
    (["utility.extra_mechanisms=[]"], 20_000, [], []),
])
def test_utility_extra_mechanisms_follow_the_table_rule_and_need_as_many_rows_as_pate_queries_and_teachers(
        overrides, rows, trained, left_out):
    from lia_spark.engine.utility.stage import extra_mechanisms
    from lia_spark.run.config import load_config

    found, reasons = extra_mechanisms(load_config(None, overrides), training_rows=rows)
    assert found == trained and list(reasons) == left_out
    if left_out == ["pate"] and rows < 20_000:
        assert "pate.queries=" in reasons["pate"] and "pate.teachers=" in reasons["pate"]


def test_binary_metrics_against_brute_force():
    labels = np.array([0, 1, 0, 1, 1, 0])
    scores = np.array([0.1, 0.8, 0.4, 0.35, 0.9, 0.2])
    pairs = [(p, q) for p in scores[labels == 1] for q in scores[labels == 0]]
    auc = np.mean([1.0 if p > q else 0.5 if p == q else 0.0 for p, q in pairs])
    logloss = -np.mean(labels * np.log(scores) + (1 - labels) * np.log(1 - scores))
    result = training.binary_metrics(labels, scores)
    assert result["auc"] == pytest.approx(auc, abs=1e-12)
    assert result["log_loss"] == pytest.approx(logloss, rel=1e-12)


def test_tradeoff_table_joins_summaries_and_uses_rr_closed_form(tmp_path):
    from lia_spark.kernels import utility
    from lia_spark.present import charts

    grid = utility.utility_grid(epsilons=[1.0, math.inf], bag_sizes=[4], extra_mechanisms=["lp_2st", "pate"])
    assert grid == [("rr", 1.0, 1), ("rr", math.inf, 1), ("llp", grid[2][1], 4), ("llp_laplace", 1.0, 4),
                    ("llp_geometric", 1.0, 4), ("lp_2st", 1.0, 1), ("pate", 1.0, 1), ("pate", math.inf, 1)]
    assert math.isnan(grid[2][1])
    results = pd.DataFrame([{"mechanism": m, "epsilon": e, "bag_size": k, "auc": 0.7 - 0.01 * i, "log_loss": 0.4}
                            for i, (m, e, k) in enumerate(grid)])
    summary = pd.DataFrame({"mechanism": ["rr", "llp", "llp_laplace"], "epsilon": [1.0, math.nan, 1.0],
                            "bag_size": [1, 4, 4], "mean_additive_advantage": [0.1, 0.2, 0.05],
                            "abs_I_p98": [1.0, math.inf, 0.8]})
    priors = np.array([0.1, 0.3, 0.5, 0.9])
    table = utility.tradeoff_table(results, summary, priors=priors)

    def row(mechanism, epsilon):
        match = table[(table["mechanism"] == mechanism)
                      & ((table["epsilon"] == epsilon) | (table["epsilon"].isna() & math.isnan(epsilon)))]
        assert len(match) == 1
        return match.iloc[0]

    assert row("rr", 1.0)["mean_additive_advantage"] == 0.1  # from the summary
    assert row("llp", math.nan)["abs_I_p98"] == math.inf
    assert math.isnan(row("llp_geometric", 1.0)["mean_additive_advantage"])
    # lp_2st trains on RR(eps) labels: RR's summary at the same eps, the same release and prior as the rr row
    assert row("lp_2st", 1.0)["mean_additive_advantage"] == 0.1 and row("lp_2st", 1.0)["abs_I_p98"] == 1.0
    assert row("lp_2st", 1.0)["advantage_source"] == "posteriors_rr"
    # without RR's summary at that eps, RR's closed form by hand: pi = 1/(1+e) = 0.2689; gains min(eta,1-eta) - pi
    # where pi <= eta <= 1-pi: eta 0.3 -> 0.0311, 0.5 -> 0.2311, 0.1 and 0.9 outside -> 0.
    pi = 1 / (1 + math.e)
    closed = utility.tradeoff_table(results, summary[summary["mechanism"] != "rr"], priors=priors)
    lp_2st = closed[(closed["mechanism"] == "lp_2st") & (closed["epsilon"] == 1.0)].iloc[0]
    assert lp_2st["mean_additive_advantage"] == pytest.approx((0.3 - pi + 0.5 - pi) / 4, rel=1e-12)
    assert lp_2st["advantage_source"] == "rr_closed_form" and lp_2st["abs_I_p98"] == 1.0
    assert row("rr", math.inf)["mean_additive_advantage"] == pytest.approx(np.mean([0.1, 0.3, 0.5, 0.1]))
    for epsilon in (1.0, math.inf):  # PATE: no posterior summary and no closed form
        assert row("pate", epsilon)["advantage_source"] == "none"
        assert (math.isnan(row("pate", epsilon)["mean_additive_advantage"])
                and math.isnan(row("pate", epsilon)["abs_I_p98"]))
    # not plotted: llp_geometric and both pate rows have no advantage; |I| p98 is unbounded for llp and rr at inf
    assert utility.hidden_settings_text(table["mean_additive_advantage"]) == (
        " (3 settings without an advantage not shown)")
    assert utility.hidden_settings_text(table["abs_I_p98"]) == (
        " (2 settings with unbounded value, 3 settings without an advantage not shown)")
    assert utility.hidden_settings_text(table["auc"]) == ""
    for advantage in utility.ADVANTAGES:
        path = tmp_path / f"{advantage}.png"
        charts.plot_tradeoff(table, advantage=advantage, path=str(path))
        assert path.stat().st_size > 10_000


@pytest.mark.parametrize("mechanism, epsilon, bag_size", [("llp", math.inf, 8), ("rr_debiased", 1.0, 1)])
def test_saved_model_and_output_transform_predict_what_the_fit_predicts(balanced, tmp_path, mechanism, epsilon,
                                                                       bag_size):
    """Booster file + output transform file, loaded afresh, give FittedModel.predict (proportion matching's margin
    offset and early stopping; RR's noise correction)."""
    import xgboost as xgb

    from lia_spark.kernels import model_output

    fit = mechanism_registry.train_target(balanced, mechanism=mechanism, epsilon=epsilon, seed=5, params=PARAMS,
                                          bag_size=bag_size)
    path = fit.model.save(str(tmp_path / "target"))
    saved = model_output.save_output_transform(fit.model.output_transform(), model_output.output_transform_file(path))
    booster, transform = xgb.Booster(), model_output.load_output_transform(saved)
    booster.load_model(path)
    test = balanced.rows(balanced.split == training.SPLIT_TEST)
    np.testing.assert_allclose(transform.probabilities(transform.raw_output(booster, test)),
                               fit.model.predict(test), rtol=1e-12)
    assert (mechanism == "llp") == (transform.margin_offset != 0.0)
    if mechanism != "llp":
        return
    # Proportion matching was fitted on margins base_margin = offset + trees: raw output + offset, no base score.
    fitted = booster.predict(xgb.DMatrix(test, base_margin=np.full(len(test), transform.margin_offset)),
                             output_margin=True, iteration_range=(0, transform.best_iteration + 1))
    np.testing.assert_allclose(transform.raw_output(booster, test) + transform.margin_offset, fitted, atol=1e-5)


def test_bag_prediction_debiasing_inverts_the_expected_proportion():
    """E[alpha | x] = (eta + (k - 1) mu) / k is mapped back to eta; values outside [0, 1] are clipped."""
    eta, mu, k = np.array([0.0, 0.1, 0.5, 0.9]), 0.2, 8
    np.testing.assert_allclose(lm.debias_bag_predictions((eta + (k - 1) * mu) / k, bag_size=k, mean_proportion=mu),
                               np.clip(eta, lm.DEBIAS_CLIP, 1 - lm.DEBIAS_CLIP), rtol=1e-12, atol=1e-15)
    with pytest.raises(ValueError, match="bag_size"):
        lm.debias_bag_predictions(eta, bag_size=0, mean_proportion=mu)


@pytest.mark.parametrize("mechanism", ["none", "rr"])
def test_the_shadow_baseline_reads_no_coin_of_the_target(mechanism):
    """docs/math.md §5.13: the shadow fits take the canaries' y0 and y1 but neither the target's coins nor its
    mechanism's draws, so permuting the coins (and the labels the target trained on) leaves them bit-identical."""
    import dataclasses

    from lia_spark.engine.models.execution import shadow_baseline, shadow_jobs
    from lia_spark.engine.models.preparation import TargetRows, fit_shadow_job, target_job
    from lia_spark.kernels import hashing, injected
    from lia_spark.run.config import load_config

    data = _data(6_000, intercept=-1.5, seed=8)
    config = load_config(None, ["models.n_estimators=20", "models.max_depth=3",
                                f"models.training_mechanism={mechanism}",
                                "models.epsilon=2.0", "audit.shadows=2"])
    canary = data.split == training.SPLIT_TRAIN
    key = hashing.AuditKey(bytes(range(32)))
    labels = injected.inject(data.row_ids, data.labels, np.full(data.labels.size, 0.3), canary, key=key)
    coins = np.where(canary, np.random.default_rng(1).permutation(labels.hidden_bit), -1).astype(np.int8)
    other = injected.InjectedLabels(
        training=np.where(canary, injected.training_labels(data.labels, labels.counterfactual_label, coins),
                          data.labels).astype(np.int8), counterfactual_label=labels.counterfactual_label,
        hidden_bit=coins)
    jobs = shadow_jobs(config, target_job(config, key=key), key)
    assert [job.shadow for job in jobs] == [0, 1]
    found = []
    for injection in (labels, other):
        rows = TargetRows(dataclasses.replace(data, labels=injection.training), None, true_labels=data.labels,
                          counterfactual_label=injection.counterfactual_label)
        found.append(shadow_baseline(data, [fit_shadow_job(rows, job, 0) for job in jobs]))
    assert not np.array_equal(labels.hidden_bit, other.hidden_bit)
    np.testing.assert_array_equal(found[0], found[1])
    assert np.all((found[0] > 0) & (found[0] < 1))
    no_shadows = dataclasses.replace(config, audit=dataclasses.replace(config.audit, shadows=0))
    assert shadow_jobs(no_shadows, target_job(no_shadows, key=key), key) == []
    assert np.isnan(shadow_baseline(data, [])).all()
    with pytest.raises(ValueError, match="counterfactual"):
        fit_shadow_job(TargetRows(data), jobs[0], 0)


@pytest.mark.parametrize("mechanism", ["none", "rr"])
def test_an_extra_run_trains_on_its_own_coins_and_reads_none_of_the_target(mechanism):
    """docs/math.md §5.14: extra run r (audit.runs) is the target's fit on y^{b_r} with the run's own coins and
    mechanism seed (bit-identical to fitting those labels directly), and reads no coin of the target's."""
    import dataclasses

    from lia_spark.engine.models.execution import run_jobs
    from lia_spark.engine.models.preparation import TargetRows, fit_run_job, fit_target_job, target_job
    from lia_spark.kernels import hashing, injected
    from lia_spark.run.config import load_config

    data = _data(6_000, intercept=-1.5, seed=8)
    config = load_config(None, ["models.n_estimators=20", "models.max_depth=3", "models.epsilon=2.0",
                                f"models.training_mechanism={mechanism}", "audit.runs=3"])
    canary = data.split == training.SPLIT_TRAIN
    key = hashing.AuditKey(bytes(range(32)))
    labels = injected.inject(data.row_ids, data.labels, np.full(data.labels.size, 0.3), canary, key=key)
    jobs = run_jobs(config, target_job(config, key=key), key)
    assert [job.run for job in jobs] == [1, 2]
    found = []
    for training_labels in (labels.training, data.labels):  # the target's y^b, or any other labels: not read
        rows = TargetRows(dataclasses.replace(data, labels=training_labels), None, true_labels=data.labels,
                          counterfactual_label=labels.counterfactual_label)
        found.append([fit_run_job(rows, job, 0).predict(data.features) for job in jobs])
    np.testing.assert_array_equal(found[0], found[1])
    coin = injected.run_coins(data.row_ids, key=key, run=1)
    own = injected.canary_training_labels(data.labels, labels.counterfactual_label, coin)
    direct = fit_target_job(TargetRows(dataclasses.replace(data, labels=own)), dataclasses.replace(
        jobs[0].target, seed=injected.run_seed(key, 1)), 0).model.predict(data.features)
    np.testing.assert_array_equal(found[0][0], direct)
    assert not np.array_equal(found[0][0], found[0][1])
    no_runs = dataclasses.replace(config, audit=dataclasses.replace(config.audit, runs=1))
    assert run_jobs(no_runs, target_job(no_runs, key=key), key) == []
