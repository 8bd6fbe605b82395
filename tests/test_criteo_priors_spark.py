"""Real Criteo-format input end to end: without the twin's truth table the attacker's prior is the proxy model's
prediction for every row of the released day (``models/priors``; mechanisms.days=target), and a prior that
cannot be resolved fails before any stage runs, naming mechanisms.prior_column / mechanisms.prior_path.

The README's command (``run.output_dir=... data.source=criteo 'data.criteo_paths=[...]'``) runs on day files
written by the twin (copied without truth/) and on hand-written random Criteo lines, with only overrides that
shrink the work (few trees, one mechanism setting, a small utility grid, 3 audit repetitions, a tmp MLflow store).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lia_spark.cli.main import main
from lia_spark.engine.attacker_prior.sources import PriorSource, needs_proxy_priors, prior_source, resolve_prior
from lia_spark.engine.orchestration.pipeline import run_pipeline
from lia_spark.engine.orchestration.registry import run_stage
from lia_spark.engine.posteriors.prior import check_prior_source
from lia_spark.engine.runtime.outputs import MARKER, committed_output
from lia_spark.kernels import criteo
from lia_spark.run.config import config_from_dict, load_config

pytestmark = pytest.mark.e2e  # the end-to-end tier: `make test-e2e` (README)

TWIN_ROWS = 4000
HAND_ROWS = 3000


def _shrink(root: Path) -> list[str]:
    """Overrides that only make the run small: few trees, one setting, a small utility grid, a tmp store."""
    return ["models.n_estimators=10", "models.early_stopping_rounds=0", "models.hash_buckets=1024",
            "models.min_category_count=3", "utility.epsilons=[4.0, inf]", "utility.bag_sizes=[8]",
            "mechanisms.epsilons=[2.0]", "mechanisms.bag_sizes=[8]", "audit.repetitions=3",
            f"tracking.tracking_uri=sqlite:///{root / 'mlflow.db'}", "tracking.experiment=lia-spark-tests",
            "tracking.log_models=false"]


def _readme_command(out: Path, files: Path) -> list[str]:
    return ["run", f"run.output_dir={out}", "data.source=criteo", f"data.criteo_paths=[{files}]"]


def _marker(folder: Path) -> dict:
    return json.loads((folder / MARKER).read_text(encoding="utf-8"))


def _assert_proxy_priors_for_every_row(out: Path, day_rows: int) -> None:
    """models/priors holds the proxy's prediction for each row of day 1, and posteriors released every row
    with exactly that prior."""
    assert not (out / "truth").exists()
    priors = pd.read_parquet(out / "models" / "priors")
    assert list(priors.columns) == ["row_id", "proxy_prediction"]
    assert str(priors["row_id"].dtype) == "int64" and str(priors["proxy_prediction"].dtype) == "float64"
    assert len(priors) == day_rows and priors["row_id"].is_unique
    assert np.all(priors["row_id"].to_numpy() >> 40 == 1)
    assert priors["proxy_prediction"].between(0, 1).all()
    assert _marker(out / "models")["rows"]["priors"] == day_rows
    canaries = pd.read_parquet(out / "models" / "canaries").merge(priors, on="row_id", suffixes=("", "_prior"))
    assert len(canaries) > 0.7 * day_rows
    np.testing.assert_allclose(canaries["proxy_prediction_prior"], canaries["proxy_prediction"], rtol=0, atol=1e-6)
    posteriors = _marker(out / "posteriors")
    assert posteriors["input_rows"] == day_rows and posteriors["rows_without_prior"] == 0
    rows = pd.read_parquet(out / "posteriors" / "rows", columns=["row_id", "mechanism", "prior"])
    released = rows[rows["mechanism"] == "rr"].merge(priors, on="row_id")
    assert len(released) == day_rows
    np.testing.assert_array_equal(released["prior"].to_numpy(), released["proxy_prediction"].to_numpy())


def test_readme_criteo_command_on_twin_day_files_without_truth(spark, tmp_path):
    twin = config_from_dict({"run": {"output_dir": str(tmp_path / "twin")},
                             "synthetic": {"rows_per_day": TWIN_ROWS, "days": 2, "write_tsv": True}})
    run_stage("generate", spark, twin)
    files = tmp_path / "criteo"
    files.mkdir()
    for day in (0, 1):
        shutil.copyfile(tmp_path / "twin" / "criteo" / f"day_{day}", files / f"day_{day}")
    out = tmp_path / "runs" / "criteo"
    assert main([*_readme_command(out, files), *_shrink(tmp_path)]) == 0
    _assert_proxy_priors_for_every_row(out, TWIN_ROWS)
    assert _marker(out / "audit")  # every step ran to the end
    assert (out / "report" / "report.html").is_file()


def _random_criteo_lines(rng: np.random.Generator, n: int) -> list[str]:
    """Valid Criteo lines: label, I1..I13 (empty, negative or heavy-tailed), C1..C26 (8 lowercase hex or empty);
    the click rate rises with I1 and C1 so the models have something to learn."""
    ints = {name: np.floor(np.exp(rng.normal(1.5, 2.0, n))).astype(np.int64) - 2 for name in criteo.INT_COLUMNS}
    int_missing = {name: rng.random(n) < 0.2 for name in criteo.INT_COLUMNS}
    cats = {name: rng.choice(rng.integers(0, 1 << 32, 40, dtype=np.int64), n) for name in criteo.CAT_COLUMNS}
    cat_missing = {name: rng.random(n) < 0.1 for name in criteo.CAT_COLUMNS}
    click = 0.1 + 0.3 * (ints["I1"] > 5) + 0.2 * (cats["C1"] % 3 == 0)
    labels = (rng.random(n) < click).astype(int)
    lines = []
    for i in range(n):
        fields = [str(labels[i])]
        fields += ["" if int_missing[name][i] else str(ints[name][i]) for name in criteo.INT_COLUMNS]
        fields += ["" if cat_missing[name][i] else f"{cats[name][i]:08x}" for name in criteo.CAT_COLUMNS]
        lines.append("\t".join(fields))
    assert all(len(line.split("\t")) == 40 for line in lines)
    return lines


def test_readme_criteo_command_on_hand_written_day_files(spark, tmp_path):
    rng = np.random.default_rng(11)
    files = tmp_path / "criteo"
    files.mkdir()
    for day in (0, 1):
        (files / f"day_{day}").write_text("".join(f"{line}\n" for line in _random_criteo_lines(rng, HAND_ROWS)),
                                          encoding="ascii")
    out = tmp_path / "runs" / "criteo"
    config = load_config(None, [*_readme_command(out, files)[1:], *_shrink(tmp_path)])
    assert resolve_prior(config) == PriorSource("proxy_prediction", str(out / "models" / "priors"),
                                                                    "train")
    result = run_pipeline(spark, config)
    assert {o.step: o.status for o in result.steps} == {"data": "ran", "train": "ran", "posteriors": "ran",
                                                        "utility": "ran", "audit": "ran", "report": "ran"}
    assert result.step("data").stage == "ingest" and result.step("data").result.malformed_rows == 0
    assert result.step("train").result.rows["priors"] == HAND_ROWS
    _assert_proxy_priors_for_every_row(out, HAND_ROWS)


# ---------------------------------------------------------------------------------- resolving and checking


def _config(tmp_path: Path, *overrides: str):
    return load_config(None, [f"run.output_dir={tmp_path / 'out'}", *overrides])


def _criteo(tmp_path: Path, *overrides: str):
    return _config(tmp_path, "data.source=criteo", f"data.criteo_paths=[{tmp_path}]", *overrides)


def test_resolve_prior_defaults_and_overrides(tmp_path):
    out = tmp_path / "out"
    cases = [
        (_config(tmp_path), ("eta", out / "truth", "data")),
        (_criteo(tmp_path), ("proxy_prediction", out / "models" / "priors", "train")),
        (_config(tmp_path, "mechanisms.prior_column=proxy_prediction"),
         ("proxy_prediction", out / "models" / "priors", "train")),
        (_criteo(tmp_path, "mechanisms.prior_column=target_prediction"),
         ("target_prediction", out / "models" / "canaries", "train")),
        (_criteo(tmp_path, "mechanisms.prior_path=/tables/p"), ("proxy_prediction", "/tables/p", None)),
        (_config(tmp_path, "mechanisms.prior_path=/tables/p", "mechanisms.prior_column=score"),
         ("score", "/tables/p", None)),
    ]
    for config, (column, path, step) in cases:
        assert resolve_prior(config) == PriorSource(column, str(path), step)
        assert prior_source(config) == str(path)
        assert needs_proxy_priors(config) == (path == out / "models" / "priors")


def _write_table(spark, path: Path, columns: dict) -> str:
    spark.createDataFrame(pd.DataFrame(columns)).write.parquet(str(path))
    return str(path)


def test_check_prior_source_names_the_field(spark, tmp_path):
    check = check_prior_source
    with pytest.raises(ValueError, match=r"mechanisms.prior_column: eta exists only in the synthetic twin's truth "
                                         r"table .*mechanisms.prior_column=auto .*mechanisms.prior_path"):
        check(spark, _criteo(tmp_path, "mechanisms.prior_column=eta"))
    with pytest.raises(ValueError, match=r"mechanisms.prior_path: .*/nowhere does not exist or is not a Parquet"):
        check(spark, _criteo(tmp_path, f"mechanisms.prior_path={tmp_path / 'nowhere'}"))
    scores = _write_table(spark, tmp_path / "scores", {"row_id": [1, 2], "score": [0.1, 0.2]})
    with pytest.raises(ValueError, match=r"mechanisms.prior_column: .*/scores has no column 'proxy_prediction' "
                                         r"\(columns: row_id, score\)"):
        check(spark, _criteo(tmp_path, f"mechanisms.prior_path={scores}"))
    check(spark, _criteo(tmp_path, f"mechanisms.prior_path={scores}", "mechanisms.prior_column=score"))
    no_ids = _write_table(spark, tmp_path / "no_ids", {"id": [1, 2], "eta": [0.1, 0.2]})
    with pytest.raises(ValueError, match=r"mechanisms.prior_path: .*/no_ids has no column 'row_id'"):
        check(spark, _criteo(tmp_path, f"mechanisms.prior_path={no_ids}", "mechanisms.prior_column=eta"))
    # Stage-written tables: fine when their step runs before posteriors, else they must be complete.
    check(spark, _criteo(tmp_path))
    check(spark, _config(tmp_path))
    check(spark, _criteo(tmp_path, "run.stages=[data, audit]"))  # posteriors not selected: nothing to check
    with pytest.raises(ValueError, match=r"mechanisms.prior_column: the prior 'proxy_prediction' is read from "
                                         r".*/models/priors, which the train stage writes, but it is missing"):
        check(spark, _criteo(tmp_path, "run.stages=[posteriors]"))
    with pytest.raises(ValueError, match=r"mechanisms.prior_column: the prior 'eta' is read from .*/truth, which "
                                         r"the generate stage writes, but it is missing .*run step 'data' first"):
        check(spark, _config(tmp_path, "run.stages=[posteriors, audit]"))
    with pytest.raises(ValueError, match=r"mechanisms.prior_column: the train stage's canary table .* has no column "
                                         r"'score'"):
        check(spark, _criteo(tmp_path, "mechanisms.prior_column=score"))
    with committed_output(spark, str(tmp_path / "out" / "models")) as staging:  # a train output without priors
        _write_table(spark, Path(staging) / "canaries", {"row_id": [1], "target_prediction": [0.5]})
    with pytest.raises(ValueError, match=r"models is complete but was committed without it .*run.force=true"):
        check(spark, _criteo(tmp_path, "run.stages=[posteriors]"))
    check(spark, _criteo(tmp_path, "run.stages=[posteriors]", "mechanisms.prior_column=target_prediction"))


def test_posteriors_stage_alone_fails_clearly_without_priors(spark, tmp_path):
    """No raw FileNotFoundError: the stage checks its prior first."""
    with pytest.raises(ValueError, match=r"mechanisms.prior_column: the prior 'proxy_prediction' is read from "
                                         r".*/models/priors"):
        run_stage("posteriors", spark, _criteo(tmp_path))
    assert not (tmp_path / "out" / "posteriors").exists()


def test_readme_command_with_eta_on_real_files_fails_before_any_stage(spark, tmp_path, capsys):
    files = tmp_path / "criteo"
    files.mkdir()
    (files / "day_0").write_text("\n".join(_random_criteo_lines(np.random.default_rng(1), 5)) + "\n", encoding="ascii")
    out = tmp_path / "runs" / "criteo"
    code = main([*_readme_command(out, files), "mechanisms.prior_column=eta", *_shrink(tmp_path)])
    assert code == 2  # the configuration is wrong for this input (docs/usage.md, "Failures and recovery")
    assert "mechanisms.prior_column: eta exists only in the synthetic twin's truth table" in capsys.readouterr().err
    assert not (out / "data").exists() and not (out / "models").exists()
