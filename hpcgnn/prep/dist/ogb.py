"""An OGB node-property dataset streamed into the ranks: no rank ever holds the whole graph.

OGB ships gzipped CSV (``raw/edge.csv.gz``, ``node-feat.csv.gz``, ...), which cannot be read
by byte ranges. Rank 0 therefore parses each file a block at a time, and after every block
the ranks exchange it: edges go to the owner of their destination, feature and label rows to
the owner of their node id (an exchange in which only rank 0 sends). Rank 0 holds one block
plus its own share; the split files (node id lists) go to the ids' owners the same way. The
result is :func:`hpcgnn.prep.read.ogb.read_ogb`'s graph, spread like every other parallel
read, and bad input gives its errors on every rank. Edge features (``edge-feat.csv.gz``) are
not streamed: such a dataset is read whole by rank 0.
"""
from __future__ import annotations

import os

import numpy as np

from hpcgnn.prep.dist.blocks import block_starts, owner_of, send_to_owners
from hpcgnn.prep.dist.spread import SpreadGraph, validate
from hpcgnn.prep.read.ogb import (
    SPLIT_FILES,
    dataset_counts,
    dataset_root,
    find_file,
    label_values,
    require_file,
    scheme_dir,
)
from hpcgnn.prep.read.text import DEFAULT_CHUNK_BYTES, numeric_blocks
from hpcgnn.runtime.collectives import fail_together
from hpcgnn.runtime.errors import InputError


def streamable(directory) -> bool:
    """Local. Whether the dataset can be streamed (it has no edge features)."""
    return find_file(os.path.join(dataset_root(directory), "raw"), "edge-feat") is None


def _blocks_from_rank0(comm, path, dtype, names, chunk_bytes, allow_empty=False):
    """Collective over comm. Rank 0's parsed blocks of ``path``, one per iteration on every rank
    (the others get None); an error on rank 0 is raised on every rank."""
    blocks = numeric_blocks(path, dtype, names=names, allow_empty=allow_empty, chunk_bytes=chunk_bytes) \
        if comm.rank == 0 else None
    while True:
        rows, error = None, None
        if comm.rank == 0:
            try:
                rows = next(blocks, None)
            except InputError as exc:
                error = exc
        fail_together(comm, error, path)
        if not comm.bcast(rows is not None, root=0):
            return
        yield rows


def _stream_node_rows(comm, path, dtype, num_nodes, starts, chunk_bytes):
    """Collective over comm. This rank's block of a one-row-per-node table."""
    mine, seen, width = [], 0, 1
    for rows in _blocks_from_rank0(comm, path, dtype, None, chunk_bytes):
        ids, error = np.empty(0, dtype=np.int64), None
        if comm.rank == 0:
            ids = np.arange(seen, seen + rows.shape[0], dtype=np.int64)
            seen += rows.shape[0]
            if seen > num_nodes:
                error = InputError(path, f"more rows than the {num_nodes} nodes in num-node-list", "rows",
                                   f">{num_nodes}")
        fail_together(comm, error, path)
        width = comm.bcast(rows.shape[1] if comm.rank == 0 else None, root=0)
        (got,) = send_to_owners(comm, owner_of(ids, starts), rows if comm.rank == 0 else np.empty((0, width), dtype))
        mine.append(got)
    total = comm.bcast(seen, root=0)
    if total != num_nodes:
        raise InputError(path, f"has {total} rows but {num_nodes} nodes in num-node-list", "rows", total)
    return np.concatenate(mine) if mine else np.empty((0, width), dtype)


def read_ogb_spread(comm, directory, split=None, name=None, chunk_bytes=DEFAULT_CHUNK_BYTES) -> SpreadGraph:
    """Collective over comm. :func:`~hpcgnn.prep.read.ogb.read_ogb`'s graph, streamed by rank 0
    block by block into the ranks (module docstring)."""
    directory, raw, edge_path, num_nodes, expected = dataset_counts(directory)
    starts = block_starts(num_nodes, comm.size)
    src, dst, eid, seen = [], [], [], 0
    for rows in _blocks_from_rank0(comm, edge_path, np.int64, ["src", "dst"], chunk_bytes):
        block = rows if comm.rank == 0 else np.empty((0, 2), np.int64)
        error = None
        if expected is not None and seen + block.shape[0] > expected:
            error = InputError(edge_path, f"more rows than the {expected} edges in num-edge-list", "rows",
                               f">{expected}")
        for column, field in ((0, "src"), (1, "dst")):
            ids = block[:, column]
            if error is None and ids.size and (ids.min() < 0 or ids.max() >= num_nodes):
                bad = int(ids.min()) if ids.min() < 0 else int(ids.max())
                error = InputError(edge_path, f"node id out of range [0, {num_nodes})", field, bad)
        fail_together(comm, error, edge_path)
        numbers = np.arange(seen, seen + block.shape[0], dtype=np.int64)
        seen += block.shape[0]
        got = send_to_owners(comm, owner_of(block[:, 1], starts), block[:, 0].copy(), block[:, 1].copy(), numbers)
        for bucket, values in zip((src, dst, eid), got):
            bucket.append(values)
    num_edges = int(comm.bcast(seen, root=0))
    if expected is not None and num_edges != expected:
        raise InputError(edge_path, f"has {num_edges} rows but {expected} edges in num-edge-list", "rows", num_edges)
    ndata = {}
    feat_path = find_file(raw, "node-feat")
    if feat_path:
        ndata["feat"] = _stream_node_rows(comm, feat_path, np.float32, num_nodes, starts, chunk_bytes)
    label_path = find_file(raw, "node-label")
    if label_path:
        values = _stream_node_rows(comm, label_path, np.float64, num_nodes, starts, chunk_bytes)
        error, labels = None, None
        try:
            labels = label_values(label_path, values)
        except InputError as exc:
            error = exc
        fail_together(comm, error, label_path)
        ndata["label"] = labels
    ndata.update(_spread_masks(comm, directory, split, num_nodes, starts, chunk_bytes))
    graph = SpreadGraph(num_nodes, starts, np.concatenate(src), np.concatenate(dst), np.concatenate(eid), ndata,
                        {}, name or os.path.basename(os.path.abspath(directory)), directory, input_edges=num_edges)
    return validate(comm, graph)


def _spread_masks(comm, directory, scheme, num_nodes, starts, chunk_bytes) -> dict:
    """Collective over comm. This rank's block of the split masks (the id lists sent to owners)."""
    split_dir = scheme_dir(directory, scheme)
    if split_dir is None:
        return {}
    first, end = int(starts[comm.rank]), int(starts[comm.rank + 1])
    masks = {}
    for stem, mask_name in SPLIT_FILES:
        path = require_file(split_dir, stem)
        mask = np.zeros(end - first, dtype=bool)
        for rows in _blocks_from_rank0(comm, path, np.int64, [stem], chunk_bytes, allow_empty=True):
            ids = rows[:, 0] if comm.rank == 0 else np.empty(0, np.int64)
            bad = ids[(ids < 0) | (ids >= num_nodes)]
            error = InputError(path, f"node id out of range [0, {num_nodes})", stem, int(bad[0])) if bad.size else None
            fail_together(comm, error, path)
            (got,) = send_to_owners(comm, owner_of(ids, starts), ids)
            mask[got - first] = True
        masks[mask_name] = mask
    return masks
