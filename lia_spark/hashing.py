"""Counter-based randomness: every random draw is a pure function of (seed, purpose, row_id, counter).

No state is carried between rows, so results never depend on partitioning, executor count or task
retries. The mixer is the SplitMix64 finalizer (Steele, Lea, Flood 2014), a bijection on 64-bit words
with full avalanche; a draw is

    h = mix(mix(row_id XOR key(seed, purpose)) + counter * GOLDEN),   u = (h >> 11 + 0.5) / 2^53

so u lies strictly inside (0, 1) and takes 2^53 equally spaced values.
"""
from __future__ import annotations

import hashlib

import numpy as np
from scipy.special import ndtri

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MUL1 = np.uint64(0xBF58476D1CE4E5B9)
_MUL2 = np.uint64(0x94D049BB133111EB)
_TWO_POW_MINUS_53 = 1.0 / float(1 << 53)


def mix64(words: np.ndarray) -> np.ndarray:
    """SplitMix64 finalizer applied elementwise to uint64 words (wrapping arithmetic)."""
    z = np.asarray(words, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * _MUL1
        z = (z ^ (z >> np.uint64(27))) * _MUL2
    return z ^ (z >> np.uint64(31))


def stream_key(seed: int, purpose: str) -> np.uint64:
    """64-bit key of one random stream: the seed mixed with a stable digest of the purpose name."""
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
        raise TypeError(f"seed must be an integer, got seed={seed!r}")
    digest = int.from_bytes(hashlib.blake2b(purpose.encode("utf-8"), digest_size=8).digest(), "little")
    seed_word = mix64(np.array([int(seed) & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64))[0]
    return mix64(np.array([int(seed_word) ^ digest], dtype=np.uint64))[0]


def hash_bits(seed: int, purpose: str, row_ids: np.ndarray, counter: int = 0) -> np.ndarray:
    """Uniform 64-bit words, one per row id, for draw number ``counter`` of the stream (seed, purpose)."""
    ids = np.asarray(row_ids).astype(np.int64, copy=False).view(np.uint64)
    with np.errstate(over="ignore"):
        offset = np.uint64(counter) * _GOLDEN
        return mix64(mix64(ids ^ stream_key(seed, purpose)) + offset)


def uniform(seed: int, purpose: str, row_ids: np.ndarray, counter: int = 0) -> np.ndarray:
    """Uniform(0, 1) doubles, strictly inside the interval: u = (top 53 bits + 1/2) / 2^53."""
    bits = hash_bits(seed, purpose, row_ids, counter) >> np.uint64(11)
    return (bits.astype(np.float64) + 0.5) * _TWO_POW_MINUS_53


def standard_normal(seed: int, purpose: str, row_ids: np.ndarray, counter: int = 0) -> np.ndarray:
    """Standard normal draws by inversion, Phi^{-1}(u); finite because u never reaches 0 or 1."""
    return ndtri(uniform(seed, purpose, row_ids, counter))


def bernoulli(seed: int, purpose: str, row_ids: np.ndarray, probability, counter: int = 0) -> np.ndarray:
    """Bernoulli(p) draws as int8: 1{u < p}, p broadcast against the row ids."""
    return (uniform(seed, purpose, row_ids, counter) < np.asarray(probability)).astype(np.int8)
