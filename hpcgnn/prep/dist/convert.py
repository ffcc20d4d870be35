"""Convert a row-readable graph input (a generic ``.npz`` or a graph file) into a graph file on
several ranks, each copying its share of the edge rows and node rows (``mpirun -np K hpcgnn
convert``), so no rank ever holds the whole graph."""
from __future__ import annotations

import os

from hpcgnn.prep.dist.blocks import block_starts
from hpcgnn.prep.dist.graph_file import write_graph_file
from hpcgnn.prep.dist.ingest import NpzArrays, check_ids, count_nodes, edge_count
from hpcgnn.prep.read.h5graph import H5GraphArrays
from hpcgnn.runtime.errors import InputError

#: the input formats whose rows each rank reads by itself
ROW_FORMATS = ("npz", "h5graph")


def convert_rows(comm, input_path, fmt_name, out, name=None, compress=False) -> tuple[int, int]:
    """Collective over comm. Write ``input_path`` (format ``fmt_name``, one of :data:`ROW_FORMATS`)
    as the graph file ``out``, each rank copying its block of edge and node rows; ``name`` is
    the graph's name (default: the input's). Returns (num_nodes, num_edges)."""
    opened = NpzArrays(input_path) if fmt_name == "npz" else H5GraphArrays(input_path)
    try:
        num_edges = edge_count(opened)
        lo, hi = block_starts(num_edges, comm.size)[comm.rank:comm.rank + 2]
        edges = {"src": opened.rows("src", lo, hi), "dst": opened.rows("dst", lo, hi)}
        num_nodes = count_nodes(comm, opened, edges["src"], edges["dst"])
        check_ids(comm, opened.path, num_nodes, edges["src"], edges["dst"])
        first, end = block_starts(num_nodes, comm.size)[comm.rank:comm.rank + 2]
        nodes = {}
        for key in opened.keys():
            shape = opened.shape(key)
            if not shape or key in ("src", "dst"):
                continue  # scalars are metadata
            expected, what = (num_edges, "num_edges") if key.startswith("edge_") else (num_nodes, "num_nodes")
            if shape[0] != expected:
                raise InputError(opened.path, f"has {shape[0]} rows, expected {what} = {expected}", key, list(shape))
            if key.startswith("edge_"):
                edges[key] = opened.rows(key, lo, hi)
            else:
                nodes[key] = opened.rows(key, first, end)
        default_name = os.path.splitext(os.path.basename(opened.path))[0]
        if fmt_name == "h5graph":
            default_name = opened.h5.attrs.get("name", default_name)
    finally:
        if fmt_name == "h5graph":
            opened.close()
    write_graph_file(comm, out, num_nodes, name or default_name, int(lo), edges, int(first), nodes,
                     compress=compress)
    return num_nodes, num_edges
