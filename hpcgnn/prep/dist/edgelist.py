"""A plain-text edge list read by every rank, each a byte range split at line boundaries.

The bytes after the first content line are cut into K equal ranges; rank ``r`` parses the
lines that start in its range (it skips to the first line start, and reads on to the end of
the line its range ends in), with the serial reader's parser, so a bad token names its file
line: each rank counts the newlines of its range and an exclusive scan gives its first line
number. The serial reader's decisions that need the whole file (is a numeric first line a
count header or an edge? the node count) use global counts. Compressed files cannot be split
and, like pipes and edge lists with ``--relabel`` or a node table, are read by rank 0
(:func:`hpcgnn.prep.dist.ingest.spread_graph`).
"""
from __future__ import annotations

import os

import numpy as np

from hpcgnn.format.fields import ORIG_ID
from hpcgnn.prep.dist.blocks import block_starts
from hpcgnn.prep.dist.spread import SpreadGraph, to_destination_owners, validate
from hpcgnn.prep.read.edgelist import (
    check_delimiter,
    check_id_options,
    count_header,
    edge_arrays,
    edge_columns,
    first_line_edge,
    graph_name,
    guess_delimiter,
    leading_counts,
    refuse_one_based_counts,
)
from hpcgnn.prep.read.text import (
    DEFAULT_CHUNK_BYTES,
    TextTable,
    compression_of,
    file_kind,
    is_number,
    parse_block,
    require_regular,
    split_tokens,
)
from hpcgnn.runtime.collectives import fail_together
from hpcgnn.runtime.comm import mpi
from hpcgnn.runtime.errors import InputError

#: above any node id: the smallest id of a rank that parsed no edge
_NO_ID = 2**63 - 1


def splittable(path) -> bool:
    """Local. Whether ``path`` is a regular, uncompressed file that ranks can read by byte ranges."""
    return os.path.isfile(path) and file_kind(path) is None and compression_of(path) is None


def _line_start(fh, offset, first):
    """The first line start at or after ``offset`` (``first`` itself starts a line)."""
    if offset <= first:
        return first
    fh.seek(offset - 1)
    fh.readline()  # the rest of the line the byte before ``offset`` is in
    return fh.tell()


def _my_lines(comm, path, first):
    """This rank's whole lines of the bytes after ``first``, and the file line number of the first."""
    size = os.path.getsize(path)
    cuts = block_starts(size - first, comm.size) + first
    with open(path, "rb") as fh:
        start = _line_start(fh, int(cuts[comm.rank]), first)
        end = _line_start(fh, int(cuts[comm.rank + 1]), first) if comm.rank + 1 < comm.size else size
        fh.seek(start)
        text = fh.read(max(0, end - start))
    before = int(comm.exscan(text.count(b"\n")) or 0)
    return text, before


def _parse(table, text, line_number, delimiter, names, id_base, chunk_bytes):
    """Parse whole lines in blocks of about ``chunk_bytes``; ``(src, dst, weight)`` lists."""
    dtype = np.dtype([(n, np.float32 if n == "weight" else np.int64) for n in names])
    parts = ([], [], [])
    at = 0
    while at < len(text):
        cut = text.find(b"\n", min(at + chunk_bytes, len(text)) - 1)
        cut = len(text) if cut < 0 else cut + 1
        block = text[at:cut]
        rows = parse_block(table, block, line_number, dtype, delimiter, names, {0, 1}, exact=False)
        if rows.shape[0]:
            for bucket, values in zip(parts, edge_arrays(table.path, rows, names, id_base)):
                if values is not None:  # no weight column
                    bucket.append(values)
        line_number += block.count(b"\n")
        at = cut
    return parts


def read_edgelist_spread(comm, path, delimiter=None, header=None, id_base=0, num_nodes=None, comment="#",
                         name=None, chunk_bytes=DEFAULT_CHUNK_BYTES) -> SpreadGraph:
    """Collective over comm. :func:`hpcgnn.prep.read.read_edgelist`'s graph (without
    ``relabel``), each rank parsing a byte range of the file; spread by destination and validated."""
    path = os.fspath(path)
    require_regular(path, "is read by byte ranges, one on each rank")
    check_id_options(path, id_base, num_nodes)
    detect = delimiter is None
    delimiter = check_delimiter(path, delimiter)
    with TextTable(path, comment, chunk_bytes) as table:
        if table.first_line is None:
            raise InputError(path, "no edge lines (file is empty or only comments)", "src", "<none>")
        after_first = _after_first_line(path, table.first_line_number)
        if detect:
            delimiter = guess_delimiter(table.first_line)
        first_tokens = split_tokens(table.first_line, delimiter)
        if header is None and not all(is_number(token) for token in first_tokens[:2]):
            header = True
        text, before = _my_lines(comm, path, after_first)
        line_number = table.first_line_number + 1 + before
        error, parts, width = None, ([], [], []), None
        try:
            columns = edge_columns(table, text, line_number, delimiter)
            found = comm.allgather(columns)
            columns = next((c for c in found if c is not None), None)
            if columns is not None:
                parts = _parse(table, text, line_number, delimiter, columns[0], id_base, chunk_bytes)
                width = columns[1]
        except InputError as exc:
            error = exc
        fail_together(comm, error, path)
        del text
        src, dst, weight = (np.concatenate(p) if p else None for p in parts)
        src = np.empty(0, np.int64) if src is None else src
        dst = np.empty(0, np.int64) if dst is None else dst
        rows = int(comm.allreduce(src.shape[0], op=mpi().SUM))
        largest = int(comm.allreduce(int(max(src.max(initial=-1), dst.max(initial=-1))), op=mpi().MAX))
        smallest = int(comm.allreduce(int(min(src.min(initial=_NO_ID), dst.min(initial=_NO_ID))), op=mpi().MIN))
        counts = None
        if header:
            counts = leading_counts(first_tokens)
        elif header is None:
            counts = count_header(first_tokens, width, rows, largest, id_base, False)
            if counts is None:
                refuse_one_based_counts(path, (table.first_line_number, table.first_line), first_tokens, width,
                                        rows, smallest, largest, id_base, False)
        if not header and counts is None:  # the first line is an edge: the first edge, on rank 0
            (first_src, first_dst, first_weight), columns = first_line_edge(table, columns, delimiter, id_base)
            if comm.rank == 0:
                src, dst = np.concatenate([first_src, src]), np.concatenate([first_dst, dst])
                if first_weight is not None:
                    weight = first_weight if weight is None else np.concatenate([first_weight, weight])
            largest = max(largest, int(max(first_src.max(), first_dst.max())))
            rows += 1
        header_line = (table.first_line_number, table.first_line) if counts is not None else None
    if rows == 0:
        raise InputError(path, "no edge lines after the header", "src", "<none>")
    if header_line is not None and num_nodes is None and largest - id_base >= counts[0]:
        refuse_one_based_counts(path, header_line, first_tokens, None, None, smallest, largest, id_base, False)
    num_nodes = _node_count(path, num_nodes, counts, header_line, largest, id_base, src, dst, comm)
    if id_base:
        src -= id_base
        dst -= id_base
    starts = block_starts(num_nodes, comm.size)
    first, end = int(starts[comm.rank]), int(starts[comm.rank + 1])
    ndata = {ORIG_ID: np.arange(first + id_base, end + id_base, dtype=np.int64)} if id_base else {}
    has_weight = int(comm.allreduce(int(weight is not None), op=mpi().MAX))
    edata = {"weight": weight if weight is not None else np.empty(0, np.float32)} if has_weight else {}
    offset = int(comm.exscan(src.shape[0]) or 0)
    graph = SpreadGraph(num_nodes, starts, src, dst, np.arange(offset, offset + src.shape[0], dtype=np.int64),
                        ndata, edata, name or graph_name(path), path, input_edges=rows)
    return validate(comm, to_destination_owners(comm, graph))


def _after_first_line(path, first_line_number):
    """Byte offset just after the file's first content line (line ``first_line_number``)."""
    with open(path, "rb") as fh:
        for _ in range(first_line_number):
            fh.readline()
        return fh.tell()


def _node_count(path, num_nodes, counts, header_line, largest, id_base, src, dst, comm):
    """The serial reader's node count and its range errors, the same on every rank."""
    if header_line is not None and num_nodes is None:
        num_nodes = counts[0]
        if largest - id_base >= num_nodes:
            raise InputError(path, f"header line {header_line[0]} gives {num_nodes} nodes but node id {largest} "
                             "occurs (--num-nodes N overrides the count, --no-header reads the line as an edge)",
                             "header", header_line[1])
    if num_nodes is None:
        return largest + 1 - id_base
    if largest - id_base >= num_nodes:
        src_max = int(comm.allreduce(int(src.max(initial=-1)), op=mpi().MAX))
        raise InputError(path, f"node id out of range [{id_base}, {num_nodes - 1 + id_base}] for num_nodes "
                         f"{num_nodes}", "src" if src_max == largest else "dst", largest)
    return num_nodes
