"""Model features of Criteo rows and the per-day train/validation/test split (pure numpy/pandas).

- Integers I1..I13: log1p(max(I, 0)) (missing stays NaN, which both libraries route natively) plus a
  0/1 missing flag per column.
- Categoricals C1..C26 (32-bit hash values):
  * ``native`` (CatBoost): the raw value as int64, -1 for missing; CatBoost learns ordered target stats.
  * ``frequency`` (XGBoost): id = frequency rank of the value among the values seen at least
    ``min_count`` times in the training rows (at most ``hash_buckets`` per column, 0 = most frequent);
    unseen/rare values share the id n_frequent; missing is NaN.
  * ``hash`` (XGBoost): id = hash(column, value) mod hash_buckets; missing is NaN.
- Split: u = uniform(seed, "model-split", row_id); train if u < s_train, validation if u < s_train +
  s_valid, else test (80/4/16 by default), independent of partitioning.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping

import numpy as np
import pandas as pd

from lia_spark.kernels import hashing
from lia_spark.kernels.criteo import CAT_COLUMNS, INT_COLUMNS
from lia_spark.names import LABEL, ROW_ID, SPLIT

ENCODINGS = ("frequency", "hash", "native")
SPLIT_COLUMN = SPLIT
PURPOSE_SPLIT = "model-split"
PURPOSE_DAY_SAMPLE = "model-day-sample"
ENCODING_SUFFIX = ".encoding.npz"  # beside each model file: the encoding its raw input rows need (save_spec)
LOG_COLUMNS = tuple(f"log_{name}" for name in INT_COLUMNS)
FLAG_COLUMNS = tuple(f"missing_{name}" for name in INT_COLUMNS)


@dataclasses.dataclass(frozen=True)
class CategoryVocabulary:
    """Frequent values per categorical column, sorted by value, with their frequency-rank ids."""

    values: Mapping[str, np.ndarray]
    ranks: Mapping[str, np.ndarray]

    def size(self, column: str) -> int:
        """Number of frequent values of ``column`` (the shared id of rare values)."""
        return int(self.values[column].size)


@dataclasses.dataclass(frozen=True)
class FeatureSpec:
    """How categoricals are encoded; ``vocabulary`` is required for the frequency encoding."""

    encoding: str = "frequency"
    hash_buckets: int = 1 << 18
    vocabulary: CategoryVocabulary | None = None

    def __post_init__(self) -> None:
        if self.encoding not in ENCODINGS:
            raise ValueError(f"encoding must be one of {ENCODINGS}, got {self.encoding!r}")
        if self.hash_buckets < 2:
            raise ValueError(f"hash_buckets must be >= 2, got {self.hash_buckets}")
        if self.encoding == "frequency" and self.vocabulary is None:
            raise ValueError("encoding 'frequency' needs a vocabulary learned on the training rows, got None")

    @property
    def feature_columns(self) -> list[str]:
        """Model input columns in order."""
        return list(LOG_COLUMNS + FLAG_COLUMNS + CAT_COLUMNS)

    @property
    def cat_features(self) -> list[str]:
        """Columns CatBoost treats as categorical (native encoding only)."""
        return list(CAT_COLUMNS) if self.encoding == "native" else []


def vocabulary_from_counts(counts: Mapping[str, tuple[np.ndarray, np.ndarray]], *, min_count: int,
                           max_size: int) -> CategoryVocabulary:
    """Keep values with count >= min_count, at most max_size per column, ranked by count (ties: value).

    Args:
        counts: column -> (distinct values, their counts in the training rows).
        min_count: frequency threshold (>= 1).
        max_size: cap on frequent values per column (the bounded id space).
    """
    if min_count < 1 or max_size < 1:
        raise ValueError(f"min_count and max_size must be >= 1, got min_count={min_count}, max_size={max_size}")
    values, ranks = {}, {}
    for column in CAT_COLUMNS:
        column_values, column_counts = (np.asarray(a, np.int64) for a in counts.get(column, ((), ())))
        keep = column_counts >= min_count
        column_values, column_counts = column_values[keep], column_counts[keep]
        order = np.lexsort((column_values, -column_counts))[:max_size]
        by_value = np.argsort(column_values[order], kind="stable")
        values[column] = column_values[order][by_value]
        ranks[column] = np.arange(order.size, dtype=np.int64)[by_value]
    return CategoryVocabulary(values, ranks)


def in_day_sample(row_ids: np.ndarray, *, seed: int, share: float) -> np.ndarray:
    """True for the rows of the seeded per-day training sample: uniform(seed, 'model-day-sample', row_id) < share.

    Each row is in with probability ``share``, independently of the others and of the partitioning.
    """
    return hashing.uniform(seed, PURPOSE_DAY_SAMPLE, row_ids) < share


def split_codes(row_ids: np.ndarray, *, seed: int, shares: tuple[float, float, float]) -> np.ndarray:
    """0 = train, 1 = validation, 2 = test by thresholds on uniform(seed, 'model-split', row_id)."""
    u = hashing.uniform(seed, PURPOSE_SPLIT, row_ids)
    return (u >= shares[0]).astype(np.int8) + (u >= shares[0] + shares[1]).astype(np.int8)


def _text_as_missing(values: pd.Series) -> pd.Series:
    """Text columns (as Criteo files hold them) with "" read as missing, like None and NaN."""
    if values.dtype != object and not pd.api.types.is_string_dtype(values):
        return values
    return values.astype(object).where(values.astype(object) != "", None)


def categorical_values(values: pd.Series, column: str) -> pd.Series:
    """A categorical column as the data table stores it (int64 ids, missing as NA): numbers as they are, text as
    Criteo files write it (hexadecimal, e.g. "68fd1e64"; "" missing).

    Raises:
        ValueError: naming the column and the first value that is neither a number nor hexadecimal text.
    """
    values = _text_as_missing(values)
    if values.dtype != object and not pd.api.types.is_string_dtype(values):
        return values

    def parsed(value: Any) -> Any:
        if value is None or (isinstance(value, float) and np.isnan(value)) or value is pd.NA:
            return pd.NA
        if isinstance(value, str):
            try:
                return int(value, 16)
            except ValueError:
                raise ValueError(f"{column}: not a hexadecimal Criteo value, got {value!r}") from None
        return int(value)

    return values.map(parsed).astype("Int64")


def _encode_column(values: pd.Series, column: str, spec: FeatureSpec) -> np.ndarray:
    values = categorical_values(values, column)
    missing = values.isna().to_numpy()
    raw = values.fillna(0).to_numpy(dtype=np.int64)
    if spec.encoding == "native":
        return np.where(missing, -1, raw)
    if spec.encoding == "hash":
        ids = (hashing.hash_bits(0, f"features/{column}", raw) % np.uint64(spec.hash_buckets)).astype(np.float32)
    elif spec.vocabulary is None:
        raise ValueError("the frequency encoding has a vocabulary (FeatureSpec requires one)")
    else:
        known, ranks = spec.vocabulary.values[column], spec.vocabulary.ranks[column]
        if known.size == 0:
            ids = np.zeros(raw.shape, np.float32)
        else:
            position = np.minimum(np.searchsorted(known, raw), known.size - 1)
            ids = np.where(known[position] == raw, ranks[position], known.size).astype(np.float32)
    return np.where(missing, np.float32(np.nan), ids)


def encode_features(frame: pd.DataFrame, spec: FeatureSpec) -> pd.DataFrame:
    """The model feature columns (:attr:`FeatureSpec.feature_columns`, in order) of rows with the raw Criteo columns
    I1..I13 and C1..C26: numbers (int64 or double) or text as in Criteo files (hexadecimal categoricals), missing as
    NaN, None or ""."""
    out = {}
    for name, log_name, flag_name in zip(INT_COLUMNS, LOG_COLUMNS, FLAG_COLUMNS):
        ints = pd.to_numeric(_text_as_missing(frame[name])).astype("float64").to_numpy(np.float64, na_value=np.nan)
        out[log_name] = np.log1p(np.maximum(ints, 0.0)).astype(np.float32)
        out[flag_name] = np.isnan(ints).astype(np.float32)
    for name in CAT_COLUMNS:
        out[name] = _encode_column(frame[name], name, spec)
    return pd.DataFrame(out, index=frame.index)[spec.feature_columns]


def build_features(frame: pd.DataFrame, spec: FeatureSpec, *, seed: int,
                   shares: tuple[float, float, float]) -> pd.DataFrame:
    """Rows of the storage schema -> row_id, label, split and the model feature columns."""
    keys = pd.DataFrame({ROW_ID: frame[ROW_ID].to_numpy(np.int64), LABEL: frame[LABEL].to_numpy(np.int32),
                         SPLIT_COLUMN: split_codes(frame[ROW_ID].to_numpy(np.int64), seed=seed,
                                                   shares=shares).astype(np.int32)}, index=frame.index)
    return pd.concat([keys, encode_features(frame, spec)], axis=1).reset_index(drop=True)


def encoding_file(model_file: str) -> str:
    """Where the feature encoding of a model file is saved: ``<folder>/<model name>.encoding.npz``."""
    folder, name = os.path.split(model_file)
    return os.path.join(folder, f"{name.split('.')[0]}{ENCODING_SUFFIX}")


def save_spec(spec: FeatureSpec, path: str) -> str:
    """Write ``spec`` (encoding, hash buckets and any vocabulary) as a compressed ``.npz`` file; return ``path``."""
    arrays = {"encoding": np.array(spec.encoding), "hash_buckets": np.array(spec.hash_buckets, np.int64)}
    if spec.vocabulary is not None:
        for column in CAT_COLUMNS:
            arrays[f"values/{column}"] = spec.vocabulary.values[column]
            arrays[f"ranks/{column}"] = spec.vocabulary.ranks[column]
    with open(path, "wb") as handle:
        np.savez_compressed(handle, **arrays)  # type: ignore[arg-type]  # no array is named allow_pickle
    return path


def load_spec(path: str) -> FeatureSpec:
    """The :class:`FeatureSpec` written by :func:`save_spec`."""
    with np.load(path, allow_pickle=False) as stored:
        vocabulary = None
        if "values/C1" in stored.files:
            vocabulary = CategoryVocabulary({c: stored[f"values/{c}"] for c in CAT_COLUMNS},
                                            {c: stored[f"ranks/{c}"] for c in CAT_COLUMNS})
        return FeatureSpec(encoding=str(stored["encoding"]), hash_buckets=int(stored["hash_buckets"]),
                           vocabulary=vocabulary)
