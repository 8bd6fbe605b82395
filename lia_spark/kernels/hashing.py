"""Counter-based randomness: every random draw is a pure function of (seed, purpose, row_id, counter).

No state is carried between rows, so results never depend on partitioning, executor count or task
retries. The mixer is the SplitMix64 finalizer (Steele, Lea, Flood 2014), a bijection on 64-bit words
with full avalanche; a draw is

    h = mix(mix(row_id XOR key(seed, purpose)) + counter * GOLDEN),   u = (h >> 11 + 0.5) / 2^53

so u lies strictly inside (0, 1) and takes 2^53 equally spaced values. The seed is an integer (public: logged with
the run), or an :class:`AuditKey`, 256 secret random bits, whose stream key of a purpose is the keyed BLAKE2b
digest blake2b(purpose, key=K) (64 bits): a pseudorandom function of the purpose, so neither the key nor the
stream of one purpose can be found from the stream of another (docs/math.md §1.3, §5.9).

:func:`xxhash64_long` is XXH64 of one 8-byte word, bit-for-bit Spark's ``xxhash64`` on a long column, so a
key can be computed inside Spark SQL (no Python round trip) and by the kernels alike; :func:`spark_hash_int`
is Spark's Murmur3 ``hash`` of an int, which places rows under hash partitioning.
"""
from __future__ import annotations

import dataclasses
import hashlib
import re
import secrets

import numpy as np
from scipy.special import ndtri

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MUL1 = np.uint64(0xBF58476D1CE4E5B9)
_MUL2 = np.uint64(0x94D049BB133111EB)
_TWO_POW_MINUS_53 = 1.0 / float(1 << 53)
_XXH_PRIME_1 = np.uint64(0x9E3779B185EBCA87)
_XXH_PRIME_2 = np.uint64(0xC2B2AE3D27D4EB4F)
_XXH_PRIME_3 = np.uint64(0x165667B19E3779F9)
_XXH_PRIME_4 = np.uint64(0x85EBCA77C2B2AE63)
_XXH_PRIME_5 = np.uint64(0x27D4EB2F165667C5)
SPARK_HASH_SEED = 42  # the seed Spark's xxhash64(col, ...) starts from


def mix64(words: np.ndarray) -> np.ndarray:
    """SplitMix64 finalizer applied elementwise to uint64 words (wrapping arithmetic)."""
    z = np.asarray(words, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * _MUL1
        z = (z ^ (z >> np.uint64(27))) * _MUL2
    return z ^ (z >> np.uint64(31))


AUDIT_KEY_BYTES = 32  # 256 bits
_IDENTIFIER_PURPOSE = b"lia-spark/audit-key/identifier"


@dataclasses.dataclass(frozen=True, repr=False)
class AuditKey:
    """The audit's secret: ``AUDIT_KEY_BYTES`` random bytes keying the draws the attacker guesses (the injected
    canaries' coins and counterfactuals, the shadows' and extra runs' coins, the training mechanism's randomness).
    Its repr shows only :attr:`identifier`, so no log line, traceback or query plan that prints it reveals it.

    Raises:
        ValueError: unless ``secret`` is exactly ``AUDIT_KEY_BYTES`` bytes.
    """

    secret: bytes

    def __post_init__(self) -> None:
        if not isinstance(self.secret, bytes) or len(self.secret) != AUDIT_KEY_BYTES:
            raise ValueError(f"an audit key is {AUDIT_KEY_BYTES} bytes, got "
                             f"{len(self.secret) if isinstance(self.secret, bytes) else type(self.secret).__name__}")

    @classmethod
    def drawn(cls) -> "AuditKey":
        """A fresh key from the operating system's cryptographic random source (:func:`secrets.token_bytes`)."""
        return cls(secrets.token_bytes(AUDIT_KEY_BYTES))

    @property
    def identifier(self) -> str:
        """16 hex digits naming the key without revealing it: blake2b(constant, key=K), a pseudorandom function of
        the key (what fingerprints and log lines show)."""
        return hashlib.blake2b(_IDENTIFIER_PURPOSE, key=self.secret, digest_size=8).hexdigest()

    def __repr__(self) -> str:
        return f"AuditKey(identifier={self.identifier})"


Seed = int | AuditKey  # what keys a stream: a public integer seed, or the secret audit key
_KEY_TEXT = re.compile(rf"[0-9a-fA-F]{{{2 * AUDIT_KEY_BYTES}}}")


def key_text(key: AuditKey) -> str:
    """The key file's content: the key as 64 lowercase hex digits and a newline."""
    return key.secret.hex() + "\n"


def looks_like_key(text: str) -> bool:
    """True when ``text`` (surrounding whitespace aside) is 64 hex digits, the form of :func:`key_text`."""
    return _KEY_TEXT.fullmatch(text.strip()) is not None


def parsed_key(text: str) -> AuditKey:
    """The key a key file's ``text`` holds (:func:`key_text`; surrounding whitespace allowed).

    Raises:
        ValueError: saying what the text holds instead (its length and whether it is hex), never the text itself.
    """
    if not looks_like_key(text):
        stripped = text.strip()
        kind = "hex digits" if re.fullmatch(r"[0-9a-fA-F]*", stripped) else "characters, not all hex digits"
        raise ValueError(f"holds {len(stripped)} {kind}, not the {2 * AUDIT_KEY_BYTES} hex digits of a "
                         f"{8 * AUDIT_KEY_BYTES}-bit key")
    return AuditKey(bytes.fromhex(text.strip()))


def stream_key(seed: Seed, purpose: str) -> np.uint64:
    """64-bit key of one random stream: for an integer seed, the seed mixed with a stable digest of the purpose
    name; for an :class:`AuditKey` K, blake2b(purpose, key=K) (64 bits)."""
    if isinstance(seed, AuditKey):
        keyed = hashlib.blake2b(purpose.encode("utf-8"), key=seed.secret, digest_size=8).digest()
        return np.uint64(int.from_bytes(keyed, "little"))
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
        raise TypeError(f"seed must be an integer or an audit key, got seed={seed!r}")
    digest = int.from_bytes(hashlib.blake2b(purpose.encode("utf-8"), digest_size=8).digest(), "little")
    seed_word = mix64(np.array([int(seed) & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64))[0]
    return mix64(np.array([int(seed_word) ^ digest], dtype=np.uint64))[0]


def signed_stream_key(seed: int, purpose: str) -> int:
    """:func:`stream_key` read as a signed 64-bit integer (the form Spark SQL literals take).

    Raises:
        TypeError: for an :class:`AuditKey`, whose streams never become a literal of a query plan (plans reach
            Spark's UI and event log).
    """
    if isinstance(seed, AuditKey):
        raise TypeError("an audit key's stream never becomes a Spark SQL literal (query plans reach Spark's UI and "
                        "event log); draw with it on the executors inside a Python function instead")
    return int(np.uint64(stream_key(seed, purpose)).view(np.int64))


def hash_bits(seed: Seed, purpose: str, row_ids: np.ndarray, counter: int = 0) -> np.ndarray:
    """Uniform 64-bit words, one per row id, for draw number ``counter`` of the stream (seed, purpose)."""
    ids = np.asarray(row_ids).astype(np.int64, copy=False).view(np.uint64)
    with np.errstate(over="ignore"):
        offset = np.uint64(counter) * _GOLDEN
        return mix64(mix64(ids ^ stream_key(seed, purpose)) + offset)


def smallest_hashes(seed: Seed, purpose: str, row_ids: np.ndarray, count: int) -> np.ndarray:
    """True on the ``count`` rows of ``row_ids`` with the smallest :func:`hash_bits` (a seeded sample of fixed
    size that does not depend on the row order)."""
    chosen = np.zeros(np.size(row_ids), dtype=bool)
    chosen[np.argsort(hash_bits(seed, purpose, row_ids), kind="stable")[:count]] = True
    return chosen


def uniform(seed: Seed, purpose: str, row_ids: np.ndarray, counter: int = 0) -> np.ndarray:
    """Uniform(0, 1) doubles, strictly inside the interval: u = (top 53 bits + 1/2) / 2^53."""
    bits = hash_bits(seed, purpose, row_ids, counter) >> np.uint64(11)
    return (bits.astype(np.float64) + 0.5) * _TWO_POW_MINUS_53


def standard_normal(seed: Seed, purpose: str, row_ids: np.ndarray, counter: int = 0) -> np.ndarray:
    """Standard normal draws by inversion, Phi^{-1}(u); finite because u never reaches 0 or 1."""
    return ndtri(uniform(seed, purpose, row_ids, counter))


def bernoulli(seed: Seed, purpose: str, row_ids: np.ndarray, probability, counter: int = 0) -> np.ndarray:
    """Bernoulli(p) draws as int8: 1{u < p}, p broadcast against the row ids."""
    return (uniform(seed, purpose, row_ids, counter) < np.asarray(probability)).astype(np.int8)


def _rotate_left(words: np.ndarray, bits: int) -> np.ndarray:
    """Rotate unsigned words (uint32 or uint64) left by ``bits``."""
    kind = words.dtype.type
    return (words << kind(bits)) | (words >> kind(8 * words.dtype.itemsize - bits))


def xxhash64_long(values: np.ndarray | int, seed) -> np.ndarray:
    """XXH64 of each int64 value read as one 8-byte little-endian word, with a 64-bit seed (scalar or array):

        h = rotl(seed + P5 + 8 ^ rotl(x P2, 31) P1, 27) P1 + P4,  then the avalanche
        h ^= h >> 33; h *= P2; h ^= h >> 29; h *= P3; h ^= h >> 32   (wrapping uint64 arithmetic).

    Returned as int64, equal to Spark's ``xxhash64`` step for a long (so ``xxhash64(a, b)`` in Spark SQL is
    ``xxhash64_long(b, xxhash64_long(a, 42))``).
    """
    words = np.asarray(values).astype(np.int64, copy=False).view(np.uint64)
    seeds = np.asarray(seed).astype(np.int64).view(np.uint64) if np.ndim(seed) else np.uint64(int(seed) & (2**64 - 1))
    with np.errstate(over="ignore"):
        lane = _rotate_left(words * _XXH_PRIME_2, 31) * _XXH_PRIME_1
        h = (seeds + _XXH_PRIME_5 + np.uint64(8)) ^ lane
        h = _rotate_left(h, 27) * _XXH_PRIME_1 + _XXH_PRIME_4
        h = (h ^ (h >> np.uint64(33))) * _XXH_PRIME_2
        h = (h ^ (h >> np.uint64(29))) * _XXH_PRIME_3
        h = h ^ (h >> np.uint64(32))
    return h.view(np.int64)


def spark_hash_int(values: np.ndarray) -> np.ndarray:
    """Spark SQL ``hash(x)`` of int32 values (Murmur3 x86_32 of one 4-byte word, seed 42), as int32:

        k = rotl(x C1, 15) C2;  h = rotl(42 ^ k, 13) 5 + 0xe6546b64;  h ^= 4, then the avalanche
        h ^= h >> 16; h *= 0x85ebca6b; h ^= h >> 13; h *= 0xc2b2ae35; h ^= h >> 16   (wrapping uint32).

    Spark's hash partitioning sends a row whose only key is x to partition pmod(hash(x), n).
    """
    words = np.asarray(values).astype(np.int32, copy=False).view(np.uint32)
    with np.errstate(over="ignore"):
        k = _rotate_left(words * np.uint32(0xCC9E2D51), 15) * np.uint32(0x1B873593)
        h = _rotate_left(np.uint32(SPARK_HASH_SEED) ^ k, 13) * np.uint32(5) + np.uint32(0xE6546B64)
        h = h ^ np.uint32(4)
        h = (h ^ (h >> np.uint32(16))) * np.uint32(0x85EBCA6B)
        h = (h ^ (h >> np.uint32(13))) * np.uint32(0xC2B2AE35)
        h = h ^ (h >> np.uint32(16))
    return h.view(np.int32)


def spark_row_hash(seed: int, purpose: str, row_ids) -> np.ndarray:
    """Spark SQL ``xxhash64(signed_stream_key(seed, purpose), row_id)`` per row id, as int64."""
    stream = xxhash64_long(signed_stream_key(seed, purpose), SPARK_HASH_SEED)
    return xxhash64_long(np.asarray(row_ids), stream)
