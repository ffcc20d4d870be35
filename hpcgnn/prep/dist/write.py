"""Writing the partitioned dataset from a graph spread over the ranks.

The on-disk result is the serial writer's (:mod:`hpcgnn.format.ondisk`): part ``p`` owns a
contiguous range of new ids, nodes keep their input order inside a part, ``eid`` numbers the
cleaned edge list, and meta.json's ``edge_digest`` is that edge list's digest in orig ids
(:mod:`hpcgnn.prep.edge_digest`), taken before the writer renumbers anything. Part ``p`` is
assembled and written by rank ``p % K``: every rank sends it the rows of its nodes in ``p``
and the in-edges of those nodes, so no rank ever holds more than its parts' share of the graph.

A typed graph is written as the serial partitioner writes it for the same part assignment
(:func:`hpcgnn.prep.partition.partition_graph`): a part's nodes ordered by (type, input id), so
each (part, type) block is contiguous; every per-type field row (``feat@paper``) sent to its
part's writer and stored in new-id order; edges numbered in input order (the graph's ``eid``,
:func:`~hpcgnn.prep.dist.spread.serial_edge_ids`), so each node's in-edges keep their
relations in ascending order; meta.json's ``schema`` entry from the allreduced type and
relation counts, format version 3.
"""
from __future__ import annotations

import time

import numpy as np

from hpcgnn.format import ondisk
from hpcgnn.format.feat_dtype import encode, encoding_of
from hpcgnn.format.fields import ORIG_ID
from hpcgnn.format.schema import ETYPE, TypeLayout, typed_field_name
from hpcgnn.prep.dist.blocks import fetch_in_steps, send_to_owners, starts_from_counts
from hpcgnn.prep.dist.spread import SpreadGraph
from hpcgnn.prep.edge_digest import EdgeDigest, graph_digest
from hpcgnn.prep.part_files import (
    dataset_meta,
    field_specs,
    part_stats,
    schema_meta,
    type_imbalance,
    typed_field_specs,
    write_part_file,
)
from hpcgnn.prep.partition import feat_names  # the serial writer's choice of datasets to encode
from hpcgnn.runtime.comm import mpi
from hpcgnn.runtime.files import forget, make_temp_dir, remove_temp_dir, replace_dir, track_temporary
from hpcgnn.runtime.stages import silent


def _new_ids(comm, group, num_groups) -> tuple[np.ndarray, np.ndarray]:
    """Collective over comm. ``(group_starts, new_id)``: where each group's ids begin, and the
    new id of every block node: its group's start plus its rank in input order among the
    group's nodes (blocks are in input order, so lower ranks' nodes come first). A group is a
    part, or on a typed graph a (part, type) block, ``part * T + type``."""
    counts = np.zeros((comm.size, num_groups), dtype=np.int64)
    comm.Allgather(np.bincount(group, minlength=num_groups).astype(np.int64), counts)
    group_starts = starts_from_counts(counts.sum(axis=0))
    order = np.argsort(group, kind="stable")
    sorted_groups = group[order]
    group_first = np.searchsorted(sorted_groups, sorted_groups, side="left")
    new_id = np.empty(group.shape[0], dtype=ondisk.id_dtype(int(group_starts[-1])))
    new_id[order] = (group_starts[sorted_groups] + counts[:comm.rank, :].sum(axis=0)[sorted_groups]
                     + np.arange(group.shape[0]) - group_first)
    return group_starts, new_id


def _spread_digest(comm, graph: SpreadGraph, orig) -> EdgeDigest:
    """Collective over comm. The :class:`~hpcgnn.prep.edge_digest.EdgeDigest` of the edges of
    ``graph`` in orig ids (``orig``: this block's), the same value the serial writer records
    for the same cleaned graph: a source's orig id is read from its owner, a destination's is local."""
    first = graph.block(comm.rank)[0]
    if ORIG_ID in graph.ndata:
        src = fetch_in_steps(comm, graph.src, graph.starts, orig)
        dst = orig[graph.dst - first]
    else:  # orig ids are the ids: nothing to look up
        src, dst = graph.src, graph.dst
    return graph_digest(src, dst).allreduce(comm)


def write_spread(comm, graph: SpreadGraph, part, num_parts, out_dir, partitioner: dict, source: dict,
                 checksums=True, feat_dtype="float32", log=silent) -> dict | None:
    """Collective over comm. Write ``graph`` split by ``part`` (the part of every block node)
    into ``out_dir``, replaced atomically; returns meta.json's content on rank 0. Consumes the
    graph: its node rows and edge ends are released as they go to their writers."""
    t0 = time.perf_counter()
    first = graph.block(comm.rank)[0]
    typed = graph.schema is not None
    layout = None
    if typed:
        num_types = graph.schema.num_types
        group_starts, new_id = _new_ids(comm, part * num_types + graph.block_types(comm.rank), num_parts * num_types)
        layout = TypeLayout(graph.schema, np.diff(group_starts).reshape(num_parts, num_types))
        node_starts = layout.node_starts
    else:
        node_starts, new_id = _new_ids(comm, part, num_parts)
    local_dst = graph.dst - first
    # per-edge arrays in the narrowest type the totals allow: they are the writer's memory
    in_degree = np.bincount(local_dst, minlength=part.shape[0])
    edge_counts = np.bincount(part, weights=in_degree, minlength=num_parts).astype(np.int64)
    comm.Allreduce(mpi().IN_PLACE, edge_counts, op=mpi().SUM)
    edge_starts = starts_from_counts(edge_counts)
    eid_type = ondisk.id_dtype(int(edge_starts[-1]))
    if typed:  # the serial numbering, in input order (spread.serial_edge_ids)
        edge_ids = graph.eid.astype(eid_type, copy=False)
    else:
        edge_offset = comm.exscan(graph.num_local_edges) or 0  # None on rank 0
        edge_ids = np.arange(edge_offset, edge_offset + graph.num_local_edges, dtype=eid_type)
    orig = graph.ndata.get(ORIG_ID, np.arange(first, first + part.shape[0], dtype=np.int64))
    edge_digest = _spread_digest(comm, graph, orig)
    graph.dst = None  # local_dst from here on
    fields = {k: v for k, v in graph.ndata.items() if k != ORIG_ID}
    field_names = list(fields)
    writer = (part % comm.size).astype(np.int32)
    nodes = send_to_owners(comm, writer, new_id, orig, *fields.values())
    del fields
    graph.ndata = {}  # the rows went to their writers: the graph is consumed
    typed_rows = _send_typed_rows(comm, graph, writer, new_id) if typed else {}
    src_new_id = fetch_in_steps(comm, graph.src, graph.starts, new_id)
    graph.src = None
    edges = send_to_owners(comm, writer[local_dst], new_id[local_dst], src_new_id, edge_ids, *graph.edata.values())
    del local_dst, writer, edge_ids, src_new_id
    relation_counts = None
    if typed:
        relation_counts = np.bincount(graph.edata[ETYPE], minlength=graph.schema.num_relations).astype(np.int64)
        comm.Allreduce(mpi().IN_PLACE, relation_counts, op=mpi().SUM)
    version = ondisk.TYPED_VERSION if typed else ondisk.FORMAT_VERSION
    # every rank tracks it: whichever rank ends the job (a signal, a failure) removes it
    tmp_dir = track_temporary(comm.bcast(make_temp_dir(out_dir) if comm.rank == 0 else None, root=0))
    comm.Barrier()  # no part file is written before every rank tracks the directory
    try:
        written = []
        for part_id in range(comm.rank, num_parts, comm.size):
            arrays = _part_arrays(graph, part_id, node_starts, nodes, edges, field_names, int(edge_starts[-1]))
            if typed:
                arrays.update(_part_typed_arrays(layout, part_id, typed_rows))
            for name in feat_names(arrays) if feat_dtype != "float32" else ():
                arrays[name] = encode(arrays[name], feat_dtype, source.get("input"))
            encodings = {name: encoding_of(feat_dtype) for name in feat_names(arrays)}
            stats = part_stats(arrays, node_starts[part_id], node_starts[part_id + 1])
            specs = (field_specs(arrays, encodings),
                     typed_field_specs(arrays, graph.schema, encodings) if typed else None)
            entry = write_part_file(tmp_dir, arrays, part_id, num_parts, node_starts, edge_starts[part_id],
                                    checksums, version)
            written.append((part_id, stats, entry, specs))
            del arrays
        gathered = comm.gather(written, root=0)
    except BaseException:
        remove_temp_dir(tmp_dir)
        raise
    meta = None
    if comm.rank == 0:
        written = sorted((item for chunk in gathered for item in chunk), key=lambda item: item[0])
        log(f"write {num_parts} part files from {comm.size} rank{'s' if comm.size > 1 else ''}")
        meta = dataset_meta(graph.name, graph.num_nodes, node_starts, edge_starts, [w[1] for w in written],
                            {w[0]: w[2] for w in written}, written[0][3][0],
                            dict(partitioner, writers=comm.size, write_s=round(time.perf_counter() - t0, 3)),
                            source, edge_digest)
        if typed:
            meta["version"] = version
            meta["schema"] = schema_meta(relation_counts, layout, written[0][3][1])
            meta["partitioner"]["imbalance"].update(type_imbalance(layout))
        ondisk.write_meta(tmp_dir, meta)
        replace_dir(tmp_dir, out_dir)
    comm.barrier()
    forget(tmp_dir)
    return meta


def _send_typed_rows(comm, graph: SpreadGraph, writer, new_id) -> dict:
    """Collective over comm. ``{type: (new ids, {field: rows})}``: the rows of every per-type
    field that this rank writes, sent by the ranks holding them (each row beside its node's new id)."""
    received = {}
    for node_type in graph.schema.node_types:
        fields = graph.typed_fields.get(node_type)
        if not fields:
            continue
        t = graph.schema.type_index(node_type)
        lo, hi = graph.type_rows(comm.rank, t)
        local = np.arange(lo, hi, dtype=np.int64) + int(graph.type_offsets[t]) - graph.block(comm.rank)[0]
        moved = send_to_owners(comm, writer[local], new_id[local], *fields.values())
        received[node_type] = (moved[0], dict(zip(fields, moved[1:])))
        graph.typed_fields[node_type] = {}  # sent: the graph is consumed
        del fields, moved
    return received


def _part_typed_arrays(layout: TypeLayout, part_id, typed_rows) -> dict:
    """Part ``part_id``'s per-type field datasets (``field@type``), rows in new-id order; a part
    without nodes of a type holds its fields with no rows."""
    arrays = {}
    for node_type, (ids, fields) in typed_rows.items():
        lo, hi = layout.block_range(part_id, layout.schema.type_index(node_type))
        mine = np.flatnonzero((ids >= lo) & (ids < hi))
        mine = mine[np.argsort(ids[mine], kind="stable")]
        for field, rows in fields.items():
            arrays[typed_field_name(node_type, field)] = rows[mine]
    return arrays


def _part_arrays(graph, part_id, node_starts, nodes, edges, field_names, num_edges) -> dict:
    """Part ``part_id``'s datasets from the node and edge rows this rank received."""
    lo, hi = int(node_starts[part_id]), int(node_starts[part_id + 1])
    ids = nodes[0]
    mine = np.flatnonzero((ids >= lo) & (ids < hi))
    mine = mine[np.argsort(ids[mine], kind="stable")]
    dst, src, eid = edges[0], edges[1], edges[2]
    incoming = np.flatnonzero((dst >= lo) & (dst < hi))
    incoming = incoming[np.lexsort((eid[incoming], dst[incoming]))]  # CSC: by destination, then edge order
    degree = np.bincount(dst[incoming] - lo, minlength=hi - lo)
    arrays = {
        "indptr": np.concatenate([[0], np.cumsum(degree)]).astype(np.int64),
        "indices": src[incoming].astype(ondisk.id_dtype(graph.num_nodes)),
        "eid": eid[incoming].astype(ondisk.id_dtype(num_edges)),
        "orig_id": nodes[1][mine].astype(np.int64),
    }
    for name, rows in zip(field_names, nodes[2:]):
        arrays[name] = rows[mine]
    for name, rows in zip(graph.edata, edges[3:]):
        arrays[ondisk.EDGE_PREFIX + name] = rows[incoming]
    return arrays
