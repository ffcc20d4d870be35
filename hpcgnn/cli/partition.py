"""``hpcgnn partition`` (and ``python -m hpcgnn.partition``): read a graph, partition it, write the
HDF5 dataset.

The flags are :func:`hpcgnn.prep.partition.build_parser`'s: the partition options stay with the
pipeline that reads them (:func:`~hpcgnn.prep.partition.load_prepared`,
:func:`~hpcgnn.prep.dist.pipeline.partition_distributed`), and ``hpcgnn inspect --against``
parses meta.json's recorded options with the same parser to clean an input again. This module
runs the command: the MPI world when launched on several ranks, the output's lock, the
partitioning (:func:`~hpcgnn.prep.partition.partition_graph`, or the spread pipeline) and the
summary line.
"""
from __future__ import annotations

import os

from hpcgnn.prep.dist.pipeline import partition_distributed
from hpcgnn.prep.partition import (
    DEFAULT_BALANCE,
    SPREAD_METHODS,
    build_parser,
    load_prepared,
    output_lock,
    partition_graph,
)
from hpcgnn.runtime.abort import entry_point, run_program
from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.launch import launcher_tasks, start_world
from hpcgnn.runtime.stages import StageLog
from hpcgnn.runtime.watchdog import beat, end_phase

__all__ = ["main"]


@entry_point("hpcgnn partition")
def main(argv=None):
    """Local. Command line of ``hpcgnn partition`` (collective when run under MPI)."""
    args = build_parser().parse_args(argv)
    comm = _world_if_parallel(args.watchdog_s)
    rank = comm.rank if comm is not None else 0
    for flag, value in (("--eval-negatives", args.eval_negatives), ("--eval-negatives-kind", args.eval_negatives_kind)):
        if value is not None and args.edge_split is None:
            raise InputError(None, "applies only with --edge-split", flag, value)
    out_dir = os.path.abspath(args.out)
    graph, source = None, None
    log = StageLog("partition", enabled=rank == 0)
    if args.balance is None:
        args.balance = ("nodes",) if args.method == "kaminpar" else DEFAULT_BALANCE
    elif args.method == "kaminpar" and len(args.balance) > 1:
        raise InputError(None, "KaMinPar balances one quantity: name one (nodes, in_degree, train, val or test)",
                         "--balance", ",".join(args.balance))
    if args.method in SPREAD_METHODS:
        if args.coarse_nodes is not None and args.method != "multilevel":
            raise InputError(None, "applies only with --method multilevel", "--coarse-nodes", args.coarse_nodes)
        return _main_distributed(args, comm, out_dir, log)
    if args.coarse_nodes is not None:
        raise InputError(None, "applies only with --method multilevel", "--coarse-nodes", args.coarse_nodes)
    with output_lock(comm, out_dir):
        if rank == 0:
            if os.path.exists(out_dir) and not args.force:
                raise InputError(out_dir, "output exists (pass --force to replace it)", "--out", args.out)
            beat(f"reading {args.input}")
            graph, source = load_prepared(args, log)
            if args.parts > graph.num_nodes:
                raise InputError(args.input, f"more parts than nodes ({graph.num_nodes})", "--parts", args.parts)
        beat("partitioning and writing" if rank == 0 else "waiting for rank 0's partitioning, then writing")
        meta = partition_graph(graph, out_dir, args.parts, args.method, args.seed, comm=comm,
                               source=source, release_input=True, keep_degree=args.keep_degree, log=log,
                               balance=args.balance, feat_dtype=args.feat_dtype)
    end_phase()
    if rank == 0:
        _print_summary(out_dir, meta, log)
    return 0


def _main_distributed(args, comm, out_dir, log):
    comm = comm or start_world()
    with output_lock(comm, out_dir):
        if comm.rank == 0 and os.path.exists(out_dir) and not args.force:
            raise InputError(out_dir, "output exists (pass --force to replace it)", "--out", args.out)
        beat(f"reading {args.input}, partitioning and writing")
        meta = partition_distributed(comm, args, out_dir, log)
    end_phase()
    if comm.rank == 0:
        _print_summary(out_dir, meta, log)
    return 0


def _print_summary(out_dir, meta, log):
    p = meta["partitioner"]
    print(f"wrote {out_dir}: {meta['num_parts']} parts, {meta['num_nodes']:,} nodes, "
          f"{meta['num_edges']:,} edges, edge cut {100 * p['edge_cut_fraction']:.2f}%, "
          f"imbalance nodes {p['imbalance']['num_nodes']} edges {p['imbalance']['num_edges']}, "
          f"{log.total_s:.1f}s", flush=True)


def _world_if_parallel(watchdog_s=0.0):
    """MPI's world communicator when launched by mpirun/srun with more than one rank, its ranks
    watched by the start-up watchdog (:func:`~hpcgnn.runtime.launch.start_world`) until the end.

    Several one-rank copies (srun without a PMI the MPI library speaks) are refused: each would
    partition alone and replace the others' output directory.
    """
    if launcher_tasks() is None:  # a plain `python -m`: serial, without initialising MPI
        return None
    world = start_world(watchdog_s=watchdog_s, prog="hpcgnn partition")
    return world if world.size > 1 else None


if __name__ == "__main__":
    run_program(main)
