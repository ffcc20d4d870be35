"""``hpcgnn partition --method multilevel|ldg``: the whole pipeline with the graph spread over the ranks.

read (each rank its slice, :mod:`~hpcgnn.prep.dist.ingest`) -> clean-up
(:mod:`~hpcgnn.prep.dist.cleanup`) -> balance weights -> multilevel partitioning
(:mod:`~hpcgnn.prep.dist.multilevel`) or streaming (:mod:`~hpcgnn.prep.dist.streaming`) -> part
files (:mod:`~hpcgnn.prep.dist.write`). Under
``mpirun -np K`` a rank holds about ``1/K`` of the edges at every stage; with one process it
is the same code on one rank.

A typed graph (read whole by rank 0 and dealt out, or drawn by ``generate hetero`` on the
ranks) keeps its node types throughout: ``nodes`` balances each type's count, and the writer
writes the serial partitioner's typed dataset (:mod:`~hpcgnn.prep.dist.write`).
"""
from __future__ import annotations

import os
import time

import numpy as np

from hpcgnn.prep.dist.cleanup import prepare
from hpcgnn.prep.dist.edgelist import read_edgelist_spread, splittable
from hpcgnn.prep.dist.ingest import read_h5graph_spread, read_npz_spread, spread_graph
from hpcgnn.prep.dist.multilevel import DEFAULT_COARSE_NODES, multilevel_parts, undirected_level
from hpcgnn.prep.dist.ogb import read_ogb_spread, streamable
from hpcgnn.prep.dist.spread import SpreadGraph, serial_edge_ids
from hpcgnn.prep.dist.streaming import ldg_parts
from hpcgnn.prep.dist.write import write_spread
from hpcgnn.prep.partition import DEFAULT_BALANCE
from hpcgnn.prep.read import detect_format, read_graph, reader_options
from hpcgnn.prep.read.ogb_link import is_ogb_link
from hpcgnn.prep.read.text import REGULAR_FILE_REMEDY, file_kind
from hpcgnn.runtime.comm import mpi
from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.stages import silent

#: edge-list options the byte-range reader takes (--relabel and node tables: rank 0 reads)
_BYTE_RANGE_OPTIONS = {"delimiter", "header", "id_base", "num_nodes"}
#: serial-only options: what they need is drawn over the whole graph at once
_SERIAL_ONLY = (("split", "--split", "draws a random split over all nodes"),
               ("edge_split", "--edge-split", "holds out edges over the whole graph"),
               ("normalize_features", "--normalize-features", None))


def _check_options(args):
    """Local. Refuse options the distributed pipeline does not carry out, naming the flag."""
    for attr, flag, why in _SERIAL_ONLY:
        value = getattr(args, attr, None)
        if value not in (None, False, "dataset"):
            reason = f" ({why})" if why else ""
            raise InputError(None, f"is not available with --method {args.method}{reason}; partition with "
                             "--method metis, or give the input its masks", flag, value)
    if args.coarse_nodes is not None and args.coarse_nodes < args.parts:
        raise InputError(None, f"must be at least --parts ({args.parts})", "--coarse-nodes", args.coarse_nodes)


def _read_spread(comm, args) -> tuple[SpreadGraph, str, str]:
    """Collective over comm. The input, spread by destination, its format and how it was read
    (recorded in meta.json as ``source.read``): a generic .npz or a graph file by rows, a plain edge
    list by byte ranges, an OGB node dataset streamed by rank 0 a block at a time, any other input whole by rank 0
    and dealt out. An input that is not a regular file (a pipe) can be read once, by one
    process: a job of several ranks refuses it on every rank, before any rank opens it."""
    kind = comm.bcast(file_kind(args.input) if comm.rank == 0 else None, root=0)
    if kind is not None and comm.size > 1:
        raise InputError(args.input, f"is {kind}, which can be read only once, by one process, but --method "
                         f"{args.method} on {comm.size} ranks reads its input on every rank; {REGULAR_FILE_REMEDY}",
                         "input", kind)
    fmt_name = args.format or detect_format(args.input)
    options = reader_options(args, format=fmt_name)
    if fmt_name in ("npz", "h5graph"):
        read = read_npz_spread if fmt_name == "npz" else read_h5graph_spread
        return read(comm, args.input, args.name), fmt_name, "rows"
    if fmt_name == "edgelist" and splittable(args.input) and set(options) <= _BYTE_RANGE_OPTIONS:
        return read_edgelist_spread(comm, args.input, name=args.name, **options), fmt_name, "byte ranges"
    if fmt_name == "ogb" and not is_ogb_link(args.input) and streamable(args.input):
        return read_ogb_spread(comm, args.input, name=args.name, **options), fmt_name, "streamed by rank 0"
    whole = read_graph(args.input, format=fmt_name, **options) if comm.rank == 0 else None
    graph = spread_graph(comm, whole)
    if args.name:
        graph.name = args.name
    return graph, fmt_name, "whole by rank 0"


def balance_columns(comm, graph: SpreadGraph, balance) -> tuple[np.ndarray, list]:
    """Collective over comm. This block's METIS vertex weights for ``balance`` (see
    :func:`hpcgnn.prep.partition.balance_weights`; a split's column only when some node of the
    whole graph is in it; on a typed graph ``nodes`` is one column per node type that has nodes,
    ``nodes@<type>``)."""
    first, end = graph.block(comm.rank)
    columns, names = [], []
    for name in balance:
        if name == "nodes" and graph.schema is not None:
            types = graph.block_types(comm.rank)
            for index, node_type in enumerate(graph.schema.node_types):
                if graph.type_offsets[index + 1] > graph.type_offsets[index]:
                    columns.append((types == index).astype(np.int64))
                    names.append(f"nodes@{node_type}")
            continue
        if name == "nodes":
            column = np.ones(end - first, dtype=np.int64)
        elif name == "in_degree":
            column = np.bincount(graph.dst - first, minlength=end - first).astype(np.int64)
        else:
            mask = graph.ndata.get(f"{name}_mask")
            column = np.zeros(end - first, np.int64) if mask is None else mask.astype(np.int64)
            if int(comm.allreduce(int(column.sum()), op=mpi().SUM)) == 0:
                continue
        columns.append(column)
        names.append(name if name in ("nodes", "in_degree") else f"{name}_mask")
    if not columns:
        return np.ones((end - first, 1), dtype=np.int64), ["nodes"]
    return np.stack(columns, axis=1), names


def partition_distributed(comm, args, out_dir, log=silent) -> dict | None:
    """Collective over comm. Read, clean, partition and write as the command line says; returns
    meta.json's content on rank 0."""
    _check_options(args)
    t0 = time.perf_counter()
    graph, fmt_name, route = _read_spread(comm, args)
    read_s = time.perf_counter() - t0
    log(f"read {args.input} ({fmt_name}, {route}) on {comm.size} rank{'s' if comm.size > 1 else ''}: "
        f"{graph.num_nodes:,} nodes, {graph.num_edges(comm):,} edges")
    labels = int(comm.allreduce(int("label" in graph.ndata), op=mpi().SUM))
    trains = int(comm.allreduce(int(graph.ndata["train_mask"].sum()) if "train_mask" in graph.ndata else 0,
                                op=mpi().SUM))
    if labels and not trains and args.split is None:
        raise InputError(args.input, "has labels but no training nodes (no train_mask): partition with "
                         "--method metis --split 0.6,0.2,0.2 (or --split dataset to partition without masks)",
                         "train_mask", None)
    t0 = time.perf_counter()
    graph = prepare(comm, graph, symmetrize_edges=args.symmetrize, drop_self_loops=args.remove_self_loops,
                    dedup_edges=args.dedup, largest_cc=args.largest_component, log=log, consume=True)
    prepare_s = time.perf_counter() - t0
    if args.parts > graph.num_nodes:
        raise InputError(args.input, f"more parts than nodes ({graph.num_nodes})", "--parts", args.parts)
    source = {"input": os.path.basename(os.path.normpath(args.input)), "format": fmt_name, "read": route,
              "symmetrize": args.symmetrize, "remove_self_loops": args.remove_self_loops, "dedup": args.dedup,
              "largest_component": args.largest_component, "split": "dataset", "split_seed": args.split_seed,
              "normalize_features": False, "edge_split": None, "read_s": round(read_s, 3),
              "prepare_s": round(prepare_s, 3)}
    return partition_spread(comm, graph, args.parts, out_dir, args.method, args.seed, args.balance,
                            args.coarse_nodes, source, args.feat_dtype, log)


def partition_spread(comm, graph: SpreadGraph, num_parts, out_dir, method="multilevel", seed=0,
                     balance=DEFAULT_BALANCE, coarse_nodes=None, source=None, feat_dtype="float32",
                     log=silent) -> dict | None:
    """Collective over comm. Partition a cleaned spread ``graph`` (``multilevel`` or ``ldg``)
    under the ``balance`` constraints and write it into ``out_dir``; consumes the graph (its
    arrays are released as they are used); returns meta.json's content on rank 0."""
    if graph.schema is not None:  # numbered before compact() narrows the graph: the writer keeps them
        graph.eid = serial_edge_ids(comm, graph)
    graph = graph.compact()  # a homogeneous graph's edges are numbered anew by the writer
    t0 = time.perf_counter()
    weights, names = balance_columns(comm, graph, balance)
    level = undirected_level(comm, graph.starts, graph.src, graph.dst, weights, graph.symmetric)
    partitioner = {"method": method, "seed": seed, "constraints": names, "ranks": comm.size}
    if method == "ldg":
        part, info = ldg_parts(comm, level, num_parts)
        partitioner.update(chunk=info["chunk"])
        log(f"ldg assignment: {num_parts} parts streamed in {info['rounds']} rounds, "
            f"{info['undirected_cut']:,} undirected edges cut")
    else:
        coarse_nodes = DEFAULT_COARSE_NODES if coarse_nodes is None else coarse_nodes
        part, info = multilevel_parts(comm, level, num_parts, seed, coarse_nodes=coarse_nodes, log=log)
        partitioner.update(coarse_nodes=coarse_nodes, levels=info["levels"])
        log(f"multilevel assignment: {num_parts} parts over {len(info['levels'])} levels, "
            f"{info['undirected_cut']:,} undirected edges cut")
    del level
    partitioner["assign_s"] = round(time.perf_counter() - t0, 3)
    return write_spread(comm, graph, part, num_parts, out_dir, partitioner, source or {},
                        feat_dtype=feat_dtype, log=log)
