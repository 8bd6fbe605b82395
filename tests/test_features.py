"""Model features: integer transforms, categorical encodings, split shares, and the Spark stage equals the kernel."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from pyspark.sql import functions as F

from lia_spark.engine.models import feature_frames
from lia_spark.kernels import features
from lia_spark.kernels.criteo import CAT_COLUMNS, INT_COLUMNS, STORAGE_DDL

SHARES = (0.8, 0.04, 0.16)


def _rows(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frame = {"row_id": np.arange(n, dtype=np.int64) + (1 << 40), "day": np.ones(n, np.int32),
             "label": rng.integers(0, 2, n).astype(np.int32)}
    for name in INT_COLUMNS:
        values = pd.array(rng.integers(-2, 1000, n), dtype="Int64")
        values[rng.random(n) < 0.2] = pd.NA
        frame[name] = values
    for j, name in enumerate(CAT_COLUMNS):
        values = pd.array(rng.zipf(1.5, n) % (5 + 7 * j) * 2654435761 % (1 << 32), dtype="Int64")
        values[rng.random(n) < 0.1] = pd.NA
        frame[name] = values
    return pd.DataFrame(frame)


def test_integer_features_log1p_clip_and_flags():
    frame = _rows(4, 0)
    frame["I2"] = pd.array([-1, None, 0, 7], dtype="Int64")
    out = features.build_features(frame, features.FeatureSpec(encoding="hash"), seed=1, shares=SHARES)
    log_i2 = out["log_I2"].to_numpy()
    assert log_i2[0] == 0.0 and np.isnan(log_i2[1]) and log_i2[2] == 0.0
    assert log_i2[3] == pytest.approx(np.log(8.0), rel=1e-6)
    assert out["missing_I2"].tolist() == [0.0, 1.0, 0.0, 0.0]


def test_frequency_vocabulary_ranks_rare_and_missing():
    counts = {"C1": (np.array([50, 10, 30, 20]), np.array([3, 9, 9, 1]))}
    vocabulary = features.vocabulary_from_counts(counts, min_count=2, max_size=10)
    # Kept: 10 (9), 30 (9), 50 (3); ties broken by value -> ranks 10:0, 30:1, 50:2; 20 is rare.
    assert vocabulary.values["C1"].tolist() == [10, 30, 50] and vocabulary.ranks["C1"].tolist() == [0, 1, 2]
    assert features.vocabulary_from_counts(counts, min_count=2, max_size=2).values["C1"].tolist() == [10, 30]
    frame = _rows(5, 1)
    frame["C1"] = pd.array([30, 20, None, 10, 99], dtype="Int64")
    spec = features.FeatureSpec(encoding="frequency", vocabulary=vocabulary)
    ids = features.build_features(frame, spec, seed=1, shares=SHARES)["C1"].to_numpy()
    assert ids[[0, 1, 3, 4]].tolist() == [1.0, 3.0, 0.0, 3.0] and np.isnan(ids[2])


def test_hash_and_native_encodings():
    frame = _rows(2000, 2)
    hashed = features.build_features(frame, features.FeatureSpec(encoding="hash", hash_buckets=64), seed=1,
                                     shares=SHARES)
    values = hashed[list(CAT_COLUMNS)].to_numpy()
    finite = values[~np.isnan(values)]
    assert finite.min() >= 0 and finite.max() < 64 and np.all(finite == np.floor(finite))
    assert np.array_equal(np.isnan(values), frame[list(CAT_COLUMNS)].isna().to_numpy())
    native = features.build_features(frame, features.FeatureSpec(encoding="native"), seed=1, shares=SHARES)
    assert native["C3"].tolist() == frame["C3"].fillna(-1).astype("int64").tolist()
    with pytest.raises(ValueError, match="vocabulary"):
        features.FeatureSpec(encoding="frequency")


def test_split_shares_and_determinism():
    ids = np.arange(200_000, dtype=np.int64) * 13
    codes = features.split_codes(ids, seed=4, shares=SHARES)
    shares = np.bincount(codes, minlength=3) / ids.size
    np.testing.assert_allclose(shares, SHARES, atol=0.005)  # > 5 binomial standard errors
    np.testing.assert_array_equal(features.split_codes(ids[::-1], seed=4, shares=SHARES), codes[::-1])


def test_day_sample_share_independence_and_determinism():
    ids = np.arange(400_000, dtype=np.int64) * 7 + 3
    chosen = features.in_day_sample(ids, seed=9, share=0.1)
    assert abs(chosen.mean() - 0.1) < 5 * np.sqrt(0.1 * 0.9 / ids.size)
    np.testing.assert_array_equal(features.in_day_sample(ids[::-1], seed=9, share=0.1), chosen[::-1])
    assert not np.array_equal(features.in_day_sample(ids, seed=10, share=0.1), chosen)
    # the split is a separate draw: the sample keeps the split shares
    codes = features.split_codes(ids[chosen], seed=9, shares=SHARES)
    np.testing.assert_allclose(np.bincount(codes, minlength=3) / chosen.sum(), SHARES, atol=0.01)


def test_spark_stage_equals_kernel(spark):
    frame = _rows(3000, 3)
    rows = spark.createDataFrame(frame, STORAGE_DDL).repartition(3)
    train = feature_frames.split_rows(rows, seed=5, shares=SHARES, code=0)
    vocabulary = feature_frames.learn_vocabulary(train, min_count=3, max_size=50)
    local_train = frame[features.split_codes(frame["row_id"].to_numpy(), seed=5, shares=SHARES) == 0]
    counts = {name: np.unique(local_train[name].dropna().to_numpy(np.int64), return_counts=True)
              for name in CAT_COLUMNS}
    expected = features.vocabulary_from_counts(counts, min_count=3, max_size=50)
    assert max(len(v) for v in vocabulary.values.values()) == 50  # the cap binds (applied on the executors)
    for name in CAT_COLUMNS:
        np.testing.assert_array_equal(vocabulary.values[name], expected.values[name])
        np.testing.assert_array_equal(vocabulary.ranks[name], expected.ranks[name])
    spec = features.FeatureSpec(encoding="frequency", vocabulary=vocabulary)
    got = feature_frames.feature_frame(rows, spec, seed=5, shares=SHARES).orderBy(F.col("row_id")).toPandas()
    want = features.build_features(frame, spec, seed=5, shares=SHARES)
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True), check_dtype=False)


def test_categoricals_read_as_criteo_files_write_them_encode_like_the_table():
    """Hexadecimal text ("" missing) and int64 columns give the encoding of the table's values; other text is
    refused naming the column and the value."""
    rng = np.random.default_rng(3)
    table = pd.DataFrame({name: rng.integers(0, 9, 50).astype(float) for name in INT_COLUMNS}
                         | {name: rng.choice([10.0, 4_294_967_295.0, np.nan], 50) for name in CAT_COLUMNS})
    text = pd.DataFrame({name: ["" if v != v else str(int(v)) for v in table[name]] for name in INT_COLUMNS}
                        | {name: ["" if v != v else f"{int(v):08x}" for v in table[name]] for name in CAT_COLUMNS})
    spec = features.FeatureSpec(encoding="hash", hash_buckets=64)
    expected = features.encode_features(table, spec)
    pd.testing.assert_frame_equal(features.encode_features(text, spec), expected)
    pd.testing.assert_frame_equal(features.encode_features(table.astype("Int64"), spec), expected)
    with pytest.raises(ValueError, match=r"^C2: not a hexadecimal Criteo value, got 'zz'"):
        features.categorical_values(pd.Series(["0a", "zz"]), "C2")
