"""``hpcgnn generate rmat|sbm ...`` (and ``python -m hpcgnn.generate``): write a synthetic graph.

One process writes a generic ``.npz`` or a graph file (``.h5``, :mod:`hpcgnn.prep.read.h5graph`);
``mpirun -np K hpcgnn generate rmat ... --out g.h5`` draws the same graph on K ranks, each
holding about 1/K of it, and writes the graph file in parallel
(:mod:`hpcgnn.prep.dist.generate`). The generators are :mod:`hpcgnn.prep.generate`.
"""
from __future__ import annotations

import os
import time

from hpcgnn.prep.dist.generate import generate_rmat_file
from hpcgnn.prep.generate import MAX_NODES, graph_summary, rmat_graph, sbm_graph
from hpcgnn.prep.read.h5graph import write_h5graph
from hpcgnn.prep.read.npz import write_npz
from hpcgnn.runtime.abort import entry_point, run_program
from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.flags import MAX_PARTS, MAX_WIDTH, SEED, CommandParser, Domain
from hpcgnn.runtime.help_format import RawDescriptionDefaultsHelpFormatter
from hpcgnn.runtime.launch import launcher_tasks, start_world

__all__ = ["main"]

_GRAPH_FILE_EXTENSIONS = (".h5", ".hdf5")
#: ceilings of --edges (16 bytes an edge while drawn: 16 TiB over the job's ranks) and of
#: --chunk-edges (each step holds a few arrays of this many int64 keys: a few GiB)
_MAX_EDGES = 2**40
_MAX_CHUNK_EDGES = 2**28
_FLAGS = {"num_nodes": "--nodes", "num_edges": "--edges", "num_classes": "--classes",
          "homophily": "--homophily", "feat_dim": "--feat-dim", "feat_signal": "--feat-signal",
          "fractions": "--split", "seed": "--seed", "avg_degree": "--avg-degree",
          "chunk_edges": "--chunk-edges"}

_EXAMPLES = """examples:
  hpcgnn generate rmat --nodes 100000 --edges 2000000 --feat-dim 64 --classes 10 \\
      --homophily 0.7 --seed 0 --out g.npz
  hpcgnn generate sbm --nodes 10000 --avg-degree 20 --classes 5 --homophily 0.8 --out sbm.npz
  mpirun -np 4 hpcgnn generate rmat --nodes 5000000 --edges 125000000 --feat-dim 100 --out big.h5

Edge homophily is about h + (1 - h) / classes for rmat (the rest of the edges fall in the same
class by chance) and exactly h for sbm. The output is written atomically. A seed gives the
same graph on any number of ranks."""


def _build_parser():
    parser = CommandParser(
        prog="hpcgnn generate", formatter_class=RawDescriptionDefaultsHelpFormatter,
        description="Write a synthetic node-classification graph (edges, feat, label, masks) as .npz or as a "
                    "graph file (.h5); under mpirun -np K, rmat is drawn and written by the K ranks.",
        epilog=_EXAMPLES)
    kinds = parser.add_subparsers(dest="kind", required=True, metavar="{rmat,sbm}")
    for kind, summary, description, homophily_help in (
            ("rmat", "power-law RMAT graph with planted classes",
             "Power-law RMAT graph (a,b,c,d = .57,.19,.19,.05) with planted classes.",
             "probability an edge is planted inside its source's class"),
            ("sbm", "stochastic block model, blocks = classes",
             "Stochastic block model with equal-size blocks as classes.",
             "fraction of edges inside a block")):
        sub = kinds.add_parser(kind, help=summary, description=description, epilog=_EXAMPLES,
                               formatter_class=RawDescriptionDefaultsHelpFormatter)
        sub.add_argument("--nodes", type=Domain(int, ge=1, le=MAX_NODES), required=True, help="number of nodes")
        if kind == "rmat":
            sub.add_argument("--edges", type=Domain(int, ge=1, le=_MAX_EDGES), required=True,
                             help="unique directed edges to keep")
        else:
            sub.add_argument("--avg-degree", type=Domain(float, gt=0, le=MAX_NODES), required=True,
                             help="directed edges per node (edges = round(avg_degree * nodes))")
        sub.add_argument("--classes", type=Domain(int, ge=1, le=MAX_PARTS), default=10,
                         help="number of classes (default 10)")
        sub.add_argument("--homophily", type=Domain(float, ge=0, le=1), default=0.7,
                         help=f"{homophily_help} (default 0.7)")
        sub.add_argument("--feat-dim", type=Domain(int, ge=1, le=MAX_WIDTH), default=64,
                         help="feature width (default 64)")
        sub.add_argument("--feat-signal", type=Domain(float, ge=0), default=0.15,
                         help="class centroid scale against unit noise (default 0.15)")
        sub.add_argument("--split", default="0.6,0.2,0.2", metavar="TRAIN,VAL,TEST",
                         help="node fractions of the three masks (default 0.6,0.2,0.2)")
        sub.add_argument("--seed", type=SEED, default=0, help="random seed (default 0)")
        if kind == "rmat":
            sub.add_argument("--chunk-edges", type=Domain(int, ge=1, le=_MAX_CHUNK_EDGES), default=4_000_000,
                             metavar="N",
                             help="raw edges per vectorised step; bounds working memory, not the "
                             "result (default 4000000)")
        sub.add_argument("--compress", action="store_true",
                         help="compress the arrays (zip for .npz, gzip chunks for .h5; slower)")
        sub.add_argument("--out", required=True,
                         help="output path: .npz, or .h5 for a graph file (the only output under mpirun)")
    return parser


def _check_output(path):
    """Fail before generating if the .npz could not be written."""
    path = os.path.abspath(path)
    if os.path.isdir(path):
        raise InputError(path, "is a directory, expected a file path", "--out", path)
    parent = os.path.dirname(path)
    existing = parent
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing) or not os.access(existing, os.W_OK | os.X_OK):
        raise InputError(path, "output directory is not writable", "--out", parent)
    return path


def _generate_spread(args, out, common, started):
    """Under a launcher with several tasks: the RMAT graph drawn and written by every rank."""
    comm = start_world()  # first: a copy of the job (a world of one) is stopped before anything else
    if args.kind != "rmat":
        raise InputError(None, "is drawn by one process; run it without mpirun (only rmat is drawn on "
                         "several ranks)", "kind", args.kind)
    if not out.endswith(_GRAPH_FILE_EXTENSIONS):
        raise InputError(out, "several ranks write a graph file: give --out a .h5 path", "--out", args.out)
    summary = generate_rmat_file(comm, out, num_edges=args.edges, chunk_edges=args.chunk_edges,
                                 compress=args.compress, **common)
    if comm.rank == 0:
        print(f"rmat: {summary['num_nodes']:,} nodes, {summary['num_edges']:,} edges, edge homophily "
              f"{summary['homophily']:.3f}, max degree {summary['max_degree']:,}, "
              f"{time.perf_counter() - started:.1f} s on {comm.size} ranks -> {out}", flush=True)


@entry_point("hpcgnn generate")
def main(argv=None):
    """Local (collective over the world under mpirun). ``hpcgnn generate rmat|sbm ...``:
    generate a graph, write it as .npz or a graph file (.h5), print a summary."""
    args = _build_parser().parse_args(argv)
    out = _check_output(args.out)
    started = time.perf_counter()
    try:
        split = tuple(float(part) for part in args.split.split(","))
    except ValueError:
        raise InputError(None, "must be three comma-separated numbers", "--split", args.split) from None
    common = dict(num_nodes=args.nodes, num_classes=args.classes, homophily=args.homophily,
                  feat_dim=args.feat_dim, feat_signal=args.feat_signal, fractions=split, seed=args.seed)
    launched = launcher_tasks()
    try:
        if launched is not None and launched[1] > 1:
            return _generate_spread(args, out, common, started)
        if args.kind == "rmat":
            graph = rmat_graph(num_edges=args.edges, chunk_edges=args.chunk_edges, **common)
        else:
            graph = sbm_graph(avg_degree=args.avg_degree, **common)
    except InputError as exc:
        if exc.path is None and exc.field in _FLAGS:
            raise InputError(None, exc.problem, _FLAGS[exc.field], exc.value) from None
        raise
    write = write_h5graph if out.endswith(_GRAPH_FILE_EXTENSIONS) else write_npz
    try:
        write(graph, out, compress=args.compress)
    except OSError as exc:
        raise InputError(out, f"cannot write the output ({exc.strerror or exc})", "--out", out) from None
    summary = graph_summary(graph)
    print(f"{args.kind}: {summary['num_nodes']:,} nodes, {summary['num_edges']:,} edges, edge homophily "
          f"{summary['homophily']:.3f}, max degree {summary['max_degree']:,}, "
          f"{time.perf_counter() - started:.1f} s -> {out}", flush=True)


if __name__ == "__main__":
    run_program(main)
