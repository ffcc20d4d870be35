"""A digest of a graph's edges in the input's node ids, so the stored edges can be checked.

Checksums prove that a part file holds the bytes it was written with; they cannot tell whether
the writer put the right edges into it. Every partition writer therefore records in meta.json
(``edge_digest``) a digest of the edge set it was asked to store: the cleaned graph's directed
edges, each named by its endpoints' ``orig_id`` (the ids the input names them by), and
``inspect --verify`` recomputes it from the part files (:func:`csc_digest`).

The digest is ``sum(_pair_hash(orig_src, orig_dst)) mod 2**64`` over the edges, beside their
count. A sum does not depend on the order of the edges, on how they are split over parts or
ranks, nor on the new ids a partitioning gives the nodes, so the serial writer and the
distributed ones at any rank count record the same value for the same edges; and it counts
repeats (a multiset), so a lost or doubled copy of a parallel edge changes it.
``_pair_hash`` is two rounds of the splitmix64 finaliser (:func:`hpcgnn.runtime.rng.mix64`):
a wrong source, a wrong destination, a reversed edge or a swap of two edges' sources changes
the sum except with probability about ``2**-64``. This detects mistakes and damage; it is not
a defence against someone who wants a forged file to pass (that is what the files' SHA-256 in
meta.json, kept elsewhere, would be for).

Arithmetic is vectorised numpy on ``uint64`` (wrapping), in cache-sized blocks of
:data:`BLOCK_EDGES` edges, so memory stays bounded on any graph (about 2 s per 100M edges on
one core).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from hpcgnn.runtime.rng import GOLDEN_GAMMA, MASK64, mix64

#: the value of ``edge_digest.scheme``: what :func:`_pair_hash` and the sum are
SCHEME = "orig-id-pairs/splitmix64-sum/v1"
#: edges hashed per block: two uint64 buffers of this length stay in a core's cache (16x
#: faster than whole-array temporaries on 16M edges)
BLOCK_EDGES = 1 << 16
#: edges per run of :func:`csc_digest` and per id lookup of :func:`graph_digest`
RUN_EDGES = 1 << 22
_SOURCE_OFFSET = np.uint64(GOLDEN_GAMMA)
_DESTINATION_OFFSET = np.uint64(0xD1B54A32D192ED03)
_HEX = re.compile(r"0x[0-9a-f]{16}")


def _pair_hash(src, dst) -> np.ndarray:
    """Local. A well-mixed uint64 per directed pair ``(src[i], dst[i])`` of integer ids:
    ``mix64(mix64(src + a) + dst * b)``."""
    with np.errstate(over="ignore"):
        z = mix64(np.asarray(src).astype(np.uint64) + _SOURCE_OFFSET)
        z += np.asarray(dst).astype(np.uint64) * _DESTINATION_OFFSET
        return mix64(z)


def _mix_in_place(z, scratch):
    """:func:`~hpcgnn.runtime.rng.mix64` of ``z``, in place (``scratch``: a buffer of its length)."""
    for shift, multiplier in ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB)):
        np.right_shift(z, np.uint64(shift), out=scratch)
        z ^= scratch
        z *= np.uint64(multiplier)
    np.right_shift(z, np.uint64(31), out=scratch)
    z ^= scratch


def _sum_hashes(src, dst) -> int:
    """``sum(_pair_hash(src, dst)) mod 2**64``, a cache-sized block at a time."""
    size = min(BLOCK_EDGES, src.shape[0])
    z, scratch = np.empty(size, dtype=np.uint64), np.empty(size, dtype=np.uint64)
    total = 0
    with np.errstate(over="ignore"):
        for lo in range(0, src.shape[0], BLOCK_EDGES):
            count = min(BLOCK_EDGES, src.shape[0] - lo)
            h, t = z[:count], scratch[:count]
            h[:] = src[lo:lo + count]  # casts any integer ids to uint64 (wrapping)
            h += _SOURCE_OFFSET
            _mix_in_place(h, t)
            t[:] = dst[lo:lo + count]
            t *= _DESTINATION_OFFSET
            h += t
            _mix_in_place(h, t)
            total += int(h.sum(dtype=np.uint64))  # a uint64 sum wraps: the block's sum mod 2**64
    return total & MASK64


@dataclass(frozen=True)
class EdgeDigest:
    """Local. The edge count and the 64-bit sum of the pair hashes of a multiset of edges."""

    count: int = 0
    value: int = 0

    def __add__(self, other: EdgeDigest) -> EdgeDigest:
        return EdgeDigest(self.count + other.count, (self.value + other.value) & MASK64)

    def to_meta(self) -> dict:
        """Local. meta.json's ``edge_digest`` entry (the sum as 16 hex digits: JSON readers
        other than Python's lose integers above 2**53)."""
        return {"scheme": SCHEME, "count": int(self.count), "sum": f"0x{self.value:016x}"}

    @classmethod
    def from_meta(cls, entry) -> EdgeDigest:
        """Local. The digest of a meta.json ``edge_digest`` entry; ValueError naming the part of it
        that is malformed."""
        if not isinstance(entry, dict):
            raise ValueError("must be an object with scheme, count and sum")
        if entry.get("scheme") != SCHEME:
            raise ValueError(f"unknown scheme (this hpcgnn computes {SCHEME})")
        count, value = entry.get("count"), entry.get("sum")
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise ValueError("count must be a non-negative integer")
        if not isinstance(value, str) or not _HEX.fullmatch(value):
            raise ValueError("sum must be 0x and 16 lower-case hex digits")
        return cls(count, int(value, 16))

    def allreduce(self, comm) -> EdgeDigest:
        """Collective over comm. The digest of every rank's edges together."""
        parts = comm.allgather((self.count, self.value))
        return EdgeDigest(sum(c for c, _ in parts), sum(v for _, v in parts) & MASK64)


def pairs_digest(src, dst) -> EdgeDigest:
    """Local. The digest of the edges ``src[i] -> dst[i]`` (ids as the digest names them: orig ids)."""
    src, dst = np.asarray(src), np.asarray(dst)
    if src.shape != dst.shape or src.ndim != 1:
        raise ValueError(f"src and dst must be 1-D of one length, got {src.shape} and {dst.shape}")
    return EdgeDigest(int(src.shape[0]), _sum_hashes(src, dst))


def graph_digest(src, dst, orig_id=None) -> EdgeDigest:
    """Local. The digest of a graph's edges ``src[i] -> dst[i]`` (node ids of the graph) named by
    ``orig_id[node]`` (None: the ids themselves), mapped a block at a time."""
    src, dst = np.asarray(src), np.asarray(dst)
    if orig_id is None:
        return pairs_digest(src, dst)
    total = EdgeDigest()
    for lo in range(0, src.shape[0], RUN_EDGES):
        hi = lo + RUN_EDGES
        total += pairs_digest(orig_id[src[lo:hi]], orig_id[dst[lo:hi]])
    return total


def csc_digest(indptr, indices, dst_orig, orig_of) -> EdgeDigest:
    """Local. The digest of one part's stored in-edges: node ``i`` of the part (orig id
    ``dst_orig[i]``) has in-edges from the global ids ``indices[indptr[i]:indptr[i+1]]``, named
    by ``orig_of[global id]``. Walks the nodes in runs of about :data:`RUN_EDGES` edges."""
    indptr = np.asarray(indptr, dtype=np.int64)
    total, node, num_nodes = EdgeDigest(), 0, indptr.shape[0] - 1
    while node < num_nodes:
        # the nodes whose edges end within the next block (at least one node)
        end = max(node + 1, int(np.searchsorted(indptr, indptr[node] + RUN_EDGES, side="right")) - 1)
        end = min(end, num_nodes)
        lo, hi = int(indptr[node]), int(indptr[end])
        dst = np.repeat(np.asarray(dst_orig[node:end]), np.diff(indptr[node:end + 1]))
        total += pairs_digest(orig_of[np.asarray(indices[lo:hi])], dst)
        node = end
    return total
