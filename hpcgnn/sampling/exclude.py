"""A view of a graph without some edges: how a link-prediction batch keeps its answers hidden.

A model trained to score edge (u, v) must not read that edge while computing u's and v's
representations, or it learns to detect the edge instead of predicting it. DistDGL's edge
loader removes each batch's positive edges (and their reverses) from the neighbourhoods it
samples; :class:`ExcludedEdges` does it under every sampler at once, by standing in for the
graph with the two one-hop primitives samplers are built on (``sample_neighbors``,
``in_edges``) filtered, and everything else passed through.

Excluded edges are named by their endpoints, not by edge ids: (u, v) excludes every stored edge
u -> v and v -> u, parallel edges included, so neither a reverse edge nor a duplicate carries
the answer.

How a row keeps its fanout. A node with ``k`` excluded in-edges is sampled with fanout
``f + k_max`` (``k_max``: the most any node of the call has), its excluded picks dropped, and
``f`` of the rest kept: for uniform picks a uniformly random ``f`` of them, which is a uniform
``f``-subset of the allowed in-edges (a uniform subset of all candidates, conditioned on which
excluded ones it holds, is a uniform subset of the allowed ones); for weighted picks, which the
kernel returns in its draw order, the first ``f``, which is a weighted sample of the allowed
ones. Nodes without excluded in-edges take the graph's own sampling untouched. Sampling with
replacement draws ``2 (f + k)`` candidates and keeps the first ``f`` allowed ones. A row left
with fewer than ``f`` allowed picks although it had more candidates than were drawn (parallel
copies of an excluded edge) is drawn again, twice as wide, a few times at most.
"""
from __future__ import annotations

import numpy as np

from hpcgnn import _csr
from hpcgnn.graph.dist_graph import Neighbors
from hpcgnn.runtime.collectives import offsets
from hpcgnn.runtime.rng import derive_seed, generator

#: node ids must fit ``dst * N + src`` in 64 bits
MAX_NODES = 1 << 32
#: redraws of a short row, each twice as wide (without replacement the row is read whole long
#: before; with replacement only a row of nearly nothing but excluded edges gets this far)
_MAX_WIDENINGS = 8


class ExcludedEdges:
    """Local. ``graph`` without the edges between the pairs ``(src[i], dst[i])``, both directions.

    Parameters
    ----------
    graph : DistGraph (or another view)
    src, dst : int64 arrays
        Endpoints (global ids) of the excluded pairs.

    Notes
    -----
    Every attribute other than :meth:`sample_neighbors` and :meth:`in_edges` is the graph's own
    (degrees stay the graph's: GCN normalises by them).
    """

    def __init__(self, graph, src, dst):
        if graph.num_nodes > MAX_NODES:
            raise ValueError(f"edge exclusion supports up to {MAX_NODES:,} nodes, the graph has {graph.num_nodes:,}")
        self.graph = graph
        src = np.asarray(src, dtype=np.uint64)
        dst = np.asarray(dst, dtype=np.uint64)
        n = np.uint64(graph.num_nodes)
        # an excluded pair removes in-edge src -> dst (key dst*N+src) and its reverse
        self.keys = np.unique(np.concatenate([dst * n + src, src * n + dst]))
        nodes = (self.keys // n).astype(np.int64)
        self.nodes, self.counts = np.unique(nodes, return_counts=True)

    def __getattr__(self, name):
        return getattr(self.graph, name)

    def excluded_counts(self, gids) -> np.ndarray:
        """Local. How many excluded pairs end at each of ``gids`` (upper bound of its excluded in-edges)."""
        gids = np.asarray(gids, dtype=np.int64)
        if not self.nodes.shape[0] or not gids.shape[0]:
            return np.zeros(gids.shape[0], dtype=np.int64)
        slot = np.minimum(np.searchsorted(self.nodes, gids), self.nodes.shape[0] - 1)
        return np.where(self.nodes[slot] == gids, self.counts[slot], 0)

    def allowed(self, dst_gids, src_gids) -> np.ndarray:
        """Local. Per edge ``src_gids[i] -> dst_gids[i]``: True unless it is excluded."""
        if not self.keys.shape[0] or not np.asarray(src_gids).shape[0]:
            return np.ones(np.asarray(src_gids).shape[0], dtype=bool)
        keys = np.asarray(dst_gids, dtype=np.uint64) * np.uint64(self.graph.num_nodes) + \
            np.asarray(src_gids, dtype=np.uint64)
        slot = np.minimum(np.searchsorted(self.keys, keys), self.keys.shape[0] - 1)
        return self.keys[slot] != keys

    def sample_neighbors(self, seeds, fanout, replace=False, prob=None, seed=0) -> Neighbors:
        """Local. :meth:`DistGraph.sample_neighbors` with the excluded edges never picked (see the
        module docstring for how rows keep their fanout)."""
        seeds = np.asarray(seeds, dtype=np.int64)
        k = self.excluded_counts(seeds)
        hit = np.flatnonzero(k > 0)
        if not hit.shape[0]:
            return self.graph.sample_neighbors(seeds, fanout, replace, prob, seed)
        if fanout == -1:
            picked = self.graph.sample_neighbors(seeds, fanout, replace, prob, seed)
            return _keep(picked, self.allowed(np.repeat(seeds, picked.counts), picked.src))
        free = np.flatnonzero(k == 0)
        kept = self.graph.sample_neighbors(seeds[free], fanout, replace, prob, seed)
        return _merge(seeds.shape[0], free, kept, hit, self._redraw(seeds[hit], int(k[hit].max()), fanout,
                                                                   replace, prob, seed))

    def _redraw(self, nodes, extra, fanout, replace, prob, seed) -> Neighbors:
        """``fanout`` allowed picks of each of ``nodes`` (all with excluded in-edges): draw wider,
        drop the excluded, keep ``fanout``; a row left short while it had more candidates than
        were drawn (parallel copies of an excluded edge) is drawn again, twice as wide."""
        wide = (fanout + extra) * (2 if replace else 1)
        for attempt in range(_MAX_WIDENINGS):
            redrawn = self.graph.sample_neighbors(nodes, wide, replace, prob, derive_seed(seed, "exclude", attempt))
            allowed = self.allowed(np.repeat(nodes, redrawn.counts), redrawn.src)
            left = np.bincount(np.repeat(np.arange(nodes.shape[0]), redrawn.counts)[allowed],
                               minlength=nodes.shape[0])
            if not ((left < fanout) & (redrawn.counts == wide)).any():
                break
            wide *= 2
        ordered = replace or prob is not None  # draw order is random: the first f are a fair sample
        return _first_per_row(redrawn, allowed, fanout, None if ordered else generator(seed, "exclude_keep"))

    def in_edges(self, gids):
        """Local. :meth:`DistGraph.in_edges` without the excluded edges."""
        gids = np.asarray(gids, dtype=np.int64)
        offs, src, eids = self.graph.in_edges(gids)
        keep = self.allowed(np.repeat(gids, np.diff(offs)), src)
        counts = np.bincount(np.repeat(np.arange(gids.shape[0]), np.diff(offs))[keep], minlength=gids.shape[0])
        new_offsets = np.zeros(gids.shape[0] + 1, dtype=np.int64)
        np.cumsum(counts, out=new_offsets[1:])
        return new_offsets, src[keep], eids[keep]


def _keep(picked: Neighbors, keep) -> Neighbors:
    """The picks where ``keep`` is True, rows kept in place."""
    rows = np.repeat(np.arange(picked.counts.shape[0]), picked.counts)
    counts = np.bincount(rows[keep], minlength=picked.counts.shape[0]).astype(np.int64)
    return Neighbors(counts, picked.src[keep], picked.eids[keep], picked.degree)


def _first_per_row(picked: Neighbors, allowed, fanout, rng) -> Neighbors:
    """At most ``fanout`` allowed picks per row: the first ones, or a random ``fanout`` of them
    when ``rng`` is given (Floyd's picks come in an order that is not uniformly random)."""
    rows = np.repeat(np.arange(picked.counts.shape[0]), picked.counts)
    order = np.flatnonzero(allowed)
    if rng is not None:
        order = order[np.lexsort((rng.random(order.shape[0]), rows[order]))]
    rows_left = rows[order]
    starts = np.searchsorted(rows_left, np.arange(picked.counts.shape[0]))
    rank_in_row = np.arange(order.shape[0]) - starts[rows_left]
    keep = np.zeros(rows.shape[0], dtype=bool)
    keep[order[rank_in_row < fanout]] = True  # kept in the kernel's order inside each row
    return _keep(picked, keep)


def _merge(n, rows_a, picks_a: Neighbors, rows_b, picks_b: Neighbors) -> Neighbors:
    """One Neighbors over ``n`` rows from the picks of two disjoint sets of rows."""
    counts = np.zeros(n, dtype=np.int64)
    counts[rows_a], counts[rows_b] = picks_a.counts, picks_b.counts
    degree = np.zeros(n, dtype=np.int64)
    degree[rows_a], degree[rows_b] = picks_a.degree, picks_b.degree
    starts = offsets(counts)
    src = np.empty(int(counts.sum()), dtype=np.int64)
    eids = np.empty_like(src)
    for rows, picks in ((rows_a, picks_a), (rows_b, picks_b)):
        at = _csr.expand_ranges(starts[rows], picks.counts.astype(np.int64))
        src[at], eids[at] = picks.src, picks.eids
    return Neighbors(counts, src, eids, degree)
