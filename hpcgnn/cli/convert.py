"""``hpcgnn convert INPUT OUT.h5`` (and ``python -m hpcgnn.convert``): any graph input as a graph file.

The graph file (:mod:`hpcgnn.prep.read.h5graph`) is the input ``hpcgnn partition --method
multilevel`` reads with every rank taking its own rows. One process converts any format the
readers know (with the same input flags as ``partition``). Under ``mpirun -np K`` a generic
``.npz`` or another graph file is converted by K ranks, each copying its share of the edge
rows and node rows (:func:`hpcgnn.prep.dist.convert.convert_rows`), so no rank ever holds the whole
graph. The output is written atomically.
"""
from __future__ import annotations

import os
import time

from hpcgnn.prep.dist.convert import ROW_FORMATS, convert_rows
from hpcgnn.prep.read import TYPED_FORMATS, add_reader_arguments, detect_format, read_graph, reader_options
from hpcgnn.prep.read.h5graph import write_h5graph
from hpcgnn.prep.read.npz import write_npz
from hpcgnn.runtime.abort import entry_point, run_program
from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.flags import CommandParser
from hpcgnn.runtime.help_format import RawDescriptionDefaultsHelpFormatter
from hpcgnn.runtime.launch import launcher_tasks, start_world

__all__ = ["main"]

_EXAMPLES = """examples:
  hpcgnn convert web-graph.txt.gz web.h5 --relabel
  hpcgnn convert data/coauthor_cs.npz cs.h5
  mpirun -np 4 hpcgnn convert big.npz big.h5          # each rank copies a quarter of the rows

A graph file stores ids as int32 below 2**31 nodes (half of .npz's int64), in chunks of about
4 MiB that ranks read independently; --compress adds gzip to every chunk."""


def _build_parser():
    parser = CommandParser(
        prog="hpcgnn convert", formatter_class=RawDescriptionDefaultsHelpFormatter, epilog=_EXAMPLES,
        description="Write a graph input (any format partition reads) as a graph file (.h5) that ranks "
                    "read in parallel, or as a generic .npz.")
    parser.add_argument("input", help="graph input: file, directory or Planetoid prefix")
    parser.add_argument("out", help="output path: .h5 (graph file) or .npz")
    parser.add_argument("--compress", action="store_true", help="gzip every chunk (zip for .npz); slower")
    parser.add_argument("--name", default=None, help="graph name stored in the file (default: the input's)")
    add_reader_arguments(parser)
    return parser


def _check_output(out, given):
    out = os.path.abspath(out)
    if not out.endswith((".h5", ".hdf5", ".npz")):
        raise InputError(out, "must end in .h5 (graph file) or .npz", "out", given)
    if os.path.isdir(out):
        raise InputError(out, "is a directory, expected a file path", "out", given)
    return out


def _convert_spread(args, out, fmt_name):
    """Under a launcher with several tasks: each rank copies its rows of a row-readable input."""
    comm = start_world()  # first: a copy of the job (a world of one) is stopped before anything else
    if fmt_name not in ROW_FORMATS:
        raise InputError(args.input, f"{fmt_name} input is read by one process: run convert without mpirun "
                         "(a .npz or .h5 input is converted on several ranks)", "format", fmt_name)
    if not out.endswith((".h5", ".hdf5")):
        raise InputError(out, "several ranks write a graph file: give an .h5 output", "out", args.out)
    num_nodes, num_edges = convert_rows(comm, args.input, fmt_name, out, name=args.name, compress=args.compress)
    return comm, num_nodes, num_edges


@entry_point("hpcgnn convert")
def main(argv=None):
    """Local (collective over the world under mpirun). ``hpcgnn convert INPUT OUT``."""
    args = _build_parser().parse_args(argv)
    out = _check_output(args.out, args.out)
    started = time.perf_counter()
    fmt_name = args.format or detect_format(args.input)
    if fmt_name in TYPED_FORMATS:  # the npz and graph-file formats hold one node type and one relation
        raise InputError(args.input, f"is a typed graph ({fmt_name}); the converted file would lose its node types "
                         "and relations: partition it directly (hpcgnn partition INPUT)", "format", fmt_name)
    launched = launcher_tasks()
    if launched is not None and launched[1] > 1:
        comm, num_nodes, num_edges = _convert_spread(args, out, fmt_name)
        if comm.rank == 0:
            print(f"{fmt_name} -> graph file: {num_nodes:,} nodes, {num_edges:,} edges, "
                  f"{time.perf_counter() - started:.1f} s on {comm.size} ranks -> {out}", flush=True)
        return 0
    graph = read_graph(args.input, format=fmt_name, **reader_options(args, format=fmt_name))
    if args.name:
        graph.name = args.name
    write = write_npz if out.endswith(".npz") else write_h5graph
    write(graph, out, compress=args.compress)
    print(f"{fmt_name} -> {'npz' if out.endswith('.npz') else 'graph file'}: {graph.num_nodes:,} nodes, "
          f"{graph.num_edges:,} edges, {time.perf_counter() - started:.1f} s -> {out}", flush=True)
    return 0


if __name__ == "__main__":
    run_program(main)
