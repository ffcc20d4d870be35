"""Every random stream of hpcgnn comes from here: one seed derivation and one counter hash.

``derive_seed(base, *keys)`` keys numpy's SeedSequence by the run's seed and a purpose (a
string) plus indices (rank, epoch, batch, ...), so two streams never coincide: rank 1000 of
seed 0 and rank 0 of seed 1 get unrelated seeds, which ``seed * 1000 + rank`` did not.

``mix64`` is the splitmix64 finaliser; the compiled kernels use the same function from
``cython/splitmix64.h``, and the reference oracles in :mod:`hpcgnn.testing.reference`
reproduce them with it.
"""
from __future__ import annotations

import zlib

import numpy as np

GOLDEN_GAMMA = 0x9E3779B97F4A7C15
MASK64 = (1 << 64) - 1


def _key(key) -> int:
    if isinstance(key, str):
        return zlib.crc32(key.encode())  # stable across processes, unlike hash()
    key = int(key)
    if key < 0:
        raise ValueError(f"seed keys must be non-negative, got {key}")
    return key


def seed_sequence(base, *keys) -> np.random.SeedSequence:
    """Local. The SeedSequence of ``base`` (an int) spawned along ``keys`` (ints or strings)."""
    return np.random.SeedSequence(_key(base), spawn_key=tuple(_key(k) for k in keys))


def derive_seed(base, *keys) -> int:
    """Local. A 63-bit seed for the stream named by ``keys`` under the run seed ``base``."""
    return int(seed_sequence(base, *keys).generate_state(1, np.uint64)[0] >> np.uint64(1))


def generator(base, *keys) -> np.random.Generator:
    """Local. A numpy Generator on the stream named by ``keys`` under ``base``."""
    return np.random.default_rng(seed_sequence(base, *keys))


def mix64(z: np.ndarray) -> np.ndarray:
    """Local. The splitmix64 finaliser of every element of a uint64 array (wrap-around)."""
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def unit_uniform(counters: np.ndarray, seed: int) -> np.ndarray:
    """Local. A float64 in [0, 1) per uint64 counter: ``mix64(counter + offset(seed)) >> 11``,
    53 random bits each. The value depends only on (seed, counter)."""
    offset = (int(seed) * GOLDEN_GAMMA + 0x632BE59BD9B4E019) & MASK64
    with np.errstate(over="ignore"):
        z = mix64(np.asarray(counters, dtype=np.uint64) + np.uint64(offset))
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / 2**53)
