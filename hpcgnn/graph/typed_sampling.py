"""Per-relation one-hop primitives of a typed :class:`~hpcgnn.graph.DistGraph`.

Every edge of a typed dataset carries its relation id in the edge field
:data:`~hpcgnn.format.schema.ETYPE`, and every node's in-edges sit in its owner's CSC grouped by
relation id, ascending. A node's in-edges of one relation are therefore one contiguous run of its
CSC row, which :func:`sample_neighbors_by_relation` samples with that relation's own fanout (the
compiled kernel :func:`hpcgnn._sample.sample_positions_by_relation`): a node whose in-edges span
more relations than any fanout still gets picks of every relation it has.

The relation ids of the candidate edges are read with the edge field's rows (node-local rows from
shared memory, rows on other machines with one request per owner), as the sources are. A dataset
without the field is the one-relation case: every edge has relation 0, and the picks are those of
:meth:`~hpcgnn.graph.DistGraph.sample_neighbors` bit for bit.
"""
from __future__ import annotations

import numpy as np

from hpcgnn import _csr, _sample
from hpcgnn.format.schema import ETYPE
from hpcgnn.graph.dist_graph import Neighbors


def _candidate_relations(graph, begin, degree, owners) -> np.ndarray:
    """Every candidate in-edge's relation id, node after node (all 0 without an ``etype`` field)."""
    total = int(degree.sum())
    field = graph.edata.get(ETYPE)
    if field is None:
        return np.zeros(total, dtype=np.int8)
    positions = _csr.expand_ranges(begin, degree)
    if owners is None:
        return field.local[positions]
    return field.gather(graph.edge_book.starts[np.repeat(owners, degree)] + positions)


def relation_fanouts(fanouts_by_relation, relations, graph=None) -> np.ndarray:
    """Local. ``fanouts_by_relation`` as the kernel's int64 array. An int is every relation's
    fanout: repeated for the graph schema's relations, or more when the candidate ``relations``
    hold a larger id. A sequence gives one fanout per relation (-1: all, 0: none)."""
    if np.ndim(fanouts_by_relation) == 0:
        schema = getattr(graph, "schema", None)
        count = max(schema.num_relations if schema is not None else 1,
                    int(relations.max()) + 1 if relations.shape[0] else 1)
        return np.full(count, int(fanouts_by_relation), dtype=np.int64)
    fanouts = np.ascontiguousarray(fanouts_by_relation, dtype=np.int64)
    if fanouts.ndim != 1:
        raise ValueError(f"fanouts_by_relation must be an int or a 1-D sequence, got shape {fanouts.shape}")
    return fanouts


def sample_neighbors_by_relation(graph, seeds, fanouts_by_relation, replace=False, seed=0):
    """Local. Pick up to ``fanouts_by_relation[r]`` in-neighbours of every node of ``seeds`` (any
    owner) along each relation ``r``.

    Parameters
    ----------
    graph : DistGraph
    seeds : array of int64
        Global ids (repeats allowed).
    fanouts_by_relation : int or sequence of int
        Picks per node and relation (-1: every in-edge of that relation, 0: none); an int applies
        to every relation.
    replace : bool
        Pick with replacement.
    seed : int
        Seed of the counter-based streams (:mod:`hpcgnn._sample`), keyed by the seed's index in
        ``seeds`` and the relation: the same seed and seeds give the same picks on any number of
        ranks, and a one-relation graph gives :meth:`~hpcgnn.graph.DistGraph.sample_neighbors`'.

    Returns
    -------
    neighbors : Neighbors
        The picks, grouped by node and, inside a node, by relation id ascending.
    etype : int64 array
        The relation id of every picked edge.
    """
    seeds = np.asarray(seeds, dtype=np.int64)
    begin, degree, owners = graph.in_edge_ranges(seeds)
    relations = _candidate_relations(graph, begin, degree, owners)
    fanouts = relation_fanouts(fanouts_by_relation, relations, graph)
    counts, positions, etype = _sample.sample_positions_by_relation(begin, degree, relations, fanouts, replace, seed)
    src, eids = graph.edges_at(owners, counts, positions)
    return Neighbors(counts, src, eids, degree), etype


def in_edges_by_relation(graph, gids):
    """Local. All in-edges of any nodes with their relation ids: ``(offsets, src_gids, eids, etype)``
    in CSR form over ``gids`` (as :meth:`~hpcgnn.graph.DistGraph.in_edges`), each node's edges
    grouped by relation id ascending; ``etype`` int64 (all 0 without an ``etype`` field)."""
    offsets, src, eids = graph.in_edges(gids)
    field = graph.edata.get(ETYPE)
    etype = np.zeros(eids.shape[0], dtype=np.int64) if field is None else field.gather(eids).astype(np.int64)
    return offsets, src, eids, etype
