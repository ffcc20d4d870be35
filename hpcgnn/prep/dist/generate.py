"""``mpirun -np K hpcgnn generate rmat|hetero ...``: a synthetic graph drawn by K ranks.

The graph is the one :func:`hpcgnn.prep.generate.rmat_graph` draws for the seed, bit for bit:
rank ``r`` draws its share of every round's raw-edge blocks (each block has its own random
stream), sends each edge key to the rank owning its source's id block, and keeps the sorted
distinct keys of its sources; the rounds' decisions use global counts (:class:`SpreadDraw`),
and the seeded subset is chosen by priority thresholds found by bisection. The ranks' edges,
concatenated in rank order, are the serial graph's edges in its (src, dst) order. Every rank
then draws the node fields of its id block, and the ranks write one graph file in turns
(:func:`write_graph_file`). A rank holds about ``E / K`` edges and ``N / K`` feature rows, plus
a few arrays of N integers (labels, the id permutation, the class peer tables).

The typed graph of ``generate hetero`` (:func:`hetero_spread_graph`) is drawn the same way,
relation by relation (a relation's keys are kept by the owner of their source's block of the
source type's ids), and becomes a :class:`~hpcgnn.prep.dist.spread.SpreadGraph` with the edge
ids, node fields and per-type fields of :func:`hpcgnn.prep.generate_hetero.hetero_graph`'s graph
for the seed, whatever the number of ranks; it goes into the spread partitioner
(:func:`hpcgnn.prep.dist.pipeline.partition_spread`) without any rank holding all of it.
"""
from __future__ import annotations

import functools

import numpy as np

from hpcgnn.format.fields import UNLABELLED
from hpcgnn.format.schema import ETYPE, REVERSE_PREFIX, Schema
from hpcgnn.prep.dist.blocks import block_starts, owner_of, send_to_owners, weighted_starts
from hpcgnn.prep.dist.graph_file import write_graph_file
from hpcgnn.prep.dist.spread import SpreadGraph, validate
from hpcgnn.prep.generate import check_rmat, node_fields, rmat_edges
from hpcgnn.prep.generate_hetero import (
    IGBH_NODES,
    IGBH_RELATIONS,
    TARGET,
    check_hetero,
    draw_relations,
    type_fields,
)
from hpcgnn.prep.typed import etype_dtype
from hpcgnn.runtime.comm import mpi


class SpreadDraw:
    """Collective over comm. The four steps of :class:`hpcgnn.prep.generate.LocalDraw`, over
    the ranks: keys are kept by the owner of their source's id block. A bipartite relation's
    keys (``(src * num_dst + dst) * 2 + flag``) name ``num_dst`` destinations; the blocks are
    of the ``num_nodes`` sources."""

    def __init__(self, comm, num_nodes, num_dst=None):
        self.comm = comm
        self.num_nodes = num_nodes
        self.num_dst = num_nodes if num_dst is None else num_dst
        self.starts = block_starts(num_nodes, comm.size)

    def chunks(self, first, stop, chunk_blocks):
        lo, hi = block_starts(stop - first, self.comm.size)[self.comm.rank:self.comm.rank + 2] + first
        share = -(-(stop - first) // self.comm.size)
        lo, hi = int(lo), int(hi)
        return [range(min(b, hi), min(b + chunk_blocks, hi)) for b in range(lo, lo + max(share, 1), chunk_blocks)]

    def route(self, keys):
        # key = (src * N + dst) * 2 + flag, so src = key // 2N
        (got,) = send_to_owners(self.comm, owner_of(keys // (2 * self.num_dst), self.starts), keys)
        return got

    def total(self, *counts):
        return tuple(int(v) for v in self.comm.allreduce(np.asarray(counts, dtype=np.int64), op=mpi().SUM))

    def kth_smallest(self, values, k):
        """Bisection over the 64-bit range: each step counts the values at or below the middle."""
        values = np.sort(values)
        lo, hi = 0, (1 << 64) - 1
        while lo < hi:
            mid = (lo + hi) // 2
            below = int(np.searchsorted(values, np.uint64(mid), side="right"))
            if self.comm.allreduce(below, op=mpi().SUM) >= k:
                hi = mid
            else:
                lo = mid + 1
        return np.uint64(lo)


def generate_rmat_file(comm, path, num_nodes, num_edges, feat_dim=64, num_classes=10, homophily=0.7,
                       feat_signal=0.15, fractions=(0.6, 0.2, 0.2), seed=0, chunk_edges=4_000_000,
                       compress=False) -> dict:
    """Collective over comm. Draw :func:`~hpcgnn.prep.generate.rmat_graph`'s graph on the ranks
    of ``comm`` and write it as a graph file (:mod:`hpcgnn.prep.read.h5graph`) at ``path``.

    Returns the summary the command prints: nodes, edges, edge homophily, max degree.
    """
    params = check_rmat(num_nodes, num_edges, num_classes, homophily, feat_dim, feat_signal, fractions, seed,
                        chunk_edges)
    num_nodes, num_edges, num_classes, homophily, feat_dim, feat_signal, fractions, chunk_edges = params
    draw = SpreadDraw(comm, num_nodes)
    labels, src, dst = rmat_edges(num_nodes, num_edges, num_classes, homophily, seed, chunk_edges, draw)
    first, end = draw.starts[comm.rank:comm.rank + 2]
    ndata = node_fields(labels, num_classes, feat_dim, feat_signal, fractions, seed, first, end)
    same = int(np.count_nonzero(labels[src] == labels[dst]))
    degree = np.bincount(src, minlength=num_nodes) + np.bincount(dst, minlength=num_nodes)
    comm.Allreduce(mpi().IN_PLACE, degree, op=mpi().SUM)
    edge_first = int(comm.exscan(src.shape[0]) or 0)
    write_graph_file(comm, path, num_nodes, "rmat", edge_first, {"src": src, "dst": dst}, int(first), ndata,
                     compress=compress)
    return {"num_nodes": num_nodes, "num_edges": num_edges,
            "homophily": comm.allreduce(same, op=mpi().SUM) / num_edges, "max_degree": int(degree.max())}


def _in_edge_blocks(comm, num_nodes, offsets, relations, add_reverse, feat_dim) -> np.ndarray:
    """Collective over comm. Block starts of the input ids that give every rank about the same
    memory: its in-edges (reverses included; the partitioner holds about 100 bytes an edge at
    its peak) and its nodes (a node's ``4 * feat_dim`` bytes of features weigh ``feat_dim / 32``
    edges, plus one). Ids are numbered type by type and most edges end at papers, so equal
    node blocks would give the ranks holding papers several times the edges of the others."""
    weight = np.full(num_nodes, 1 + feat_dim // 32, dtype=np.int64)
    types = list(IGBH_NODES)
    for src_type, _, dst_type, src, dst in relations:
        ends = ((dst_type, dst), (src_type, src)) if add_reverse else ((dst_type, dst),)
        for node_type, ids in ends:
            first, end = int(offsets[types.index(node_type)]), int(offsets[types.index(node_type) + 1])
            weight[first:end] += np.bincount(ids, minlength=end - first)
    comm.Allreduce(mpi().IN_PLACE, weight, op=mpi().SUM)
    weight -= (comm.size - 1) * (1 + feat_dim // 32)  # every rank counted each node's own weight
    return weighted_starts(weight, comm.size)


def hetero_spread_graph(comm, num_nodes, num_edges, feat_dim=128, num_classes=19, homophily=0.7, feat_signal=0.15,
                        fractions=(0.6, 0.2, 0.2), seed=0, add_reverse=True, chunk_edges=4_000_000
                        ) -> tuple[SpreadGraph, dict]:
    """Collective over comm. :func:`~hpcgnn.prep.generate_hetero.hetero_graph`'s graph for these
    parameters, drawn on the ranks of ``comm`` and spread by destination (module docstring).

    Every relation is drawn by a :class:`SpreadDraw` over its source type, so each rank gets the
    edges of its block of sources; they take the serial graph's ids (input ids type by type,
    edge ids relation by relation, a reverse relation's edges in its relation's order) and go
    to the owners of their destinations, in blocks of input ids holding near-equal numbers of
    in-edges. Each rank draws the node fields of its block of input ids, type by type. Returns
    the graph and the summary ``generate hetero`` prints
    (:func:`~hpcgnn.prep.generate_hetero.hetero_summary`'s).
    """
    params, counts, edges = check_hetero(num_nodes, num_edges, num_classes, homophily, feat_dim, feat_signal,
                                         fractions, seed, chunk_edges)
    num_nodes, num_edges, num_classes, homophily, feat_dim, feat_signal, fractions, chunk_edges = params
    types = tuple(IGBH_NODES)
    offsets = np.concatenate([[0], np.cumsum([counts[t] for t in types])]).astype(np.int64)
    triples = [(s, r, d) for s, r, d, _ in IGBH_RELATIONS]
    if add_reverse:
        triples += [(d, REVERSE_PREFIX + r, s) for s, r, d, _ in IGBH_RELATIONS]
    schema = Schema(types, tuple(triples), TARGET).validate(None)
    classes, relations = draw_relations(counts, edges, num_classes, homophily, seed, chunk_edges, num_edges,
                                        lambda num_src, num_dst: SpreadDraw(comm, num_src, num_dst))
    starts = _in_edge_blocks(comm, num_nodes, offsets, relations, add_reverse, feat_dim)
    owners_of = functools.partial(owner_of, starts=starts)
    relation_edges = list(edges) * (2 if add_reverse else 1)  # a reverse relation has its relation's edges
    relation_first = np.concatenate([[0], np.cumsum(relation_edges)]).astype(np.int64)
    pieces = []  # (src, dst, eid, etype) of every relation, each at its destinations' owner
    etype_type = etype_dtype(schema.num_relations)
    same_class = 0
    for index, (src_type, _, dst_type, src, dst) in enumerate(relations):
        if src_type == dst_type == TARGET:
            same_class += int(np.count_nonzero(classes[TARGET][src] == classes[TARGET][dst]))
        ends = (src + offsets[types.index(src_type)], dst + offsets[types.index(dst_type)])
        del src, dst
        positions = int(comm.exscan(ends[0].shape[0]) or 0) + np.arange(ends[0].shape[0], dtype=np.int64)
        for copy, (tail, head) in enumerate((ends, ends[::-1]) if add_reverse else (ends,)):
            relation = index + copy * len(relations)
            pieces.append(send_to_owners(comm, owners_of(head), tail, head, relation_first[relation] + positions,
                                         np.full(tail.shape[0], relation, dtype=etype_type)))
        relations[index] = None  # each relation's local edges are freed once sent
        del ends, positions
    joined = []
    for column in range(4):  # one column at a time, its pieces freed as it is joined
        joined.append(np.concatenate([piece[column] for piece in pieces]))
        pieces = [tuple(None if c == column else a for c, a in enumerate(piece)) for piece in pieces]
    del pieces
    first, end = (int(x) for x in starts[comm.rank:comm.rank + 2])
    ndata = {"label": np.full(end - first, UNLABELLED, dtype=np.int64)}
    for mask in ("train_mask", "val_mask", "test_mask"):
        ndata[mask] = np.zeros(end - first, dtype=bool)
    graph = SpreadGraph(num_nodes, starts, joined[0], joined[1], joined[2], ndata, {ETYPE: joined[3]}, "hetero",
                        f"<hetero seed={seed}>", symmetric=add_reverse, input_edges=int(relation_first[-1]),
                        schema=schema, type_offsets=offsets)
    del joined
    for t, node_type in enumerate(types):
        lo, hi = graph.type_rows(comm.rank, t)
        rows = type_fields(node_type, classes[node_type], num_classes, feat_dim, feat_signal, fractions, seed, lo, hi)
        graph.typed_fields[node_type] = {"feat": rows["feat"]}
        if node_type == TARGET:
            at = slice(int(offsets[t]) + lo - first, int(offsets[t]) + hi - first)
            for name in ("label", "train_mask", "val_mask", "test_mask"):
                ndata[name][at] = rows[name]
    summary = {"nodes": dict(counts),
               "edges": {rel: int(n) for (_, rel, _), n in zip(triples, relation_edges)},
               "cites_homophily": comm.allreduce(same_class, op=mpi().SUM) / max(edges[0], 1)}
    return validate(comm, graph), summary
