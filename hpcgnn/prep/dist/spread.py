"""A graph spread over the ranks: each rank holds its block of nodes and their in-edges.

This is the distributed pipeline's counterpart of :class:`~hpcgnn.prep.graph.Graph`: node ids
are split in contiguous blocks (:func:`~hpcgnn.prep.dist.blocks.block_starts`), and rank ``r``
holds the rows of every node field for its block and every edge whose destination is in it, so
no rank holds more than its share of the graph.

A typed graph (:mod:`hpcgnn.prep.typed`) numbers its input ids type by type
(``type_offsets``), so a rank's block of ids holds a contiguous run of each type's ids: the
intersection of its block with the type's range. ``typed_fields[type][field]`` holds the rows of
that run (:meth:`SpreadGraph.type_rows`), and edge field :data:`~hpcgnn.format.schema.ETYPE`
each edge's relation, carried like any edge field.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from hpcgnn.format.fields import check_node_field
from hpcgnn.format.ondisk import id_dtype
from hpcgnn.prep.dist.blocks import ask_owners, block_starts, owner_of, send_to_owners
from hpcgnn.prep.graph import check_masks_and_labels
from hpcgnn.runtime.collectives import fail_together
from hpcgnn.runtime.comm import mpi
from hpcgnn.runtime.errors import InputError


@dataclass
class SpreadGraph:
    """Local. This rank's share of a directed graph spread over ``comm``.

    ``src``/``dst`` are int64 global ids, every ``dst`` in ``[starts[rank], starts[rank+1])``;
    ``eid`` is each edge's position in the input edge list (of two copies of an edge, dedup
    keeps the lower one, as the serial clean-up keeps the first); ``ndata`` holds this block's
    rows of every node field and ``edata`` each edge's row of every edge field.
    """

    num_nodes: int
    starts: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    eid: np.ndarray
    ndata: dict = field(default_factory=dict)
    edata: dict = field(default_factory=dict)
    name: str = "graph"
    source: str = "<memory>"
    symmetric: bool = False
    #: the input's edge count: reverse copies made by symmetrize number from here on
    input_edges: int = 0
    #: a typed graph's :class:`~hpcgnn.format.schema.Schema`, the first input id of every node
    #: type (``[T + 1]``) and this block's rows of every per-type node field (module docstring);
    #: None, None and empty for a homogeneous graph
    schema: object = None
    type_offsets: np.ndarray | None = None
    typed_fields: dict = field(default_factory=dict)

    @property
    def num_local_edges(self) -> int:
        return int(self.src.shape[0])

    def block(self, rank) -> tuple[int, int]:
        """Local. ``(first, end)`` node ids of ``rank``'s block."""
        return int(self.starts[rank]), int(self.starts[rank + 1])

    def type_rows(self, rank, node_type: int) -> tuple[int, int]:
        """Local. ``(lo, hi)``: the ids among type ``node_type``'s nodes (its field rows) that
        ``rank``'s block holds, the intersection of the block with the type's range."""
        first, end = self.block(rank)
        type_first, type_end = int(self.type_offsets[node_type]), int(self.type_offsets[node_type + 1])
        lo, hi = max(first, type_first), min(end, type_end)
        return lo - type_first, max(lo, hi) - type_first

    def block_types(self, rank) -> np.ndarray:
        """Local. The node type id of every node of ``rank``'s block (a typed graph)."""
        first, end = self.block(rank)
        return (np.searchsorted(self.type_offsets, np.arange(first, end, dtype=np.int64), side="right") - 1)

    def num_edges(self, comm) -> int:
        """Collective over comm. Edges over all ranks."""
        return int(comm.allreduce(self.num_local_edges, op=mpi().SUM))

    def release_edges(self):
        """Local. Drop this object's edge arrays, for a step that consumes its input graph (the
        caller still holds the object; its arrays are what take the memory)."""
        empty = np.empty(0, dtype=np.int64)
        self.src, self.dst, self.eid = empty, empty, empty
        self.edata = {k: v[:0] for k, v in self.edata.items()}

    def compact(self) -> SpreadGraph:
        """Local. For the partitioning, which needs only the edges' ends: ids as int32 when the
        node count allows, and ``eid`` dropped (it only ranks copies for dedup), except on a
        typed graph, whose writer numbers the edges as the serial pipeline does
        (:func:`serial_edge_ids`: the caller has put them in ``eid``)."""
        ids = id_dtype(self.num_nodes)
        src = self.src.astype(ids)
        self.src = None  # one int64 array at a time is freed as its narrow copy is made
        dst = self.dst.astype(ids)
        self.dst = None
        eid = self.eid if self.schema is not None else np.empty(0, dtype=np.int64)
        return replace(self, src=src, dst=dst, eid=eid)

    def with_edges(self, keep=None, src=None, dst=None, eid=None, edata=None, symmetric=None) -> SpreadGraph:
        """Local. A copy with another edge set (``keep`` selects existing edges)."""
        if keep is not None:
            src, dst, eid = self.src[keep], self.dst[keep], self.eid[keep]
            edata = {k: v[keep] for k, v in self.edata.items()}
        return replace(self, src=src, dst=dst, eid=eid, edata=edata,
                       symmetric=self.symmetric if symmetric is None else symmetric)


def to_destination_owners(comm, graph: SpreadGraph) -> SpreadGraph:
    """Collective over comm. Move every edge to the rank that owns its destination."""
    names = list(graph.edata)
    moved = send_to_owners(comm, owner_of(graph.dst, graph.starts), graph.src, graph.dst, graph.eid,
                           *(graph.edata[k] for k in names))
    return graph.with_edges(src=moved[0], dst=moved[1], eid=moved[2], edata=dict(zip(names, moved[3:])))


def serial_edge_ids(comm, graph: SpreadGraph) -> np.ndarray:
    """Collective over comm. The id the serial pipeline gives every local edge: its position in
    input order (``eid``) among the edges kept over all ranks, in the narrowest id type.

    The owners of ``input_edges / K``-long ranges of input positions mark the positions kept,
    count them in order and answer each edge with its count, so no rank holds more than its
    share of either numbering."""
    total = int(comm.allreduce(graph.num_local_edges, op=mpi().SUM))
    if total == graph.input_edges:  # nothing dropped: the input positions are the ids
        return graph.eid.astype(id_dtype(total))
    starts = block_starts(max(graph.input_edges, 1), comm.size)
    first, end = int(starts[comm.rank]), int(starts[comm.rank + 1])
    kept = np.zeros(end - first, dtype=bool)

    def number(local_positions):
        kept[local_positions] = True
        before = np.cumsum(kept, dtype=np.int64) - 1
        offset = comm.exscan(int(np.count_nonzero(kept))) or 0  # None on rank 0
        return before[local_positions] + offset

    ids = ask_owners(comm, graph.eid, starts, number)
    return ids.astype(id_dtype(total))


def validate(comm, graph: SpreadGraph) -> SpreadGraph:
    """Collective over comm. The checks of :meth:`Graph.validate` on a spread graph, raising the
    same InputError on every rank (the failing rank's own, naming file, field and global id)."""
    error = None
    try:
        _check_block(graph, graph.starts[comm.rank])
    except InputError as exc:
        error = exc
    fail_together(comm, error, graph.source)
    return graph


def _check_block(graph: SpreadGraph, first: int):
    where = graph.source
    for name, rows in graph.ndata.items():
        check_node_field(where, name, rows)
    for node_type, fields in graph.typed_fields.items():
        for name, rows in fields.items():
            check_node_field(where, f"{node_type}.{name}" if name != "feat" else "feat", rows)
    for name, rows in graph.edata.items():
        check_node_field(where, f"edge_{name}", rows)
    check_masks_and_labels(where, graph.ndata, first)
