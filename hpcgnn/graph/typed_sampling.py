"""Per-relation one-hop primitives of a typed :class:`~hpcgnn.graph.DistGraph`.

Every edge of a typed dataset carries its relation id in the edge field
:data:`~hpcgnn.format.schema.ETYPE`, and every node's in-edges sit in its owner's CSC grouped by
relation id, ascending. A node's in-edges of one relation are therefore one contiguous run of its
CSC row, which :func:`sample_neighbors_by_relation` samples with that relation's own fanout (the
compiled kernel :func:`hpcgnn._sample.sample_positions_by_relation`): a node whose in-edges span
more relations than any fanout still gets picks of every relation it has.

When this machine's memory holds every rank's CSC and edge field (one node: the shared-memory
windows), a hop is one pass of :func:`hpcgnn._sample.sample_hop_by_relation` over those tables:
each node's owner, row, relation runs, picks, sources and edge ids without an intermediate
array per step. Otherwise the relation ids of the candidate edges are read with the edge field's
rows (node-local rows from shared memory, rows on other machines with one request per owner), as
the sources are; both routes pick the same edges. A dataset without the field is the
one-relation case: every edge has relation 0, and the picks are those of
:meth:`~hpcgnn.graph.DistGraph.sample_neighbors` bit for bit.
"""
from __future__ import annotations

import numpy as np

from hpcgnn import _csr, _sample
from hpcgnn.format.schema import ETYPE
from hpcgnn.graph.dist_graph import Neighbors


def _candidate_relations(graph, begin, degree, owners):
    """``(table, starts)``: node ``i``'s candidate in-edges have relation ids
    ``table[starts[i]:starts[i] + degree[i]]``. Read in place where the rows are in this machine's
    memory (this rank's edge field, or the node's shared table); otherwise gathered, node after
    node, with one request per owner (``starts`` None). All 0 without an ``etype`` field."""
    field = graph.edata.get(ETYPE)
    if field is None:
        return np.zeros(int(degree.max()) if degree.shape[0] else 0, dtype=np.int8), np.zeros_like(degree)
    if owners is None:
        return field.local, begin
    window = field.window
    rows = window.node_table_rows(owners, begin)
    if rows is not None:
        return window.node_table, rows
    positions = _csr.expand_ranges(begin, degree)
    return field.gather(graph.edge_book.starts[np.repeat(owners, degree)] + positions), None


def _node_tables(graph):
    """The CSC and relation tables of every rank as this machine's memory holds them, in the
    order :func:`hpcgnn._sample.sample_hop_by_relation` takes them after the part starts; None
    when some rank's rows are on another machine or the dataset has no ``etype`` field."""
    field = graph.edata.get(ETYPE)
    csc = graph.node_csc() if field is not None else None
    if csc is None:
        return None
    ranks = np.arange(graph.num_parts, dtype=np.int64)
    relation_row = field.window.node_table_rows(ranks, np.zeros_like(ranks))
    if relation_row is None:
        return None
    return (*csc, field.window.node_table, relation_row, graph.edge_book.starts)


def num_relations(graph) -> int:
    """Local. How many relation ids ``graph``'s edges may carry: its schema's relations; for an
    untyped dataset, 1 without an ``etype`` field, else every id the field's dtype holds."""
    schema = getattr(graph, "schema", None)
    field = graph.edata.get(ETYPE)
    if schema is not None and (not schema.is_homogeneous or field is None):
        return schema.num_relations
    return 1 if field is None else int(np.iinfo(field.dtype).max) + 1


def relation_fanouts(fanouts_by_relation, graph) -> np.ndarray:
    """Local. ``fanouts_by_relation`` as the kernel's int64 array: an int is every relation's
    fanout (:func:`num_relations` of them), a sequence one fanout per relation id (-1: all, 0: none)."""
    if np.ndim(fanouts_by_relation) == 0:
        return np.full(num_relations(graph), int(fanouts_by_relation), dtype=np.int64)
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
    seeds : array of int64, or dict
        Global ids (repeats allowed), or ``{node type: ids among that type's nodes}`` (taken in
        the dict's order, as the global ids :meth:`~hpcgnn.format.schema.TypeLayout.gids_of` gives).
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
    if isinstance(seeds, dict):
        layout = graph.layout
        seeds = np.concatenate([layout.gids_of(layout.schema.type_index(t), tids) for t, tids in seeds.items()]
                               + [np.empty(0, np.int64)])
    seeds = np.ascontiguousarray(seeds, dtype=np.int64)
    fanouts = relation_fanouts(fanouts_by_relation, graph)
    tables = _node_tables(graph)
    if tables is not None:  # every row in this machine's memory: one pass of the kernel
        counts, src, eids, etype, degree = _sample.sample_hop_by_relation(seeds, graph.book.starts, *tables, fanouts,
                                                                          replace, seed)
        return Neighbors(counts, src, eids, degree), etype
    begin, degree, owners = graph.in_edge_ranges(seeds)
    table, starts = _candidate_relations(graph, begin, degree, owners)
    counts, positions, etype = _sample.sample_positions_by_relation(begin, degree, table, fanouts, replace, seed,
                                                                    starts)
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
