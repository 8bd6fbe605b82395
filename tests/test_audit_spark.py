"""The Spark audit stage: exact distributed counts equal the in-process kernel, whatever the partitioning."""
from __future__ import annotations

import math
import os

import numpy as np
import pandas as pd
import pytest
from json_support import check_file, check_result

from lia_spark.engine.audit.counts import distributed_counts
from lia_spark.engine.orchestration.registry import run_stage
from lia_spark.engine.runtime.outputs import is_complete
from lia_spark.kernels import audit, audit_sweep, hashing
from lia_spark.kernels.audit_designs import INJECTED_DESIGN, OBSERVATIONAL_DESIGN
from lia_spark.run.config import config_from_dict
from lia_spark.run.model_sections import AuditConfig
from lia_spark.studies import power


def _table(m: int, seed: int) -> pd.DataFrame:
    """Canary columns with label-dependent targets, exact score ties (M = M') and repeated values."""
    rng = np.random.default_rng(seed)
    proxy = rng.uniform(0.02, 0.98, m)
    label = (rng.random(m) < proxy).astype(np.int32)
    target = np.clip(proxy + 0.3 * (2 * label - 1) * rng.random(m), 0.001, 0.999)
    target[: m // 5] = proxy[: m // 5]
    target[m // 5: m // 4] = 0.5
    return pd.DataFrame({"row_id": rng.choice(1 << 50, m, replace=False).astype(np.int64), "label": label,
                         "released_label": label, "target_prediction": target, "proxy_prediction": proxy})


def _kernel_counts(table: pd.DataFrame, *, seed: int, repetitions: int, guesses: np.ndarray, **kwargs) -> np.ndarray:
    return audit.count_correct(table["row_id"].to_numpy(), table["label"].to_numpy(),
                               table["target_prediction"].to_numpy(), table["proxy_prediction"].to_numpy(),
                               seed=seed, repetitions=repetitions, guesses=guesses, **kwargs)


def test_distributed_counts_equal_kernel_for_any_partitioning(spark):
    table = _table(6000, seed=1)
    scores = ("log_ratio", "difference_t0", "difference_t2.5")
    settings = AuditConfig(repetitions=70, scores=scores)
    df = spark.createDataFrame(table)
    kernel = None
    for partitions in (1, 5):
        m, guesses, correct = distributed_counts(df.repartition(partitions), section=settings, seed=42)
        assert m == len(table) and tuple(correct) == scores
        np.testing.assert_array_equal(guesses, audit.geometric_grid(len(table)))  # the default sweep
        if kernel is None:
            kernel = audit.count_correct_scores(
                table["row_id"].to_numpy(), table["label"].to_numpy(), table["target_prediction"].to_numpy(),
                table["proxy_prediction"].to_numpy(), seed=42, repetitions=70, guesses=guesses, scores=scores)
        for attack in scores:
            np.testing.assert_array_equal(correct[attack], kernel[attack], err_msg=attack)
    assert not np.array_equal(kernel["log_ratio"], kernel["difference_t0"])  # the scores rank differently


def test_several_attacks_split_the_confidence_over_attacks_and_sweep_points(spark, tmp_path):
    table = _table(3000, seed=4)
    path = str(tmp_path / "canaries")
    spark.createDataFrame(table).write.parquet(path)
    scores = ["difference_t2", "log_ratio"]
    config = config_from_dict({"run": {"output_dir": str(tmp_path / "out"), "seed": 9},
                               "audit": {"repetitions": 6, "canary_path": path, "scores": scores,
                                         "design": "observational", "sweep": "linear", "recalibrate": "none"}})
    result = run_stage("audit", spark, config)
    guesses = audit.guess_grid(3000)
    counts = audit.count_correct_scores(
        table["row_id"].to_numpy(), table["label"].to_numpy(), table["target_prediction"].to_numpy(),
        table["proxy_prediction"].to_numpy(), seed=9, repetitions=6, guesses=guesses, scores=scores)
    expected = audit_sweep.evaluate_scores(counts, guesses, canaries=3000)
    key = "eps_binomial_bonferroni"
    assert result.summary.scores == tuple(scores) and result.summary.tests == 2 * 101
    assert result.summary.best[key].mean == pytest.approx(expected.best[key].mean(), abs=1e-12)
    alone = audit_sweep.evaluate_sweep(counts["log_ratio"], guesses, canaries=3000).best[key]
    assert (expected.best[key] <= alone + 1e-12).any()  # splitting the confidence costs something somewhere
    assert result.headline.tests == 202 and result.headline.eps_lb == expected.best[key][0]
    shares = result.summary.best_score_share[key]
    assert set(shares) == set(scores) and sum(shares.values()) <= 1.0 + 1e-12
    results = pd.read_csv(f"{tmp_path}/out/audit/results.csv")
    assert sorted(results["score"].unique()) == sorted(scores) and len(results) == 2 * 6 * 101


def test_run_audit_writes_results_and_resumes(spark, tmp_path):
    table = _table(3000, seed=3)
    path = str(tmp_path / "canaries")
    spark.createDataFrame(table).repartition(3).write.parquet(path)
    config = config_from_dict({"run": {"output_dir": str(tmp_path / "out"), "seed": 5},
                               "audit": {"repetitions": 12, "canaries": 2000, "canary_path": path,
                                         "table_bounds": ["binomial", "gdp"], "design": "observational",
                                         "sweep": "linear", "recalibrate": "none", "scores": ["log_ratio"]}})
    result = run_stage("audit", spark, config)
    output = str(tmp_path / "out" / "audit")
    assert is_complete(spark, output) and not result.skipped
    assert result.canaries == 2000 and result.guess_counts == 101
    # the configured sample: the 2000 rows with the smallest hash of (seed, row_id), audited exactly
    keys = hashing.hash_bits(5, audit.CANARY_PURPOSE, table["row_id"].to_numpy())
    sample = table.iloc[np.argsort(keys)[:2000]]
    guesses = audit.guess_grid(2000)
    expected = _kernel_counts(sample, seed=5, repetitions=12, guesses=guesses, kind="log_ratio")
    assert AuditConfig().scores == ("log_ratio", "difference_t2")  # the default pair (here log_ratio alone)
    results = spark.read.parquet(f"{output}/results").toPandas().sort_values(["repetition", "guesses"])
    np.testing.assert_array_equal(results["correct"].to_numpy().reshape(12, -1), expected)
    csv = pd.read_csv(f"{output}/results.csv")
    assert len(csv) == 12 * 101 and {"eps_binomial_paper", "eps_gdp_bonferroni"} <= set(csv.columns)
    summary = check_file(f"{output}/summary.json")  # standard JSON matching its schema, as results/audit.json
    assert check_result(result, "audit")["summary"] == summary
    best = audit_sweep.evaluate_sweep(expected, guesses, canaries=2000).best["eps_binomial_bonferroni"]
    assert summary["best"]["eps_binomial_bonferroni"]["mean"] == pytest.approx(best.mean(), abs=1e-12)
    assert all(os.path.getsize(f) > 0 for f in result.artifacts())
    assert result.metrics()["eps_binomial"] == pytest.approx(best.mean(), abs=1e-12)
    headline = result.headline  # first repetition's valid bound; no train-stage marker: the claim is not stated
    assert headline.eps_lb == best[0] and headline.tests == 101 and headline.repetitions == 12
    assert (f"for a target trained with an unknown mechanism at claimed eps = not stated: eps >= {best[0]:.3f} at "
            f"95% if the proxy is within TV tau = 0 of the truth; the 12 repetitions' bounds (a spread of bounds, not "
            f"a bound): mean {best.mean():.3f}, std {best.std(ddof=1):.3f}; the bound is 0 for any tau above tau* = "
            ) in result.console_summary()
    assert result.console_summary().endswith("; no label-blind reference audited")
    assert summary["design"] == "observational" and summary["reference"] is None
    assert summary["tau_break_even"]["first"] == pytest.approx(np.tanh(best[0] / 2), rel=1e-9)  # binomial, delta 0
    again = run_stage("audit", spark, config)
    assert again.skipped and again.summary == result.summary  # the marker reads back into the same record


def test_boundary_sample_stops_growing_with_the_canaries():
    """Sampled canaries per range: 1000 while that keeps the sample <= 256k rows per score, then fewer (>= 64)."""
    from lia_spark.engine.audit.counts import sample_rows_per_range

    assert [sample_rows_per_range(parts) for parts in (8, 256, 1000, 4000, 100_000)] == [1000, 1000, 256, 64, 64]
    assert max(sample_rows_per_range(parts) * parts for parts in range(1, 4001)) == 256_000


def _injected_table(m: int, seed: int) -> pd.DataFrame:
    """A canary table of the injected design: y1 from the proxy, fair coins, a target that leans toward the label it
    trained on (y^b), exact score ties."""
    from lia_spark.kernels import injected

    table = _table(m, seed)
    y1, coin = injected.injected_draws(table["row_id"].to_numpy(), table["label"].to_numpy(),
                                       table["proxy_prediction"].to_numpy(), key=seed)
    trained = injected.training_labels(table["label"].to_numpy(), y1, coin)
    rng = np.random.default_rng(seed)
    target = np.clip(table["proxy_prediction"] + 0.3 * (2 * trained - 1) * rng.random(m), 0.001, 0.999)
    target[: m // 5] = table["proxy_prediction"][: m // 5]
    return table.assign(target_prediction=target, counterfactual_label=y1.astype(np.int32),
                        hidden_bit=coin.astype(np.int32))


def test_injected_counts_equal_the_kernel_for_any_partitioning(spark, tmp_path):
    from lia_spark.kernels import injected

    table = _injected_table(6000, seed=2)
    scores = ("log_ratio", "difference_t2")
    informative = table[table["label"] != table["counterfactual_label"]]
    guesses = audit.geometric_grid(len(informative))
    kernel = injected.count_correct(*(table[c].to_numpy() for c in ("row_id", "label", "counterfactual_label",
                                                                      "hidden_bit", "target_prediction",
                                                                      "proxy_prediction")),
                                    seed=42, guesses=guesses, scores=scores)
    from lia_spark.engine.audit.counts import select_canaries

    for partitions in (1, 4):
        df, _ = select_canaries(spark.createDataFrame(table).repartition(partitions), seed=42, canaries=0,
                             design=INJECTED_DESIGN)
        m, found_guesses, correct = distributed_counts(df, section=AuditConfig(repetitions=50, scores=scores),
                                                       seed=42, design=INJECTED_DESIGN)
        assert m == len(informative) and tuple(correct) == scores
        np.testing.assert_array_equal(found_guesses, guesses)
        for attack in scores:
            assert correct[attack].shape == (1, len(guesses))  # one game: the one drawn before training
            np.testing.assert_array_equal(correct[attack], kernel[attack], err_msg=attack)
    path = str(tmp_path / "canaries")
    spark.createDataFrame(table).write.parquet(path)
    config = config_from_dict({"run": {"output_dir": str(tmp_path / "out"), "seed": 42},
                               "audit": {"canary_path": path, "scores": list(scores), "recalibrate": "none"}})
    result = run_stage("audit", spark, config)
    best = audit_sweep.evaluate_scores(kernel, guesses, canaries=len(informative)).best["eps_binomial_bonferroni"]
    assert result.summary.design == "injected" and result.repetitions == 1 and result.canaries == len(informative)
    # the default audit (recalibrated proxy, geometric sweep) is what the power study computes in process
    default = run_stage("audit", spark, config_from_dict({"run": {"output_dir": str(tmp_path / "default"),
                                                                   "seed": 42}, "audit": {"canary_path": path}}))
    studied = power.audit_choice(table, AuditConfig(), seed=42, claimed_epsilon=float("nan"))
    assert default.headline.eps_lb == studied.eps_lb and default.summary.ceiling.eps_lb == studied.ceiling
    assert default.summary.ceiling.eps_lb_95 == studied.ceiling_95 == default.headline.ceiling_95
    assert default.summary.recalibration["proxy_prediction"].mapped == "proxy"
    assert default.summary.baselines == ("proxy_prediction",)  # the table has no shadows
    assert check_file(tmp_path / "out" / "audit" / "summary.json")["design"] == "injected"
    assert result.headline.eps_lb == best[0] > 0 and "injected canaries, no assumption on the proxy" in \
        result.console_summary()


def test_the_python_api_gives_the_audit_stages_bound_from_pandas_and_from_spark(spark, tmp_path):
    """lia_spark.audit_predictions on a canary table with proxy and shadow baselines: in process (pandas) and on the
    executors (Spark, any partitioning) it gives the audit stage's headline, ceiling and tests exactly."""
    import lia_spark
    from lia_spark.run.checks import ConfigError

    table = _injected_table(6000, seed=3)
    table["shadow_prediction"] = np.clip(table["proxy_prediction"] * 0.9 + 0.05, 0.001, 0.999)
    path = str(tmp_path / "canaries")
    spark.createDataFrame(table).write.parquet(path)
    staged = run_stage("audit", spark, config_from_dict({"run": {"output_dir": str(tmp_path / "out"), "seed": 7},
                                                         "audit": {"canary_path": path}}))
    by_pandas = lia_spark.audit_predictions(table, seed=7, claimed_epsilon=2.0)
    by_spark = lia_spark.audit_predictions(spark.createDataFrame(table).repartition(3), seed=7, claimed_epsilon=2.0)
    # audit.baseline auto: the shadows alone where the table holds them, unmapped (audit.recalibrate auto)
    assert staged.summary.baselines == by_pandas.baselines == by_spark.baselines == ("shadow_prediction",)
    assert staged.summary.recalibration == {}
    studied = power.audit_choice(table, AuditConfig(), seed=7, claimed_epsilon=math.nan,
                                 baselines=("shadow_prediction",))
    assert studied.eps_lb == staged.headline.eps_lb and studied.tests == staged.summary.tests
    both = run_stage("audit", spark, config_from_dict({"run": {"output_dir": str(tmp_path / "both"), "seed": 7},
                                                       "audit": {"canary_path": path, "baseline": "both"}}))
    both_by_pandas = lia_spark.audit_predictions(table, seed=7, overrides=["audit.baseline=both"])
    assert both.summary.baselines == both_by_pandas.baselines == ("proxy_prediction", "shadow_prediction")
    assert set(both.summary.recalibration) == {"proxy_prediction"}  # the proxy mapped, the shadows not
    assert both_by_pandas.eps_lb == both.headline.eps_lb and both.summary.tests == 2 * staged.summary.tests
    for audited in (by_pandas, by_spark):
        assert audited.eps_lb == staged.headline.eps_lb > 0 and audited.tests == staged.summary.tests
        assert audited.informative_canaries == staged.summary.canaries and audited.confidence == 0.95
    assert by_pandas.ceiling == by_spark.ceiling > 0  # at the claim (the staged audit had none: no ceiling there)
    assert by_pandas.ceiling < by_pandas.ceiling_95 == by_spark.ceiling_95 == by_pandas.headline.ceiling_95 < 2.0
    assert by_pandas.summary().startswith(f"eps >= {by_pandas.eps_lb:.3f} at 95% (injected canaries, no assumption")
    assert "for a target trained with the audited model at claimed eps = 2" in by_pandas.summary()
    one_score = lia_spark.audit_predictions(table, seed=7, overrides=["audit.scores=[log_ratio]",
                                                                      "audit.baseline=proxy"])
    assert one_score.baselines == ("proxy_prediction",) and one_score.tests < by_pandas.tests
    with pytest.raises(ValueError, match=r"predictions: missing columns \['hidden_bit'\]"):
        lia_spark.audit_predictions(table.drop(columns="hidden_bit"))
    with pytest.raises(ValueError, match=r"predictions: every prediction is 0 or 1 \(class labels"):
        lia_spark.audit_predictions(table.assign(target_prediction=table["label"].astype(float)))
    with pytest.raises(ValueError, match=r"predictions: 1 predictions repeat a canary's row_id"):
        lia_spark.audit_predictions(spark.createDataFrame(pd.concat([table, table.iloc[:1]])))
    with pytest.raises(ConfigError, match="audit.design: audit_predictions plays the injected game"):
        lia_spark.audit_predictions(table, overrides=["audit.design=observational"])
    with pytest.raises(ConfigError, match="audit.delta: audit_predictions reports the pure binomial bound"):
        lia_spark.audit_predictions(table, overrides=["audit.delta=1e-6"])
    with pytest.raises(ConfigError, match="audit.canaries: a pandas table is audited whole"):
        lia_spark.audit_predictions(table, overrides=["audit.canaries=100"])
    # run_command: the command line's `lia-spark audit`, its result typed, its result document written
    commanded = lia_spark.run_command("audit", overrides=[f"run.output_dir={tmp_path / 'api'}", "run.seed=7",
                                                          f"audit.canary_path={path}"], spark=spark)
    assert type(commanded) is type(staged) and commanded.headline.eps_lb == staged.headline.eps_lb
    assert check_file(tmp_path / "api" / "results" / "audit.json")["canaries"] == staged.canaries
    with pytest.raises(ConfigError, match="command: must be one of run, "):
        lia_spark.run_command("audits", spark=spark)


def test_injected_design_on_a_table_without_its_columns_names_the_fix(spark, tmp_path):
    path = str(tmp_path / "canaries")
    spark.createDataFrame(_table(500, seed=1)).write.parquet(path)
    config = config_from_dict({"run": {"output_dir": str(tmp_path / "out")}, "audit": {"canary_path": path}})
    with pytest.raises(ValueError, match="counterfactual_label.*audit.design=observational"):
        run_stage("audit", spark, config)


def test_observational_headline_of_a_label_blind_target_names_a_comparable_reference(spark, tmp_path):
    """The null the observational design fails: a target that never saw the canaries' labels (the true eta) and a
    fitted proxy. At tau = 0 it certifies eps > 0; the headline says so beside a label-blind reference (eta with a
    little noise) that certifies a comparable bound, and the bound calibrated on it is near 0."""
    rng = np.random.default_rng(8)
    m = 20_000
    eta = rng.beta(0.6, 3.0, m)
    label = (rng.random(m) < eta).astype(np.int32)
    proxy = np.clip(eta * np.exp(rng.normal(0.0, 0.4, m)), 1e-4, 1 - 1e-4)
    reference = np.clip(eta * np.exp(rng.normal(0.0, 0.05, m)), 1e-4, 1 - 1e-4)
    path = str(tmp_path / "canaries")
    spark.createDataFrame(pd.DataFrame({
        "row_id": np.arange(m, dtype=np.int64), "label": label, "target_prediction": eta, "proxy_prediction": proxy,
        "reference_prediction": reference})).write.parquet(path)
    config = config_from_dict({"run": {"output_dir": str(tmp_path / "out"), "seed": 1},
                               "audit": {"canary_path": path, "design": "observational", "repetitions": 3}})
    result = run_stage("audit", spark, config)
    headline, checks = result.headline, result.summary.observational
    assert headline.eps_lb > 0.1  # the label-blind target "certifies" leakage at tau = 0 ...
    assert headline.text().startswith("no bound without an assumption on the proxy")  # ... which the headline says
    assert not headline.is_finding and checks.proxy_tv is None  # a given table: no truth to measure the proxy
    assert 0.5 * headline.eps_lb < headline.reference_eps_lb  # ... and so does the reference
    assert headline.reference_tau_break_even == checks.reference.tau_break_even > 0  # its own, same repetition
    assert checks.calibrated.eps_lb < 0.5 * headline.eps_lb and checks.calibrated.note.startswith("not a bound")
    assert "a label-blind reference reaches" in result.console_summary() and "calibrat" not in headline.text()
    assert checks.reference.canaries == m
    assert check_file(tmp_path / "out" / "audit" / "summary.json")["reference"] == \
        result.summary.to_dict()["reference"]
    assert checks.eps_lb_by_tau["0"] == pytest.approx(headline.eps_lb)
    assert {"tau_break_even", "reference_eps_lb", "reference_tau_break_even", "eps_lb_if_tau"} <= set(result.metrics())


def test_on_the_twin_the_observational_headline_is_the_bound_at_the_proxys_measured_error(spark, tmp_path):
    """With the twin's truth beside this project's canary table the proxy's TV error is measured (its maximum over
    the canaries equals max |M'(x) - eta(x)|) and the headline is the valid bound at that tau, assuming nothing."""
    rng = np.random.default_rng(9)
    m = 20_000
    eta = rng.beta(0.6, 3.0, m)
    label = (rng.random(m) < eta).astype(np.int32)
    proxy = np.clip(eta * np.exp(rng.normal(0.0, 0.1, m)), 1e-4, 1 - 1e-4)
    target = np.clip(0.7 * label + 0.3 * eta, 1e-4, 1 - 1e-4)  # a target that memorised its labels
    reference = np.clip(eta * np.exp(rng.normal(0.0, 0.05, m)), 1e-4, 1 - 1e-4)  # label-blind
    out = tmp_path / "out"
    spark.createDataFrame(pd.DataFrame({"row_id": np.arange(m, dtype=np.int64), "label": label,
                                        "target_prediction": target, "proxy_prediction": proxy,
                                        "reference_prediction": reference})
                          ).write.parquet(str(out / "models" / "canaries"))
    spark.createDataFrame(pd.DataFrame({"row_id": np.arange(m, dtype=np.int64), "eta": eta})
                          ).write.parquet(str(out / "truth"))
    config = config_from_dict({"run": {"output_dir": str(out), "seed": 2},
                               "audit": {"design": "observational", "repetitions": 2, "recalibrate": "none"}})
    result = run_stage("audit", spark, config)
    headline, measured = result.headline, result.summary.observational.proxy_tv
    assert measured.max == pytest.approx(np.abs(proxy - eta).max()) and measured.canaries == m
    assert measured.p99 <= measured.max and measured.mean == pytest.approx(np.abs(proxy - eta).mean())
    assert headline.measured_tau == measured.max and headline.eps_lb == measured.eps_lb > 0
    assert headline.eps_lb <= result.summary.observational.eps_lb_by_tau["0"]  # a larger tau never certifies more
    assert headline.text().startswith(f"eps >= {headline.eps_lb:.3f} at 95% at the proxy's worst-case TV error")
    assert headline.assumption == "" and result.metrics()["measured_tau"] == measured.max
    checks = result.summary.observational  # the reference is read at the headline's tau, not at audit.tau = 0
    assert checks.reference.tau == measured.max and headline.reference_eps_lb == checks.reference.eps_lb
    assert checks.reference.eps_lb < checks.eps_lb_by_tau["0"]
    assert f"a label-blind reference {'certifies 0' if checks.reference.eps_lb == 0 else 'reaches'} at this tau " \
           f"({measured.max:.4g};" in headline.text()
    check_file(out / "audit" / "summary.json")


def test_an_audit_without_its_canary_table_fails_first_naming_the_command_that_writes_it(spark, tmp_path):
    """Alone, the audit stage checks its declared input before any work; in the pipeline, a selection without the
    step that writes it fails before any stage runs (nothing written either way)."""
    from lia_spark.engine.orchestration.pipeline import run_pipeline

    config = config_from_dict({"run": {"output_dir": str(tmp_path / "out"), "stages": ["audit"]},
                               "tracking": {"enabled": False}})
    with pytest.raises(ValueError, match=r"^audit\.canary_path: the audit stage reads the canaries table, but .* "
                                         r"does not exist; run `lia-spark train`"):
        run_stage("audit", spark, config)
    with pytest.raises(ValueError, match=r"^run\.stages: \['audit'\] reads the canaries table but .* is missing or "
                                         r"incomplete; add 'train' to run\.stages or set audit\.canary_path"):
        run_pipeline(spark, config)
    assert not (tmp_path / "out" / "audit").exists()


def test_recalibration_reads_no_label_and_maps_a_shifted_target_back(spark, tmp_path):
    """The map is fitted on the canaries' predictions only: permuting the labels, counterfactuals and coins leaves
    it unchanged; a target shifted by +3 in logit is mapped back onto the proxy; the audit records the map."""
    from scipy.special import expit, logit

    from lia_spark.engine.audit.counts import select_canaries

    table = _injected_table(6000, seed=3)
    table["target_prediction"] = expit(logit(table["proxy_prediction"]) + 3.0)
    permuted = table.copy()
    order = np.random.default_rng(0).permutation(len(table))
    for column in ("label", "counterfactual_label", "hidden_bit"):
        permuted[column] = table[column].to_numpy()[order]
    maps = []
    for frame, partitions in ((table, 1), (permuted, 3)):
        for mode in ("target", "proxy"):
            df, mapping = select_canaries(spark.createDataFrame(frame).repartition(partitions), seed=42, canaries=0,
                                          design=INJECTED_DESIGN, recalibrate=mode)
            maps.append(mapping)
            mapped = df.toPandas()  # the map of M' onto M: the shifted proxy is the target again
            assert np.abs(logit(mapped["target_prediction"]) - logit(mapped["proxy_prediction"])).max() < 0.01
            kept = mapped.set_index("row_id")
            unchanged = "proxy_prediction" if mode == "target" else "target_prediction"
            np.testing.assert_array_equal(kept[unchanged], table.set_index("row_id").loc[kept.index, unchanged])
    for first, second in ((maps[0], maps[2]), (maps[1], maps[3])):  # labels permuted: the same maps
        np.testing.assert_array_equal(first.centres, second.centres)
        np.testing.assert_array_equal(first.values, second.values)
    assert maps[0].canaries == len(table)  # fitted on every canary, before the informative ones are kept
    path = str(tmp_path / "canaries")
    spark.createDataFrame(table).write.parquet(path)
    config = config_from_dict({"run": {"output_dir": str(tmp_path / "out"), "seed": 42},
                               "audit": {"canary_path": path, "recalibrate": "proxy"}})
    result = run_stage("audit", spark, config)
    recalibrated = result.summary.recalibration["proxy_prediction"]
    assert recalibrated.canaries == len(table) and recalibrated.mapped == "proxy"
    assert check_file(tmp_path / "out" / "audit" / "summary.json")["recalibration"] == \
        result.summary.to_dict()["recalibration"]


def test_the_observational_game_on_an_injected_target_shows_the_label_it_trained_on(spark):
    """y0 of the observational game is the training label: y1 where the coin injected it, else the true label."""
    from lia_spark.engine.audit.counts import select_canaries

    table = _injected_table(2000, seed=4)
    df, mapping = select_canaries(spark.createDataFrame(table), seed=42, canaries=0, design=OBSERVATIONAL_DESIGN)
    found = df.toPandas().set_index("row_id").loc[table["row_id"], "label"].to_numpy()
    trained = np.where(table["hidden_bit"] == 1, table["counterfactual_label"], table["label"])
    np.testing.assert_array_equal(found, trained)
    assert mapping is None and (found != table["label"]).sum() > 0
    plain, _ = select_canaries(spark.createDataFrame(table.drop(columns=["counterfactual_label", "hidden_bit"])),
                               seed=42, canaries=0, design=OBSERVATIONAL_DESIGN)
    assert plain.toPandas().set_index("row_id").loc[table["row_id"], "label"].tolist() == table["label"].tolist()
