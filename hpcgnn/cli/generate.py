"""``hpcgnn generate rmat|sbm|hetero ...`` (and ``python -m hpcgnn.generate``): write a synthetic graph.

One process writes a generic ``.npz`` or a graph file (``.h5``, :mod:`hpcgnn.prep.read.h5graph`);
``mpirun -np K hpcgnn generate rmat ... --out g.h5`` draws the same graph on K ranks, each
holding about 1/K of it, and writes the graph file in parallel
(:mod:`hpcgnn.prep.dist.generate`). The generators are :mod:`hpcgnn.prep.generate`.

``hpcgnn generate hetero`` draws a typed graph with IGBH's schema
(:mod:`hpcgnn.prep.generate_hetero`) and partitions it straight into a dataset directory
(:func:`hpcgnn.prep.partition.partition_graph`) with ``--parts``, or writes it as a typed
``.npz`` (:mod:`hpcgnn.prep.read.typed_npz`) for ``hpcgnn partition`` without. With
``--method multilevel`` or ``ldg`` the K ranks of ``mpirun -np K`` each draw their share of every
relation and of every type's fields, the same graph for a seed on any number of ranks
(:func:`hpcgnn.prep.dist.generate.hetero_spread_graph`), and partition it spread over the ranks
(:func:`hpcgnn.prep.dist.pipeline.partition_spread`): no rank holds the whole graph. With
``metis`` or ``random`` rank 0 draws the whole graph and the ranks write the part files in turns.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import time

from hpcgnn.format.feat_dtype import FEAT_DTYPES
from hpcgnn.prep.dist.generate import generate_rmat_file, hetero_spread_graph
from hpcgnn.prep.dist.pipeline import partition_spread
from hpcgnn.prep.generate import MAX_NODES, graph_summary, rmat_graph, sbm_graph
from hpcgnn.prep.generate_hetero import check_hetero, hetero_graph, hetero_summary, write_typed_npz
from hpcgnn.prep.partition import SPREAD_METHODS, output_lock, partition_graph
from hpcgnn.prep.read.h5graph import write_h5graph
from hpcgnn.prep.read.npz import write_npz
from hpcgnn.runtime.abort import entry_point, run_program
from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.flags import MAX_PARTS, MAX_WIDTH, SEED, CommandParser, Domain
from hpcgnn.runtime.help_format import RawDescriptionDefaultsHelpFormatter
from hpcgnn.runtime.launch import launcher_tasks, start_world
from hpcgnn.runtime.stages import StageLog

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
  hpcgnn generate hetero --nodes 1000000 --edges 20000000 --parts 4 --out parts/igbh_1m
  mpirun -np 4 hpcgnn generate hetero --nodes 5000000 --edges 100000000 --parts 4 \
      --method multilevel --out parts/igbh_5m
  hpcgnn generate hetero --nodes 100000 --edges 1000000 --out igbh.npz

Edge homophily is about h + (1 - h) / classes for rmat (the rest of the edges fall in the same
class by chance) and exactly h for sbm. The output is written atomically. A seed gives the
same graph on any number of ranks. hetero (IGBH's node types and relations, labels on papers)
writes a partitioned dataset directory with --parts, or a typed .npz without; with --method
multilevel or ldg every rank of mpirun draws and partitions its share of it."""


def _build_parser():
    parser = CommandParser(
        prog="hpcgnn generate", formatter_class=RawDescriptionDefaultsHelpFormatter,
        description="Write a synthetic node-classification graph (edges, feat, label, masks) as .npz or as a "
                    "graph file (.h5); under mpirun -np K, rmat is drawn and written by the K ranks.",
        epilog=_EXAMPLES)
    kinds = parser.add_subparsers(dest="kind", required=True, metavar="{rmat,sbm,hetero}")
    for kind, summary, description in (
            ("rmat", "power-law RMAT graph with planted classes",
             "Power-law RMAT graph (a,b,c,d = .57,.19,.19,.05) with planted classes."),
            ("sbm", "stochastic block model, blocks = classes",
             "Stochastic block model with equal-size blocks as classes.")):
        sub = kinds.add_parser(kind, help=summary, description=description, epilog=_EXAMPLES,
                               formatter_class=RawDescriptionDefaultsHelpFormatter)
        sub.add_argument("--nodes", type=Domain(int, ge=1, le=MAX_NODES), required=True, help="number of nodes")
        if kind == "rmat":
            sub.add_argument("--edges", type=Domain(int, ge=1, le=_MAX_EDGES), required=True,
                             help="unique directed edges to keep")
        else:
            sub.add_argument("--avg-degree", type=Domain(float, gt=0, le=MAX_NODES), required=True,
                             help="directed edges per node (edges = round(avg_degree * nodes))")
        _add_generator_flags(sub, _GENERATOR_FLAGS[kind])
        if kind == "rmat":
            _add_chunk_edges(sub)
        sub.add_argument("--compress", action="store_true",
                         help="compress the arrays (zip for .npz, gzip chunks for .h5; slower)")
        sub.add_argument("--out", required=True,
                         help="output path: .npz, or .h5 for a graph file (the only output under mpirun)")
    _add_hetero(kinds)
    return parser


@dataclasses.dataclass(frozen=True)
class _GeneratorDefaults:
    """Local. One generator kind's defaults and wording of the flags every kind takes; each help
    states its default through ``%(default)s``."""

    classes: int
    feat_dim: int
    classes_help: str
    homophily_help: str
    feat_dim_help: str
    split_help: str
    seed_help: str


_RMAT_FLAGS = _GeneratorDefaults(
    10, 64, "number of classes (default %(default)s)",
    "probability an edge is planted inside its source's class (default %(default)s)",
    "feature width (default %(default)s)", "node fractions of the three masks (default %(default)s)",
    "random seed (default %(default)s)")
_GENERATOR_FLAGS = {
    "rmat": _RMAT_FLAGS,
    "sbm": dataclasses.replace(_RMAT_FLAGS, homophily_help="fraction of edges inside a block (default %(default)s)"),
    "hetero": _GeneratorDefaults(
        19, 128, "number of paper classes (default %(default)s, IGBH's small label set)",
        "probability an edge of any relation is planted inside its source's class (default %(default)s)",
        "feature width of every node type (default %(default)s; IGBH's is 1024)",
        "paper fractions of the three masks (default %(default)s)",
        "seed of the graph and of METIS (default %(default)s)"),
}


def _add_generator_flags(sub, defaults, before_seed=None):
    """Local. Add the flags every generator kind takes (--classes, --homophily, --feat-dim,
    --feat-signal, --split, --seed) to ``sub`` with that kind's ``defaults``; ``before_seed()``
    adds a kind's own flags where its --help lists them, before --seed."""
    sub.add_argument("--classes", type=Domain(int, ge=1, le=MAX_PARTS), default=defaults.classes,
                     help=defaults.classes_help)
    sub.add_argument("--homophily", type=Domain(float, ge=0, le=1), default=0.7, help=defaults.homophily_help)
    sub.add_argument("--feat-dim", type=Domain(int, ge=1, le=MAX_WIDTH), default=defaults.feat_dim,
                     help=defaults.feat_dim_help)
    sub.add_argument("--feat-signal", type=Domain(float, ge=0), default=0.15,
                     help="class centroid scale against unit noise (default %(default)s)")
    sub.add_argument("--split", default="0.6,0.2,0.2", metavar="TRAIN,VAL,TEST", help=defaults.split_help)
    if before_seed is not None:
        before_seed()
    sub.add_argument("--seed", type=SEED, default=0, help=defaults.seed_help)


def _add_chunk_edges(sub):
    """Local. --chunk-edges of the generators that draw RMAT edges in vectorised steps."""
    sub.add_argument("--chunk-edges", type=Domain(int, ge=1, le=_MAX_CHUNK_EDGES), default=4_000_000, metavar="N",
                     help="raw edges per vectorised step; bounds working memory, not the result "
                     "(default %(default)s)")


def _add_hetero(kinds):
    sub = kinds.add_parser("hetero", help="typed RMAT graph with IGBH's schema",
                           description="Typed RMAT-like graph with IGBH's schema (paper, author, institute, fos; "
                           "cites, written_by, affiliated_to, topic and their reverses) in IGBH-large's "
                           "proportions, planted classes and labels on papers: partitioned into --parts parts, "
                           "or written as a typed .npz.",
                           epilog=_EXAMPLES, formatter_class=RawDescriptionDefaultsHelpFormatter)
    sub.add_argument("--nodes", type=Domain(int, ge=1, le=MAX_NODES), required=True,
                     help="nodes over all four types")
    sub.add_argument("--edges", type=Domain(int, ge=1, le=_MAX_EDGES), required=True,
                     help="unique edges over the four relations, before --add-reverse doubles them")
    sub.add_argument("--parts", "-p", type=Domain(int, ge=1, le=MAX_PARTS), default=None,
                     help="number of parts (= ranks of training) of the dataset directory --out; "
                     "without it --out is a typed .npz for hpcgnn partition")
    _add_generator_flags(sub, _GENERATOR_FLAGS["hetero"], before_seed=lambda: sub.add_argument(
        "--add-reverse", action=argparse.BooleanOptionalAction, default=True,
        help="add rev_<relation> for every relation (default on, as IGBH training does)"))
    _add_chunk_edges(sub)
    sub.add_argument("--method", choices=("metis", "random") + SPREAD_METHODS, default="metis",
                     help="partitioner: metis or random on rank 0, which draws the whole graph; multilevel or ldg "
                     "(hpcgnn partition's) with the graph drawn and partitioned spread over the ranks of mpirun, "
                     "none holding all of it (default metis)")
    sub.add_argument("--feat-dtype", choices=FEAT_DTYPES, default="float32",
                     help="how features are stored (default float32)")
    sub.add_argument("--compress", action="store_true", help="compress the .npz (slower)")
    sub.add_argument("--force", action="store_true", help="replace an existing output directory")
    sub.add_argument("--out", required=True,
                     help="output: a dataset directory (with --parts), or a typed .npz (without; one process)")


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


@contextlib.contextmanager
def _named_by_flags():
    """A generator's one-line error about a parameter names the flag that sets it."""
    try:
        yield
    except InputError as exc:
        if exc.path is None and exc.field in _FLAGS:
            raise InputError(None, exc.problem, _FLAGS[exc.field], exc.value) from None
        raise


def _common(args):
    try:
        split = tuple(float(part) for part in args.split.split(","))
    except ValueError:
        raise InputError(None, "must be three comma-separated numbers", "--split", args.split) from None
    return dict(num_nodes=args.nodes, num_classes=args.classes, homophily=args.homophily,
                feat_dim=args.feat_dim, feat_signal=args.feat_signal, fractions=split, seed=args.seed)


def _draw_hetero(args, params, log):
    with _named_by_flags():
        graph = hetero_graph(add_reverse=args.add_reverse, **params)
    _log_drawn(log, hetero_summary(graph))
    return graph


def _log_drawn(log, summary):
    log("drew " + ", ".join(f"{n:,} {t}" for t, n in summary["nodes"].items()) + "; "
        + ", ".join(f"{n:,} {r}" for r, n in summary["edges"].items())
        + f"; cites edge homophily {summary['cites_homophily']:.3f}")


def _hetero_source(args) -> dict:
    """meta.json's ``source`` of a generated typed dataset: the command's flags."""
    return {"input": "generate hetero", "format": "generated",
            "generator": {k: v for k, v in vars(args).items() if k not in ("out", "force", "kind")}}


def _generate_hetero(args):
    """``generate hetero``: a typed .npz from one process, or a dataset directory: with --method
    multilevel or ldg the ranks draw, partition and write the typed graph spread over them; with
    metis or random rank 0 draws and partitions it and the ranks write it."""
    launched = launcher_tasks()
    comm = start_world() if launched is not None and launched[1] > 1 else None
    rank = comm.rank if comm is not None else 0
    to_file = args.out.endswith(".npz")
    if to_file and args.parts is not None:
        raise InputError(None, "partitions into a dataset directory: give --out a directory, or leave --parts "
                         "out to write a typed .npz", "--parts", args.parts)
    if not to_file and args.parts is None:
        raise InputError(None, "a dataset directory needs a part count: give --parts P (or a .npz --out to write "
                         "the graph file)", "--parts", None)
    if to_file and comm is not None:
        raise InputError(None, "a typed .npz is written by one process; run it without mpirun (under mpirun, "
                         "give --parts and a directory)", "--out", args.out)
    log = StageLog("generate hetero", enabled=rank == 0)
    params = dict(_common(args), num_edges=args.edges, chunk_edges=args.chunk_edges)
    with _named_by_flags():  # on every rank, so that a bad flag ends each the same way
        check_hetero(**params)
    if to_file:
        out = _check_output(args.out)
        graph = _draw_hetero(args, params, log)
        try:
            write_typed_npz(graph, out, compress=args.compress)
        except OSError as exc:
            raise InputError(out, f"cannot write the output ({exc.strerror or exc})", "--out", out) from None
        print(f"hetero: {graph.num_nodes:,} nodes, {graph.num_edges:,} edges, {log.total_s:.1f} s -> {out}",
              flush=True)
        return 0
    if args.parts > args.nodes:
        raise InputError(None, f"more parts than nodes ({args.nodes:,})", "--parts", args.parts)
    out_dir = os.path.abspath(args.out)
    if args.method in SPREAD_METHODS:
        comm = comm or start_world()  # the same pipeline on a world of one
        rank = comm.rank
    graph = source = None
    with output_lock(comm, out_dir):
        if rank == 0 and os.path.exists(out_dir) and not args.force:
            raise InputError(out_dir, "output exists (pass --force to replace it)", "--out", args.out)
        if args.method in SPREAD_METHODS:
            with _named_by_flags():
                graph, summary = hetero_spread_graph(comm, add_reverse=args.add_reverse, **params)
            _log_drawn(log, summary)
            meta = partition_spread(comm, graph, args.parts, out_dir, args.method, args.seed,
                                    source=_hetero_source(args), feat_dtype=args.feat_dtype, log=log)
        else:
            if rank == 0:
                graph, source = _draw_hetero(args, params, log), _hetero_source(args)
            meta = partition_graph(graph, out_dir, args.parts, args.method, args.seed, comm=comm, source=source,
                                   release_input=True, log=log, feat_dtype=args.feat_dtype)
    if rank == 0:
        print(f"hetero: {meta['num_nodes']:,} nodes, {meta['num_edges']:,} edges, {meta['num_parts']} parts, "
              f"edge cut {100 * meta['partitioner']['edge_cut_fraction']:.2f}%, {log.total_s:.1f} s -> {out_dir}",
              flush=True)
    return 0


@entry_point("hpcgnn generate")
def main(argv=None):
    """Local (collective over the world under mpirun). ``hpcgnn generate rmat|sbm|hetero ...``:
    generate a graph, write it as .npz or a graph file (.h5) (hetero: partition it into a
    dataset directory), print a summary."""
    args = _build_parser().parse_args(argv)
    if args.kind == "hetero":
        return _generate_hetero(args)
    out = _check_output(args.out)
    started = time.perf_counter()
    common = _common(args)
    launched = launcher_tasks()
    with _named_by_flags():
        if launched is not None and launched[1] > 1:
            return _generate_spread(args, out, common, started)
        if args.kind == "rmat":
            graph = rmat_graph(num_edges=args.edges, chunk_edges=args.chunk_edges, **common)
        else:
            graph = sbm_graph(avg_degree=args.avg_degree, **common)
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
