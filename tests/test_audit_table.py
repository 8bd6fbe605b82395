"""`lia-spark audit-table`: the grid (pure), and a real tiny run on local Spark with a real MLflow sqlite store:
files with one row per cell equal to the cells' own audit summaries, a failing cell that leaves the others and is
resumed alone by a re-run, a re-run that reuses every cell, the MLflow parent and nested runs."""
from __future__ import annotations

import math

import mlflow
import pandas as pd
import pytest
import yaml
from json_support import check_file, check_result

from lia_spark.cli.main import main
from lia_spark.names import setting_key
from lia_spark.present.charts import plot_eps_lb
from lia_spark.run.checks import ConfigError
from lia_spark.run.config import config_from_dict, load_config
from lia_spark.studies.table import (PUBLISHED_EPS_LB, PUBLISHED_LABEL, Cell, inf_position, published_table,
                                     table_cells, wide_table)
from lia_spark.tracking.mlflow_runs import KIND_TAG, TABLE_CELL_TAGS

pytestmark = pytest.mark.e2e  # the end-to-end tier: `make test-e2e` (README)

# ---------------------------------------------------------------------------------------------------------
# The grid (pure)


def test_default_grid_has_the_baseline_one_llp_cell_per_bag_size_and_every_mechanism_x_eps():
    cells, skipped = table_cells(load_config(None))
    names = [cell.name for cell in cells]
    assert skipped == {}
    assert names[0] == "none" and names.count("none") == 1
    assert "llp-k8" in names and not any(name.startswith("llp-k8-eps") for name in names)
    assert {"rr-epsinf", "rr-eps8", "rr-eps0.1", "lp_2st-eps1", "llp_laplace-k8-eps4", "llp_geometric-k8-eps0.1",
            "rr_with_prior-eps2", "rr_debiased-eps1", "pate-epsinf", "pate-eps0.1"} <= set(names)
    assert len(cells) == 1 + 4 * 6 + 1 + 2 * 6 + 6 == len(set(names))
    llp = next(cell for cell in cells if cell.name == "llp-k8")
    assert math.isinf(llp.epsilon) and llp.bag_size == 8
    assert next(c for c in cells if c.name == "rr-eps8").bag_size == 1


def test_two_bag_sizes_give_llp_cells_per_bag_size():
    cells, _ = table_cells(load_config(None, ["table.mechanisms=[llp, llp_laplace]", "table.bag_sizes=[8, 64]",
                                              "table.epsilons=[1.0]"]))
    assert [c.name for c in cells] == ["llp-k8", "llp-k64", "llp_laplace-k8-eps1", "llp_laplace-k64-eps1"]


def test_catboost_skips_the_llp_mechanisms_with_a_reason_and_refuses_an_empty_grid():
    cells, skipped = table_cells(load_config(None, ["models.library=catboost", "utility.bag_sizes=[]"]))
    assert set(skipped) == {"llp", "llp_laplace", "llp_geometric"}
    assert "catboost" in skipped["llp"] and not any(c.mechanism.startswith("llp") for c in cells)
    assert any(c.mechanism == "pate" for c in cells)  # teachers and student in catboost
    with pytest.raises(ConfigError, match=r"table.mechanisms: none can be trained with models.library=catboost"):
        table_cells(load_config(None, ["models.library=catboost", "utility.bag_sizes=[]", "table.mechanisms=[llp]"]))
    with pytest.raises(ConfigError, match="distributed"):
        table_cells(load_config(None, ["models.execution=distributed", "models.library=catboost"]))
    cells, skipped = table_cells(load_config(None, ["models.execution=distributed"]))
    assert set(skipped) == {"pate"} and any(c.mechanism == "llp_geometric" for c in cells)  # bag regression (§4.7)


@pytest.mark.parametrize("override, field", [("table.mechanisms=[rr, dp_sgd]", "table.mechanisms"),
                                             ("table.mechanisms=[]", "table.mechanisms"),
                                             ("table.mechanisms=[rr, rr]", "table.mechanisms"),
                                             ("table.epsilons=[0]", "table.epsilons"),
                                             ("table.epsilons=[1, 1.0]", "table.epsilons"),
                                             ("table.bag_sizes=[0]", "table.bag_sizes"),
                                             ("table.bag_sizes=[]", "table.bag_sizes"),
                                             ("table.colour=red", "table.colour")])
def test_bad_table_values_name_the_field(override, field):
    with pytest.raises(ConfigError, match=field):
        load_config(None, [override])


def _cell_row(cell: Cell, mean: float, std: float = 0.1, status: str = "ran") -> dict:
    return {"cell": cell.name, "mechanism": cell.mechanism, "algorithm": cell.algorithm,
            "claimed_epsilon": cell.epsilon,
            "bag_size": cell.bag_size, "status": status, "eps_lb_mean": mean, "eps_lb_std": std,
            "exceeds_claimed": mean > cell.epsilon}


def test_wide_table_flags_findings_and_failures_and_the_plot_places_inf_right_of_the_largest_eps(tmp_path):
    cells = pd.DataFrame([_cell_row(Cell("none", math.inf), 1.2), _cell_row(Cell("rr", math.inf), 1.1),
                          _cell_row(Cell("rr", 0.1), 0.3), _cell_row(Cell("rr", 8.0), math.nan, status="failed"),
                          _cell_row(Cell("llp", math.inf, 8), 2.0)])
    wide = wide_table(cells, epsilons=(math.inf, 8.0, 0.1))
    assert list(wide.columns) == ["mechanism", "algorithm", "bag_size", "inf", "8", "0.1"]
    rr = wide.set_index("mechanism").loc["rr"]
    assert rr["inf"] == "1.100 +- 0.100" and rr["8"] == "failed" and rr["0.1"] == "0.300 +- 0.100 (exceeds claimed eps)"
    assert wide.set_index("mechanism").loc["none", "8"] == ""
    assert wide.set_index("mechanism").loc["llp", "algorithm"] == "PropMatch on LLP (k=8)"
    assert inf_position([0.1, 8.0, math.inf]) == 16.0 and inf_position([math.inf]) == 1.0
    path = plot_eps_lb(cells, path=str(tmp_path / "plot.png"))
    assert (tmp_path / "plot.png").stat().st_size > 10_000 and path.endswith("plot.png")


def test_published_values_are_labelled_as_not_a_valid_bound():
    # Kalemaj et al., "Observational Auditing of Label Privacy", 2025, Table 2 (Criteo).
    assert [v[0] for v in PUBLISHED_EPS_LB["LP-1ST"]] == [1.37, 1.29, 1.22, 0.59, 0.34, 0.06]
    assert [v[0] for v in PUBLISHED_EPS_LB["LP-2ST"]] == [1.52, 1.46, 1.24, 0.75, 0.61, 0.06]
    assert [v[0] for v in PUBLISHED_EPS_LB["PATE"]] == [1.60, 1.48, 1.28, 0.71, 0.59, 0.06]
    frame = published_table().set_index("algorithm")
    assert (frame["values"] == PUBLISHED_LABEL).all() and "not a valid bound" in PUBLISHED_LABEL
    assert frame.loc["LP-1ST", "eps_lb@inf"] == "1.37 +- 0.14" and frame.loc["LP-2ST", "mechanism"] == "lp_2st"
    assert frame.loc["LP-1ST (domain prior)", "eps_lb@0.1"] == ""


# ---------------------------------------------------------------------------------------------------------
# A real tiny table: 2 days x 5k rows, 5 trees, 2 repetitions, rr and llp_laplace x eps {inf, 1}

BLOCKED = "llp_laplace-k8-eps1"
CELLS = ["rr-epsinf", "rr-eps1", "llp_laplace-k8-epsinf", BLOCKED]
CELL_KEYS = ["rr.epsinf.k1", "rr.eps1.k1", "llp_laplace.epsinf.k8", "llp_laplace.eps1.k8"]  # their MLflow run names


def _values(root) -> dict:
    return {
        "run": {"name": "table-test", "output_dir": str(root / "out")},
        "synthetic": {"rows_per_day": 5000, "days": 2},
        "models": {"n_estimators": 5, "early_stopping_rounds": 0, "hash_buckets": 1024},
        "audit": {"repetitions": 2, "shadows": 0},  # shadow fits: see tiny_values
        "table": {"mechanisms": ["rr", "llp_laplace"], "epsilons": ["inf", 1.0], "bag_sizes": [8]},
        "tracking": {"tracking_uri": f"sqlite:///{root / 'mlflow.db'}", "experiment": "lia-spark-table-tests"},
    }


@pytest.fixture(scope="module")
def runs(spark, tmp_path_factory):
    """Run 1 (command line) with one cell's folder blocked by a file; run 2 after removing it; run 3 unchanged."""
    from lia_spark.engine.orchestration.audit_table import run_audit_table

    root = tmp_path_factory.mktemp("audit-table")
    values = _values(root)
    conf = root / "table.yaml"
    conf.write_text(yaml.safe_dump(values), encoding="utf-8")
    config = config_from_dict(values)
    blocker = root / "out" / "table" / "cells" / BLOCKED
    blocker.parent.mkdir(parents=True)
    blocker.write_text("a file where the cell's folder should be", encoding="utf-8")
    first_exit = main(["audit-table", "--conf", str(conf)])
    first_cells = pd.read_csv(root / "out" / "table" / "cells.csv")
    blocker.unlink()
    second = run_audit_table(spark, config)
    third = run_audit_table(spark, config)
    return {"root": root, "config": config, "first_exit": first_exit, "first_cells": first_cells,
            "second": second, "third": third}


def test_a_failing_cell_is_recorded_the_others_run_and_the_command_exits_1(runs):
    assert runs["first_exit"] == 1
    cells = runs["first_cells"].set_index("cell")
    assert list(cells.index) == CELLS
    assert cells.loc[BLOCKED, "status"] == "failed" and "PermissionError" in cells.loc[BLOCKED, "error"]
    assert math.isnan(cells.loc[BLOCKED, "eps_lb_mean"])
    others = cells.drop(index=BLOCKED)
    assert (others["status"] == "ran").all() and others["eps_lb_mean"].notna().all()


def test_a_rerun_resumes_only_the_failed_cell(runs):
    second = runs["second"]
    assert [o.cell.name for o in second.cells] == CELLS and second.failed() == []
    for outcome in second.cells:
        if outcome.cell.name == BLOCKED:
            assert outcome.status == "ran" and not outcome.train.skipped and not outcome.audit.skipped
        else:
            assert outcome.status == "reused" and outcome.train.skipped and outcome.audit.skipped


def test_a_second_rerun_reuses_every_cell(runs):
    third = runs["third"]
    assert all(o.status == "reused" and o.train.skipped and o.audit.skipped for o in third.cells)
    assert third.metrics()["cells_reused"] == len(CELLS)
    assert len(check_result(third, "audit-table")["cells"]) == len(CELLS)  # results/audit-table.json's schema
    cell_files = sorted((runs["root"] / "out" / "table" / "cells").rglob("*.json"))
    assert len(cell_files) >= 2 * len(CELLS) and [check_file(path) for path in cell_files]  # metrics, summaries


def test_the_table_files_hold_one_row_per_cell_equal_to_the_cells_audit_summaries(runs):
    out = runs["root"] / "out" / "table"
    for name in ("eps_lb.csv", "cells.csv", "utility.csv", "published.csv", "eps_lb_vs_claimed.png"):
        assert (out / name).stat().st_size > 0, name
    third = runs["third"]
    cells = pd.read_csv(out / "cells.csv").set_index("cell")
    assert list(cells.index) == CELLS
    for outcome in third.cells:
        best = outcome.audit.summary.best["eps_binomial_bonferroni"]
        row = cells.loc[outcome.cell.name]
        assert row["eps_lb_mean"] == pytest.approx(best.mean, rel=1e-12)
        assert row["eps_lb_std"] == pytest.approx(best.std, rel=1e-12, abs=1e-15)
        assert row["test_auc"] == pytest.approx(outcome.train.test_metrics["auc@target"], rel=1e-12)
        assert row["test_log_loss"] == pytest.approx(outcome.train.test_metrics["log_loss@target"], rel=1e-12)
        assert row["canaries"] == outcome.audit.canaries and row["repetitions"] == 1  # injected: one training run
        assert row["convention"] == "bonferroni" and row["exceeds_claimed"] == (best.mean > outcome.cell.epsilon)
    wide = pd.read_csv(out / "eps_lb.csv", keep_default_na=False).set_index("mechanism")
    assert list(wide.index) == ["rr", "llp_laplace"] and list(wide.columns[-2:]) == ["inf", "1"]
    rr = third.cell("rr-eps1").audit.summary.best["eps_binomial_bonferroni"]
    assert wide.loc["rr", "1"].startswith(f"{rr.mean:.3f} +- {rr.std:.3f}")
    utility = pd.read_csv(out / "utility.csv").set_index("cell")
    assert list(utility.index) == CELLS and utility["test_log_loss"].notna().all()
    assert (pd.read_csv(out / "published.csv")["values"] == PUBLISHED_LABEL).all()
    assert third.cell("rr-epsinf").output_dir == str(runs["root"] / "out" / "table" / "cells" / "rr-epsinf")


def test_mlflow_parent_and_nested_cell_runs(runs):
    uri = runs["config"].tracking.tracking_uri
    client = mlflow.MlflowClient(uri)
    experiment = client.get_experiment_by_name("lia-spark-table-tests")
    parents = client.search_runs([experiment.experiment_id], f"tags.`{KIND_TAG}` = 'audit_table'",
                                 order_by=["attributes.start_time ASC"])
    assert [p.info.status for p in parents] == ["FAILED", "FINISHED", "FINISHED"]
    third = runs["third"]
    assert parents[-1].info.run_id == third.mlflow_run_id
    artifacts = {a.path for a in client.list_artifacts(third.mlflow_run_id, "table")}
    assert {"table/eps_lb.csv", "table/cells.csv", "table/utility.csv", "table/eps_lb_vs_claimed.png"} <= artifacts
    for parent in parents:
        children = client.search_runs([experiment.experiment_id], f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
        assert sorted(c.info.run_name for c in children) == sorted(CELL_KEYS)
        assert sorted(c.data.params["cell"] for c in children) == sorted(CELLS)
    children = {c.info.run_name: c for c in client.search_runs(
        [experiment.experiment_id], f"tags.mlflow.parentRunId = '{third.mlflow_run_id}'")}
    for outcome in third.cells:
        run = children[setting_key(outcome.cell.mechanism, outcome.cell.epsilon, outcome.cell.bag_size)]
        best = outcome.audit.summary.best["eps_binomial_bonferroni"]
        assert set(TABLE_CELL_TAGS) <= set(run.data.tags)
        assert run.data.tags["audit.mechanism"] == outcome.cell.mechanism
        assert run.data.tags["audit.claimed_eps"] == ("inf" if math.isinf(outcome.cell.epsilon) else "1")
        assert float(run.data.tags["audit.eps_lb"]) == pytest.approx(best.mean, rel=1e-5)
        assert run.data.params["bag_size"] == str(outcome.cell.bag_size)
        assert run.data.metrics["eps_lb_mean"] == pytest.approx(best.mean, rel=1e-12)
        assert run.data.metrics["test_auc"] == pytest.approx(outcome.train.test_metrics["auc@target"], rel=1e-12)
    failed_children = client.search_runs([experiment.experiment_id],
                                         f"tags.mlflow.parentRunId = '{parents[0].info.run_id}'")
    assert [c.data.params["cell"] for c in failed_children if c.info.status == "FAILED"] == [BLOCKED]


def test_paper_convention_audits_the_same_targets_the_papers_way_beside_the_valid_bound(spark, tmp_path):
    """table.paper_convention: each cell's canary table is audited a second time with the paper's settings (no
    training: the train stages are reused), and paper_convention.csv puts the valid bound, the paper-way value and
    the published value side by side."""
    from lia_spark.engine.orchestration.audit_table import PAPER_WAY_FILE, run_audit_table
    from lia_spark.studies.table import PAPER_WAY_LABEL

    values = _values(tmp_path)
    values["table"] = {"mechanisms": ["rr", "pate"], "epsilons": [1.0]}
    values["pate"] = {"teachers": 10, "queries": 500}
    values["tracking"] = {"enabled": False}
    plain = run_audit_table(spark, config_from_dict(values))
    values["table"]["paper_convention"] = True
    both = run_audit_table(spark, config_from_dict(values))
    for before, after in zip(plain.cells, both.cells):
        assert after.train.skipped and after.audit.skipped and not after.paper.skipped  # no extra training
        assert after.record()["eps_lb_mean"] == before.record()["eps_lb_mean"]
        summary = after.paper.summary
        assert (summary.design, summary.scores, summary.delta, summary.repetitions) == (
            "observational", ("difference_t2",), 1e-5, 100)
        trained_rows = len(pd.read_parquet(f"{after.output_dir}/models/canaries"))
        assert summary.headline.family == "gdp" and summary.canaries == trained_rows  # fewer than 200k
        assert math.isfinite(after.record()["eps_lb_paper_way_mean"])
    frame = pd.read_csv(tmp_path / "out" / "table" / PAPER_WAY_FILE, dtype=str, keep_default_na=False)
    assert list(frame["cell"]) == ["rr-eps1", "pate-eps1"]
    row = frame.set_index("cell").loc["rr-eps1"]
    assert row["eps_lb_published"] == "0.34 +- 0.02" and row["test_log_loss_published"] == "0.362"
    assert (frame["paper_way"] == PAPER_WAY_LABEL).all() and "not a valid bound" in PAPER_WAY_LABEL
    report = both.cell("pate-eps1").train.mechanism_report
    assert report["queries"] == 500.0 and report["teachers"] == 10.0 and report["epsilon"] <= 1.0
