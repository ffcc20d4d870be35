"""The ``hpcgnn`` console command: ``hpcgnn <subcommand> ...``.

Each subcommand is a module ``hpcgnn.cli.<subcommand>`` with a ``main(argv)`` that parses its flags,
builds the command's options and calls the library. ``python -m hpcgnn.<subcommand>`` is the
short spelling of the same command (the top-level modules only call ``main``). Bad input ends with
one line on stderr and exit status 2; under MPI the whole job is aborted so no rank is left waiting.
"""
from __future__ import annotations

import importlib
import sys

from hpcgnn import __version__
from hpcgnn.runtime.abort import fail, run_program

SUBCOMMANDS = {
    "generate": ("hpcgnn.cli.generate", "write a synthetic graph (RMAT with communities, SBM) as .npz or .h5"),
    "convert": ("hpcgnn.cli.convert", "write any graph input as a graph file (.h5) that ranks read in parallel"),
    "partition": ("hpcgnn.cli.partition", "read a graph, partition it (METIS/random), write HDF5 parts"),
    "inspect": ("hpcgnn.cli.inspect", "summarise and verify a partitioned dataset"),
    "train": ("hpcgnn.cli.train", "train a GNN: mpirun -np P hpcgnn train --data DIR ..."),
    "evaluate": ("hpcgnn.cli.evaluate", "full-neighbourhood accuracy of a checkpoint, optional embeddings"),
}


def main(argv=None):
    """Local. Dispatch ``hpcgnn <subcommand> [args]`` to the subcommand's module."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        width = max(len(k) for k in SUBCOMMANDS)
        lines = [f"  {k:<{width}}  {help_}" for k, (_, help_) in SUBCOMMANDS.items()]
        print("usage: hpcgnn <subcommand> [options]   (each also runs as python -m hpcgnn.<subcommand>)\n\n"
              "subcommands:\n" + "\n".join(lines) + "\n\n'hpcgnn <subcommand> --help' describes each.")
        return 0 if argv else 2
    if argv[0] in ("-V", "--version"):
        print(f"hpcgnn {__version__}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in SUBCOMMANDS:
        fail("hpcgnn", f"unknown subcommand '{name}' (choose from {', '.join(SUBCOMMANDS)})")
    module = importlib.import_module(SUBCOMMANDS[name][0])
    return module.main(rest)


def program():
    """Local. The ``hpcgnn`` console command (a process of its own: see :func:`run_program`)."""
    run_program(main)
