"""The posteriors stage's computation without Spark (lia_spark.kernels.posterior_grid):
grid, key order, chunks, digests.

Reference values: releases and posteriors from the pure kernels
(lia_spark.kernels.mechanisms, lia_spark.kernels.posteriors)
called directly on the same bags; exact equality (the same float64 code on the same arrays).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from lia_spark.kernels import advantage, leakage, mechanisms, posteriors
from lia_spark.kernels.criteo import make_row_id
from lia_spark.kernels.posterior_grid import (DigestAccumulator, Setting, UnitChunk, chunk_posteriors, key_order,
                                              plot_sample_mask, rows_per_call, setting_seed, settings_grid, unit_chunks)
from lia_spark.run.sections import MechanismsConfig

SEED = 20261122


def test_settings_grid_names_and_chunk_rows():
    grid = settings_grid(MechanismsConfig(names=("rr", "llp", "llp_geometric"), epsilons=(1.0, 0.5), bag_sizes=(8,)))
    assert [s.name for s in grid] == ["rr.eps1.k1", "rr.eps0.5.k1", "llp.epsinf.k8", "llp_geometric.eps1.k8",
                                      "llp_geometric.eps0.5.k8"]
    assert [s.stream_label for s in grid] == ["rr_eps1", "rr_eps0.5", "llp_k8", "llp_geometric_eps1_k8",
                                              "llp_geometric_eps0.5_k8"]  # noise seeds unchanged
    assert rows_per_call([1, 8, 64], settings=4) == 65_536 and rows_per_call([3, 8], bags_per_group=10) == 72


def test_key_order_breaks_collisions_by_row_id_then_side():
    """Equal 64-bit keys (forced here; real collisions are rare) are ordered by row id, data row first."""
    keys = np.array([5, 9, 5, 5, 2, 5, 2])
    ids = np.array([8, 1, 3, 8, 4, 3, 4])
    is_prior = np.array([True, False, False, False, True, True, False])
    order = key_order(keys, ids, is_prior)
    assert list(zip(keys[order], ids[order], is_prior[order])) == [
        (2, 4, False), (2, 4, True), (5, 3, False), (5, 3, True), (5, 8, False), (5, 8, True), (9, 1, False)]
    pairs = key_order(keys[[0, 3, 4, 6]], ids[[0, 3, 4, 6]], is_prior[[0, 3, 4, 6]])  # runs of two only
    assert list(zip(ids[[0, 3, 4, 6]][pairs], is_prior[[0, 3, 4, 6]][pairs])) == [(4, False), (4, True), (8, False),
                                                                                   (8, True)]


def test_unit_chunks_hold_whole_bags_and_positions():
    units = [(0, {"row_id": np.arange(100)}), (1, {"row_id": np.arange(100, 137)}),
             (3, {"row_id": np.arange(137, 201)})]
    chunks = list(unit_chunks(iter(units), chunk_rows=32))
    assert [(u, first, len(rows["row_id"])) for u, first, rows in chunks] == [
        (0, 0, 32), (0, 32, 32), (0, 64, 32), (0, 96, 4), (1, 0, 32), (1, 32, 5), (3, 0, 32), (3, 32, 32)]
    assert np.concatenate([chunk.rows["row_id"] for chunk in chunks]).tolist() == list(range(201))


def test_plot_sample_mask_keeps_the_fraction_on_hashed_ids():
    ids = make_row_id(np.ones(200_000, dtype=np.int32), np.arange(200_000))
    kept = plot_sample_mask(ids, fraction=0.01, seed=SEED)
    assert abs(kept.mean() - 0.01) < 5 * math.sqrt(0.01 * 0.99 / ids.size)
    assert plot_sample_mask(ids, fraction=1.0, seed=SEED).all()
    np.testing.assert_array_equal(kept, plot_sample_mask(ids[::-1], fraction=0.01, seed=SEED)[::-1])
    with pytest.raises(ValueError, match="fraction: must be in"):
        plot_sample_mask(ids, fraction=0.0, seed=SEED)


def test_chunk_posteriors_equal_the_kernels_on_the_chunks_bags():
    """One chunk of unit 5 at position 40: bags of every size by position, each setting as the kernels give it."""
    rng = np.random.default_rng(11)
    n, first = 24, 40
    rows = {"row_id": rng.choice(1 << 40, n, replace=False).astype(np.int64),
            "label": rng.integers(0, 2, n).astype(np.int32), "prior": rng.uniform(0.05, 0.95, n)}
    settings = [Setting("rr", 1.0, 1), Setting("llp", math.nan, 8), Setting("llp_laplace", 2.0, 8),
                Setting("llp_geometric", 1.0, 4)]
    chunk = UnitChunk(5, first, rows)
    computed = {result.setting: result.columns for result in chunk_posteriors(chunk, settings, SEED)}
    assert list(computed) == [settings[3], settings[1], settings[2], settings[0]]  # bag sizes ascending, RR last
    for setting in settings[1:]:
        k = setting.bag_size
        bag_ids = mechanisms.unit_bag_ids(np.full(n, 5), first + np.arange(n), bag_size=k)
        sizes = np.full(n // k, k)
        sums = mechanisms.bag_sums(rows["label"], sizes)
        release = mechanisms.BAG_RELEASES[setting.mechanism](sums, sizes, np.unique(bag_ids), epsilon=setting.epsilon,
                                                             seed=setting_seed(SEED, setting))
        expected = posteriors.BAG_POSTERIORS[setting.mechanism](rows["prior"], sizes, release.observed,
                                                                epsilon=setting.epsilon)
        columns = computed[setting]
        np.testing.assert_array_equal(columns["bag_id"], bag_ids)
        np.testing.assert_array_equal(columns["released"], np.repeat(release.proportion, k))
        np.testing.assert_array_equal(columns["posterior"], expected.posterior)
        np.testing.assert_array_equal(columns["I"], expected.multiplicative_advantage)
    rr = computed[settings[0]]
    released = mechanisms.rr_release(rows["label"], rows["row_id"], epsilon=1.0, seed=setting_seed(SEED, settings[0]))
    assert rr["bag_id"] is None
    np.testing.assert_array_equal(rr["released"], released)
    np.testing.assert_array_equal(rr["I"], np.where(released == 1, 1.0, -1.0))
    np.testing.assert_array_equal(rr["additive_advantage"],
                                  advantage.additive_advantage(rr["posterior"], rows["prior"]))


def test_max_leakage_of_each_row_is_the_kernels_on_its_bag_and_summed_in_the_digest():
    """With max_leakage, each row's value is lia_spark.kernels.leakage on the chunk's bags
    (RR: the worst case); without,
    NaN; the digest sums it per bin."""
    rng = np.random.default_rng(3)
    n = 32
    rows = {"row_id": np.arange(n, dtype=np.int64), "label": rng.integers(0, 2, n).astype(np.int32),
            "prior": rng.uniform(0.05, 0.95, n)}
    settings = [Setting("rr", 2.0, 1), Setting("llp", math.nan, 8), Setting("llp_geometric", 1.0, 4)]
    chunk = UnitChunk(0, 0, rows)
    computed = {r.setting: r.columns for r in chunk_posteriors(chunk, settings, SEED, max_leakage=True)}
    for setting in settings[1:]:
        sizes = np.full(n // setting.bag_size, setting.bag_size)
        eps = math.inf if math.isnan(setting.epsilon) else setting.epsilon
        np.testing.assert_array_equal(computed[setting]["max_leakage"],
                                      leakage.per_row_bags(setting.mechanism, rows["prior"], sizes, epsilon=eps))
    np.testing.assert_allclose(computed[settings[0]]["max_leakage"], leakage.worst_case("rr", epsilon=2.0))
    assert all(np.isnan(r.columns["max_leakage"]).all() for r in chunk_posteriors(chunk, settings, SEED))
    digests = DigestAccumulator()
    list(digests.posteriors(chunk, settings, SEED, max_leakage=True))
    for setting, digest in digests.digests():
        assert digest["leakage"].sum() == pytest.approx(computed[setting]["max_leakage"].sum(), rel=1e-12)


def test_digest_accumulator_counts_unit_rows_and_merges_settings():
    rng = np.random.default_rng(2)
    settings = [Setting("llp", math.nan, 4)]
    digests = DigestAccumulator()
    units = [(0, 10), (3, 7)]
    for unit, size in units:
        rows = {"row_id": np.arange(size) + 100 * unit, "label": rng.integers(0, 2, size).astype(np.int32),
                "prior": rng.uniform(0.1, 0.9, size)}
        for chunk in unit_chunks(iter([(unit, rows)]), chunk_rows=4):
            list(digests.posteriors(chunk, settings, SEED))
    (setting, digest), = digests.digests()
    assert setting == settings[0] and int(digest["rows"].sum()) == 17
    unit_digest = digests.unit_digest()
    assert unit_digest["bin"].tolist() == [0, 3] and unit_digest["rows"].tolist() == [10, 7]
    assert DigestAccumulator().unit_digest() is None
