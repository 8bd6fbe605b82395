"""Plots of the posteriors stage (pure matplotlib, no Spark): files written, valid PNG, errors named."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from lia_spark.kernels import posteriors
from lia_spark.present import plots

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _sample() -> pd.DataFrame:
    """RR rows (|I| = eps) and LLP rows at k = 1 (all |I| infinite) and k = 4 (finite and infinite)."""
    rng = np.random.default_rng(5)
    prior = rng.uniform(0.01, 0.6, size=400)
    released = (rng.random(400) < prior).astype(int)
    frames = []
    for eps in (1.0, 4.0):
        rr = posteriors.rr(prior, released, epsilon=eps)
        frames.append(pd.DataFrame({"mechanism": "rr", "epsilon": eps, "bag_size": 1, "prior": prior,
                                    "posterior": rr.posterior, "I": rr.multiplicative_advantage}))
    for k in (1, 4):
        sums = np.add.reduceat(released, np.arange(0, 400, k))
        llp = posteriors.llp_bags(prior, np.full(400 // k, k), sums)
        frames.append(pd.DataFrame({"mechanism": "llp", "epsilon": math.nan, "bag_size": k, "prior": prior,
                                    "posterior": llp.posterior, "I": llp.multiplicative_advantage}))
    sample = pd.concat(frames, ignore_index=True)
    sample["additive_advantage"] = (np.maximum(sample["posterior"], 1 - sample["posterior"])
                                    - np.maximum(sample["prior"], 1 - sample["prior"]))
    return sample


def test_plot_posteriors_writes_three_pngs_per_mechanism(tmp_path):
    written = plots.plot_posteriors(_sample(), output_dir=str(tmp_path / "plots"))
    names = sorted(p.rsplit("/", 1)[-1] for p in written)
    assert names == sorted(f"{kind}_{m}.png" for m in ("llp", "rr")
                           for kind in ("spindle", "cdf_abs_I", "cdf_additive"))
    for path in written:
        content = open(path, "rb").read()
        assert content.startswith(PNG_MAGIC) and len(content) > 5_000, path


def test_leakage_cdf_only_when_the_leakage_was_computed(tmp_path):
    from lia_spark.kernels import leakage

    sample = _sample()
    sample["max_leakage"] = math.nan
    plain = plots.plot_posteriors(sample, output_dir=str(tmp_path / "off"))
    assert not any("max_leakage" in path.rsplit("/", 1)[-1] for path in plain)
    rr = sample["mechanism"] == "rr"
    sample.loc[rr, "max_leakage"] = [leakage.worst_case("rr", epsilon=eps) for eps in sample.loc[rr, "epsilon"]]
    sample.loc[~rr, "max_leakage"] = leakage.worst_case("llp")
    written = plots.plot_posteriors(sample, output_dir=str(tmp_path / "on"))
    names = sorted(name for name in (p.rsplit("/", 1)[-1] for p in written) if "max_leakage" in name)
    assert names == ["cdf_max_leakage_llp.png", "cdf_max_leakage_rr.png"]
    assert all(open(tmp_path / "on" / name, "rb").read().startswith(PNG_MAGIC) for name in names)


def test_unknown_mechanism_is_named_in_the_error(tmp_path):
    with pytest.raises(ValueError, match="llp_laplace"):
        plots.spindle_plot(_sample(), mechanism="llp_laplace", path=str(tmp_path / "x.png"))
    with pytest.raises(ValueError, match="llp_geometric"):
        plots.cdf_plot(_sample(), mechanism="llp_geometric", column="I", xlabel="|I|", path=str(tmp_path / "y.png"))
