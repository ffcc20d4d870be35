"""Negative samplers for link prediction over a DistGraph.

A batch holds ``B`` positive edges ``(src, dst)`` with their global edge ids ``eids``; a
sampler returns ``K`` negative pairs per positive, positive-major (entries ``i*K .. i*K+K-1``
belong to positive ``i``). The samplers, by name (:data:`NEGATIVE_SAMPLERS`):

``uniform``
    ``(u, v)`` with both endpoints uniform over all ``N`` nodes.
``corrupt`` (the default; DGL's ``Uniform(k)``)
    ``(src_i, v)``: the destination is replaced by a node uniform over all ``N``.
``degree``
    ``(src_i, v)`` with ``v`` drawn with probability proportional to ``in_degree ** 0.75``
    (word2vec's smoothed unigram distribution) over the whole graph. No rank holds an O(N) array: at construction
    every rank builds a Walker/Vose alias table over its own nodes' weights (see
    :func:`alias_table`) and stores it in a :class:`~hpcgnn.store.dist_tensor.DistTensor`
    sharded like the nodes; the P per-rank weight totals are allgathered. A draw picks an
    owner rank by its total, a uniform slot in that rank's range, reads the slot's
    ``(acceptance, alias)`` row (one batched, one-sided gather per call) and keeps the slot
    or its alias. That is exact: P(v) = total(owner) / total * weight(v) / total(owner).
    Nodes of in-degree 0 have weight 0 and are never drawn.
``in-batch``
    ``(src_i, dst_j)`` with ``j`` uniform over the *other* positives of the batch
    (``j != i``); a batch of one falls back to ``corrupt``.

Determinism: the draws of positive ``i`` come from :func:`~hpcgnn.runtime.rng.unit_uniform`
with counters ``(eids[i] * K + j) * 4 + purpose`` (``j`` the negative's index, ``purpose``
one of the independent uniforms a draw needs), under a seed derived from the call's ``seed``
and the sampler's name. So for ``uniform``/``corrupt`` the negatives of an edge are the same
whatever batch it is in, whichever rank samples it and however many ranks there are; for
``degree`` the same holds for a fixed partition (which node a given uniform maps to depends
on the partition; the distribution does not). ``in-batch`` depends on the batch by design:
its picks are a function of ``(seed, eids[i], j, i, B)``.
"""
from __future__ import annotations

from typing import Protocol

import numpy as np

from hpcgnn.runtime.rng import derive_seed, unit_uniform
from hpcgnn.store.dist_tensor import DistTensor

#: counter slots per negative: independent uniforms a single draw may need
_PURPOSES = 4
_NODE, _SOURCE, _SLOT, _COIN = range(_PURPOSES)
#: the degree sampler's default exponent (word2vec's)
_DEGREE_POWER = 0.75


class NegativeSampler(Protocol):
    """Local. What a link-prediction loader needs of a negative sampler."""

    #: negatives per positive edge
    k: int

    def sample(self, graph, src, dst, eids, seed) -> tuple[np.ndarray, np.ndarray]:
        """Local. ``(neg_src, neg_dst)``, int64 ``[B * k]``, positive-major."""
        ...

    def close(self):
        """Collective over graph.comm. Free what the sampler holds (a no-op for most)."""
        ...


def draws(eids, k, seed, purpose) -> np.ndarray:
    """Local. One uniform in [0, 1) per (positive, negative index), positive-major.

    Parameters
    ----------
    eids : array of int64, [B]
        Global edge ids of the positives: the streams' counters, so a positive's draws do not
        depend on the batch around it.
    k : int
        Negatives per positive.
    seed : int
        Stream seed (already specific to the sampler).
    purpose : int
        Which of the ``_PURPOSES`` independent uniforms of a draw.

    Returns
    -------
    ndarray of float64, [B * k]
    """
    eids = np.asarray(eids, dtype=np.int64).astype(np.uint64).reshape(-1, 1)
    with np.errstate(over="ignore"):
        counters = (eids * np.uint64(k) + np.arange(k, dtype=np.uint64)) * np.uint64(_PURPOSES) + np.uint64(purpose)
    return unit_uniform(counters.reshape(-1), seed)


def below(u, m) -> np.ndarray:
    """Local. Integers in ``[0, m)`` from uniforms ``u`` (``m`` scalar or per element).

    The clamp guards against ``u * m`` rounding up to ``m`` when ``u`` is within an ulp of 1.
    """
    m = np.asarray(m, dtype=np.int64)
    return np.minimum((u * m).astype(np.int64), m - 1)


def alias_table(weights) -> tuple[np.ndarray, np.ndarray]:
    """Local. Walker/Vose alias table of non-negative ``weights``, built without a Python loop.

    Slot ``i`` (picked uniformly) yields ``i`` with probability ``prob[i]`` and ``alias[i]``
    otherwise, so item ``v`` comes out with probability ``weights[v] / weights.sum()``.

    Vose pairs every under-full slot (scaled weight ``p < 1``) with an over-full one, which
    then, once it has given away enough to drop below 1, is itself topped up by the next
    over-full slot. Served in a fixed order, who serves whom follows from two prefix sums:
    with ``D`` the cumulative deficits ``1 - p`` of the under-full slots and ``E`` the
    cumulative surpluses ``p - 1`` of the over-full ones, under-full slot ``i`` is served by
    the first over-full ``j`` with ``E[j] >= D[i-1]``, and over-full ``j`` drops below 1 at the
    first under-full ``a`` with ``D[a] > E[j]``, keeping ``E[j] + 1 - D[a]`` and taking
    ``j + 1`` as its alias. Two ``searchsorted`` calls replace the sequential queue.

    Parameters
    ----------
    weights : array of float, [n]

    Returns
    -------
    prob : ndarray of float64, [n]
        Acceptance probability of each slot (0 for weight-0 items, so they never come out).
    alias : ndarray of int64, [n]
        The slot's alternative item (an index into ``weights``).
    """
    weights = np.asarray(weights, dtype=np.float64)
    n = weights.shape[0]
    prob, alias = np.ones(n), np.arange(n, dtype=np.int64)
    total = float(weights.sum())
    if n == 0 or total <= 0:
        return np.zeros(n), np.zeros(n, dtype=np.int64)
    scaled = weights * (n / total)
    over = scaled >= 1
    if not over.any():
        over[np.argmax(scaled)] = True  # equal weights can all scale to just under 1
    small, large = np.flatnonzero(~over), np.flatnonzero(over)
    if small.shape[0] == 0:
        return prob, alias
    deficit_end = np.cumsum(1 - scaled[small])
    deficit_start = np.concatenate([[0.0], deficit_end[:-1]])
    surplus_end = np.cumsum(scaled[large] - 1)
    # rounding can push the last under-full slots past the final surplus: the last over-full
    # slot, which never drops below 1 in exact arithmetic, serves them
    server = np.minimum(np.searchsorted(surplus_end, deficit_start, side="left"), large.shape[0] - 1)
    prob[small] = scaled[small]
    alias[small] = large[server]
    drop = np.searchsorted(deficit_end, surplus_end, side="right")
    drops = np.flatnonzero(drop[:-1] < small.shape[0])  # the last over-full slot keeps prob 1
    prob[large[drops]] = surplus_end[drops] + 1 - deficit_end[drop[drops]]
    alias[large[drops]] = large[drops + 1]
    np.clip(prob, 0.0, 1.0, out=prob)
    prob[weights <= 0] = 0.0  # exact zeros, whatever the rounding did
    return prob, alias


class UniformNegativeSampler:
    """Local. Negative pairs with both endpoints uniform over all nodes.

    Parameters
    ----------
    k : int
        Negatives per positive.
    graph : DistGraph, optional
        Unused (the node count is read from the graph passed to :meth:`sample`); accepted so
        every sampler is built alike.
    """

    name = "uniform"

    def __init__(self, k, graph=None):
        self.k = _check_k(k)

    def sample(self, graph, src, dst, eids, seed) -> tuple[np.ndarray, np.ndarray]:
        """Local. ``(neg_src, neg_dst)`` uniform over ``[0, graph.num_nodes)``, ``k`` per positive."""
        stream = derive_seed(seed, "negative", self.name)
        n = int(graph.num_nodes)
        return (below(draws(eids, self.k, stream, _SOURCE), n),
                below(draws(eids, self.k, stream, _NODE), n))

    def close(self):
        """Local. Nothing to free."""


class CorruptNegativeSampler(UniformNegativeSampler):
    """Local. DGL's ``Uniform(k)``: keep each positive's source, replace its destination by a
    node uniform over all nodes. Parameters as :class:`UniformNegativeSampler`."""

    name = "corrupt"

    def sample(self, graph, src, dst, eids, seed) -> tuple[np.ndarray, np.ndarray]:
        """Local. ``(repeat(src, k), v)`` with ``v`` uniform over ``[0, graph.num_nodes)``."""
        stream = derive_seed(seed, "negative", self.name)
        neg_dst = below(draws(eids, self.k, stream, _NODE), int(graph.num_nodes))
        return np.repeat(np.asarray(src, dtype=np.int64), self.k), neg_dst


class InBatchNegativeSampler(UniformNegativeSampler):
    """Local. Pair each positive's source with the destinations of other positives of the batch.

    Positive ``i`` gets ``(src_i, dst_j)`` with ``j`` uniform over the batch's other positives
    (``j != i``; a repeated destination value can still coincide with ``dst_i``). A batch of
    one has no other positive and falls back to :class:`CorruptNegativeSampler`.
    Parameters as :class:`UniformNegativeSampler`.
    """

    name = "in-batch"

    def __init__(self, k, graph=None):
        super().__init__(k, graph)
        self.fallback = CorruptNegativeSampler(k, graph)

    def sample(self, graph, src, dst, eids, seed) -> tuple[np.ndarray, np.ndarray]:
        """Local. ``(repeat(src, k), dst[j])`` with ``j != i`` uniform over the batch."""
        dst = np.asarray(dst, dtype=np.int64)
        batch = dst.shape[0]
        if batch == 1:
            return self.fallback.sample(graph, src, dst, eids, seed)
        stream = derive_seed(seed, "negative", self.name)
        own = np.repeat(np.arange(batch, dtype=np.int64), self.k)
        # uniform over the B - 1 others: draw an index among them, then skip over i itself
        pick = below(draws(eids, self.k, stream, _NODE), max(batch - 1, 1))
        pick += pick >= own
        return np.repeat(np.asarray(src, dtype=np.int64), self.k), dst[pick]


class DegreeNegativeSampler:
    """Collective over comm. Keep each positive's source; draw the destination with probability
    proportional to ``in_degree ** power`` over the whole graph.

    Every rank builds the alias table of its own nodes (:func:`alias_table`) into a DistTensor
    sharded by ``graph.book`` (column 0 the acceptance probability, column 1 the alias as a
    local index, exact in float64 below 2**53: one tensor so a call reads one row per draw in
    one gather) and allgathers the P weight totals. Call :meth:`close` (collective) to free it.

    Parameters
    ----------
    k : int
        Negatives per positive.
    graph : DistGraph
        The graph whose in-degrees weigh the nodes (collective over ``graph.comm``).
    power : float
        Exponent of the in-degree; default 0.75.

    Raises
    ------
    ValueError
        On every rank, if no node of the graph has an in-edge.
    """

    name = "degree"

    def __init__(self, k, graph, power=_DEGREE_POWER):
        self.k = _check_k(k)
        self.power = float(power)
        self.book = graph.book
        weights = np.diff(graph.indptr).astype(np.float64) ** self.power  # 0 ** power is 0: never drawn
        totals = np.empty(graph.comm.size, dtype=np.float64)
        graph.comm.Allgather(np.array([weights.sum()], dtype=np.float64), totals)
        self.cumulative = np.cumsum(totals)
        if not self.cumulative[-1] > 0:
            raise ValueError(f"degree negative sampler: no node of {graph.num_nodes} has an in-edge")
        # float rounding of u * total can land on a trailing weight-0 rank: clamp to the last
        # rank with weight
        self.last_rank = int(np.flatnonzero(totals > 0)[-1])
        prob, alias = alias_table(weights)
        self.table = DistTensor((graph.num_nodes, 2), np.float64, name="degree_alias", comm=graph.comm,
                                book=graph.book, local_data=np.stack([prob, alias.astype(np.float64)], axis=1))

    def sample(self, graph, src, dst, eids, seed) -> tuple[np.ndarray, np.ndarray]:
        """Local. ``(repeat(src, k), v)`` with ``P(v) ∝ in_degree(v) ** power``.

        One-sided reads only (no collective), so ranks may call it with different batch sizes,
        empty ones included.
        """
        stream = derive_seed(seed, "negative", self.name)
        owner = np.searchsorted(self.cumulative, draws(eids, self.k, stream, _NODE) * self.cumulative[-1],
                                side="right")
        owner = np.minimum(owner, self.last_rank)
        first = self.book.starts[owner]
        slot = below(draws(eids, self.k, stream, _SLOT), self.book.part_sizes()[owner])
        row = self.table.gather(first + slot)
        keep = draws(eids, self.k, stream, _COIN) < row[:, 0]
        neg_dst = first + np.where(keep, slot, row[:, 1].astype(np.int64))
        return np.repeat(np.asarray(src, dtype=np.int64), self.k), neg_dst

    def close(self):
        """Collective over comm. Free the alias table's window (the sampler is unusable after)."""
        if self.table is not None:
            self.table.close()
            self.table = None


def _check_k(k) -> int:
    """Local. ``k`` as a positive int, or ValueError."""
    if int(k) != k or int(k) < 1:
        raise ValueError(f"negatives per positive must be a positive integer, got {k!r}")
    return int(k)


#: negative samplers by name; every class is built as ``cls(k, graph)``
NEGATIVE_SAMPLERS = {
    "uniform": UniformNegativeSampler,
    "corrupt": CorruptNegativeSampler,
    "degree": DegreeNegativeSampler,
    "in-batch": InBatchNegativeSampler,
}
_DEFAULT_NEGATIVE_SAMPLER = "corrupt"


def build_negative_sampler(name, k, graph) -> NegativeSampler:
    """Collective over graph.comm. The negative sampler called ``name`` with ``k`` per positive.

    Collective because ``degree`` builds its alias table across the ranks; every rank must
    call it with the same ``name``.

    Parameters
    ----------
    name : str
        A key of :data:`NEGATIVE_SAMPLERS`.
    k : int
        Negatives per positive.
    graph : DistGraph

    Raises
    ------
    ValueError
        For an unknown name or a ``k`` below 1.
    """
    if name not in NEGATIVE_SAMPLERS:
        raise ValueError(f"unknown negative sampler {name!r}; choose one of {', '.join(NEGATIVE_SAMPLERS)}")
    return NEGATIVE_SAMPLERS[name](k, graph)
