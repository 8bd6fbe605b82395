"""The posteriors stage's computation without Spark: a grid of settings run on chunks of whole bags.

Pure numpy (docs/math.md §2 and 3). A *setting* is one mechanism with its epsilon and bag size. The rows of one bagging
unit are sorted by (bagging key, row_id) (the random order of :func:`lia_spark.kernels.mechanisms.assign_bags`); the row
at position p of unit u is in bag ``u * 2^40 + p div k`` for every k, so a chunk cut at a multiple of lcm(k)
holds whole bags of every size and every setting runs vectorized on it (:func:`chunk_posteriors`). Noise is
keyed on (setting seed, bag id or row id), the setting seed on (run seed, setting label): nothing depends on
how the rows reach a chunk. :class:`DigestAccumulator` keeps per setting a histogram digest of |I|
(:func:`lia_spark.kernels.advantage.bin_digest`) from which the summaries are exact.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Iterator, NamedTuple, Protocol, Sequence, TypedDict

import numpy as np

from lia_spark.kernels import advantage, hashing, leakage, mechanisms, posteriors
from lia_spark.kernels.release_mechanisms import ReleaseMechanism, release_mechanism
from lia_spark.names import setting_key

ROWS_PER_CALL = 65_536  # input rows per chunk, at most ...
OUTPUT_ROWS_PER_CALL = 1 << 19  # ... and about this many output rows (input rows x settings)
PLOT_SAMPLE_PURPOSE = "posteriors:plot_sample"


@dataclasses.dataclass(frozen=True)
class Setting:
    """One cell of the grid: a mechanism with its epsilon (NaN for plain LLP) and bag size (1 for RR)."""

    mechanism: str
    epsilon: float
    bag_size: int

    @property
    def release(self) -> ReleaseMechanism:
        """Its release mechanism (:mod:`lia_spark.kernels.release_mechanisms`)."""
        return release_mechanism(self.mechanism)

    @property
    def noise_epsilon(self) -> float:
        """The epsilon as the leakage kernels take it: plain LLP (epsilon NaN) adds no noise, inf."""
        return math.inf if math.isnan(self.epsilon) else self.epsilon

    @property
    def name(self) -> str:
        """The setting's key, e.g. ``llp_laplace.eps1.k8`` (:func:`lia_spark.names.setting_key`)."""
        return setting_key(self.mechanism, self.epsilon, self.bag_size)

    @property
    def stream_label(self) -> str:
        """The text its noise seed is keyed on, e.g. ``llp_laplace_eps1_k8``: fixed, so a seed's releases stay the
        same across versions (never shown)."""
        parts = [self.mechanism]
        if not math.isnan(self.epsilon):
            parts.append(f"eps{self.epsilon:g}")
        if self.release.bagged:
            parts.append(f"k{self.bag_size}")
        return "_".join(parts)


class GridSection(Protocol):
    """The fields of the mechanisms section the grid reads (:class:`lia_spark.run.sections.MechanismsConfig`)."""

    @property
    def names(self) -> tuple[str, ...]: ...

    @property
    def epsilons(self) -> tuple[float, ...]: ...

    @property
    def bag_sizes(self) -> tuple[int, ...]: ...


def settings_grid(config: GridSection) -> list[Setting]:
    """The grid names x epsilons x bag sizes: RR uses only epsilon, LLP only k, noisy LLP both (each release
    mechanism's :meth:`~lia_spark.kernels.release_mechanisms.ReleaseMechanism.epsilons` and ``bag_sizes``)."""
    grid: list[Setting] = []
    for mechanism in config.names:
        release = release_mechanism(mechanism)
        grid.extend(Setting(mechanism, eps, k) for k in release.bag_sizes(config.bag_sizes)
                    for eps in release.epsilons(config.epsilons))
    return grid


def setting_seed(seed: int, setting: Setting) -> int:
    """Seed of one setting's noise: the run seed mixed with the setting's name (63 bits)."""
    return int(hashing.stream_key(seed, f"posteriors/{setting.stream_label}")) >> 1


def rows_per_call(bag_sizes: Sequence[int], *, settings: int = 1, bags_per_group: int = 0) -> int:
    """Input rows per chunk: a multiple of every bag size (so each chunk holds whole bags of every size)
    near ``bags_per_group`` x max(k), or when that is 0 near min(65536, 2^19 / settings)."""
    unit = math.lcm(*bag_sizes)
    target = bags_per_group * max(bag_sizes) if bags_per_group else min(ROWS_PER_CALL, OUTPUT_ROWS_PER_CALL // settings)
    return unit * max(1, round(target / unit))


def key_order(keys: np.ndarray, row_ids: np.ndarray, is_prior: np.ndarray) -> np.ndarray:
    """Permutation sorting rows by (key, row_id, data row before prior row). A run of equal keys is one row
    id's two sides, unless 64-bit keys collide or a row id repeats (then a full lexicographic sort)."""
    order = np.argsort(keys)
    ordered = keys[order]
    if (ordered[2:] == ordered[:-2]).any():
        return np.lexsort((is_prior, row_ids, keys))
    first = np.flatnonzero(ordered[1:] == ordered[:-1])  # runs of two: put them in (row_id, side) order
    left, right = order[first], order[first + 1]
    swap = (row_ids[left] > row_ids[right]) | ((row_ids[left] == row_ids[right]) & is_prior[left] & ~is_prior[right])
    order[first[swap]], order[first[swap] + 1] = right[swap], left[swap]
    return order


def paired_units(row_ids: np.ndarray, values: np.ndarray, *, seed: int, unit_bits: int
                 ) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    """(unit, rows (row_id, label, prior) in the order (key, row_id)) for each bagging unit among side rows
    (row_id, value): a data row carries -1 - label, a prior row its prior in [0, 1]. Each data row is paired
    with its prior row; data rows without a prior are left out (and prior rows without data).

    Raises:
        ValueError: naming a row id that appears twice among the data rows or among the prior rows.
    """
    keys = mechanisms.bagging_keys(row_ids, seed=seed)
    is_prior = values >= 0.0
    order = key_order(keys, row_ids, is_prior)
    row_ids, values, keys, is_prior = row_ids[order], values[order], keys[order], is_prior[order]
    same = row_ids[1:] == row_ids[:-1]
    repeated = same & (is_prior[1:] == is_prior[:-1])
    if repeated.any():
        raise ValueError(f"row_id: {int(row_ids[1:][repeated][0])} appears more than once in the data rows or "
                         f"the prior rows")
    data_at = np.flatnonzero(same)  # the data row; its prior row follows
    units = mechanisms.bagging_units(keys[data_at], unit_bits=unit_bits)
    starts = np.flatnonzero(np.r_[True, units[1:] != units[:-1]]) if units.size else units
    for start, end in zip(starts, np.r_[starts[1:], units.size]):
        at = data_at[start:end]
        yield int(units[start]), {"row_id": row_ids[at], "label": (-1.0 - values[at]).astype(np.int32),
                                  "prior": values[at + 1]}


class UnitChunk(NamedTuple):
    """Rows (row_id, label, prior) at positions ``first_position``.. inside bagging unit ``unit``."""

    unit: int
    first_position: int
    rows: dict[str, np.ndarray]


def unit_chunks(units: Iterator[tuple[int, dict[str, np.ndarray]]], *, chunk_rows: int) -> Iterator[UnitChunk]:
    """Chunks of ``chunk_rows`` rows (a multiple of every bag size) or the rest of a unit, so every chunk holds
    whole bags (a unit's last bag may be short)."""
    for unit, rows in units:
        for start in range(0, rows["row_id"].size, chunk_rows):
            yield UnitChunk(unit, start, {name: values[start:start + chunk_rows] for name, values in rows.items()})


class SettingColumns(TypedDict):
    """The columns of one setting's per-row results besides the setting key (``bag_id`` None for RR)."""

    row_id: np.ndarray
    bag_id: np.ndarray | None
    prior: np.ndarray
    label: np.ndarray
    released: np.ndarray
    posterior: np.ndarray
    I: np.ndarray
    additive_advantage: np.ndarray
    realized_advantage: np.ndarray
    max_leakage: np.ndarray


class SettingRows(NamedTuple):
    """One setting's per-row results on a chunk."""

    setting: Setting
    columns: SettingColumns


def _setting_rows(setting: Setting, rows: dict[str, np.ndarray], bag_ids: np.ndarray | None, released: np.ndarray,
                  result: posteriors.Posteriors, max_leakage: np.ndarray | None) -> SettingRows:
    """Posteriors plus the additive and realized advantages (and the maximal leakage, NaN when not computed) of
    one setting on one chunk."""
    prior, label = rows["prior"], rows["label"]
    return SettingRows(setting, {
        "row_id": rows["row_id"], "bag_id": bag_ids, "prior": prior, "label": label.astype(np.int32, copy=False),
        "released": np.asarray(released, dtype=np.float64), "posterior": result.posterior,
        "I": result.multiplicative_advantage,
        "additive_advantage": advantage.additive_advantage(result.posterior, prior),
        "realized_advantage": advantage.realized_advantage(result.posterior, prior, label),
        "max_leakage": np.full(prior.size, np.nan) if max_leakage is None else max_leakage})


def chunk_posteriors(chunk: UnitChunk, settings: Sequence[Setting], seed: int, *,
                     max_leakage: bool = False) -> Iterator[SettingRows]:
    """Every setting on one chunk (whole bags of every bagged size): bag of a row =
    :func:`lia_spark.kernels.mechanisms.unit_bag_ids`; bag mechanisms release through
    :data:`lia_spark.kernels.mechanisms.BAG_RELEASES` and are inverted by
    :data:`lia_spark.kernels.posteriors.BAG_POSTERIORS`, a release per row (RR) by :func:`~lia_spark.kernels.
    mechanisms.rr_release` and :func:`~lia_spark.kernels.posteriors.rr`.
    With ``max_leakage`` each row also gets its pointwise maximal leakage given the priors of its bag
    (:func:`lia_spark.kernels.leakage.per_row_bags`, docs/math.md §7; it depends on the bags, not on the release)."""
    rows = chunk.rows
    labels, priors = rows["label"].astype(np.int64), rows["prior"]
    positions = chunk.first_position + np.arange(labels.size, dtype=np.int64)
    for k in sorted({s.bag_size for s in settings if s.release.bagged}):
        row_bags = mechanisms.unit_bag_ids(np.full(labels.size, chunk.unit), positions, bag_size=k)
        bag_ids, bag_sizes = np.unique(row_bags, return_counts=True)
        sums = mechanisms.bag_sums(labels, bag_sizes)
        for setting in (s for s in settings if s.bag_size == k and s.release.bagged):
            eps = setting.epsilon
            release = mechanisms.BAG_RELEASES[setting.mechanism](sums, bag_sizes, bag_ids, epsilon=eps,
                                                                 seed=setting_seed(seed, setting))
            result = posteriors.BAG_POSTERIORS[setting.mechanism](priors, bag_sizes, release.observed, epsilon=eps)
            leaked = (leakage.per_row_bags(setting.mechanism, priors, bag_sizes, epsilon=setting.noise_epsilon)
                      if max_leakage else None)
            yield _setting_rows(setting, rows, row_bags, np.repeat(release.proportion, bag_sizes), result, leaked)
    for setting in (s for s in settings if not s.release.bagged):
        released = mechanisms.rr_release(labels, rows["row_id"], epsilon=setting.epsilon,
                                         seed=setting_seed(seed, setting))
        leaked = (np.full(labels.size, leakage.worst_case(setting.mechanism, epsilon=setting.epsilon))
                  if max_leakage else None)
        yield _setting_rows(setting, rows, None, released, posteriors.rr(priors, released, epsilon=setting.epsilon),
                            leaked)


class DigestAccumulator:
    """Per-setting histogram digests of |I| (:func:`lia_spark.kernels.advantage.bin_digest`), merged as they pile up so
    memory stays bounded by settings x occupied bins, and the rows per bagging unit."""

    MERGE_EVERY = 64

    def __init__(self) -> None:
        self.parts: dict[str, tuple[Setting, list[dict[str, np.ndarray]]]] = {}  # by name: NaN epsilons
        self.unit_rows: dict[int, int] = {}

    def posteriors(self, chunk: UnitChunk, settings: Sequence[Setting], seed: int, *,
                   max_leakage: bool = False) -> Iterator[SettingRows]:
        """:func:`chunk_posteriors` of one chunk, each setting's rows added to its digest; the unit's rows counted."""
        self.unit_rows[chunk.unit] = chunk.first_position + chunk.rows["row_id"].size
        for computed in chunk_posteriors(chunk, settings, seed, max_leakage=max_leakage):
            self.add(computed)
            yield computed

    def add(self, computed: SettingRows) -> None:
        """Add one setting's rows to its digest."""
        _, parts = self.parts.setdefault(computed.setting.name, (computed.setting, []))
        columns = computed.columns
        parts.append(advantage.bin_digest(np.abs(columns["I"]), columns["additive_advantage"],
                                          columns["realized_advantage"], columns["max_leakage"]))
        if len(parts) >= self.MERGE_EVERY:
            parts[:] = [advantage.merge_bin_digests(parts)]

    def digests(self) -> Iterator[tuple[Setting, dict[str, np.ndarray]]]:
        """(setting, its merged digest) per setting seen."""
        for setting, parts in self.parts.values():
            yield setting, advantage.merge_bin_digests(parts)

    def unit_digest(self) -> dict[str, np.ndarray] | None:
        """The rows per bagging unit as a digest (``bin`` = unit, ``rows``; zero sums), None before any chunk."""
        if not self.unit_rows:
            return None
        units = np.fromiter(self.unit_rows, np.int64, len(self.unit_rows))
        sizes = {"bin": units, "rows": np.fromiter(self.unit_rows.values(), np.int64, len(self.unit_rows))}
        return {**{name: np.zeros(units.size) for name in advantage.DIGEST_FIELDS}, **sizes}


def plot_sample_threshold(fraction: float) -> int | None:
    """The signed hash bound of the plot sample (signed hash < threshold <=> unsigned < fraction x 2^64), None
    when every row is kept."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction: must be in (0, 1], got {fraction!r}")
    threshold = math.floor(fraction * 2.0 ** 64) - 2 ** 63
    return None if threshold >= 2 ** 63 else threshold


def plot_sample_mask(row_ids: np.ndarray, *, fraction: float, seed: int) -> np.ndarray:
    """Rows kept for the plots, the same rows in every setting: the row's hash xxhash64(stream, row_id)
    (:func:`lia_spark.kernels.hashing.spark_row_hash`), read as unsigned, lies below fraction x 2^64."""
    threshold = plot_sample_threshold(fraction)
    if threshold is None:
        return np.ones(np.shape(row_ids), dtype=bool)
    return hashing.spark_row_hash(seed, PLOT_SAMPLE_PURPOSE, row_ids) < threshold
