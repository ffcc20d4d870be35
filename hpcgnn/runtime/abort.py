"""How a process ends on failure: one line for bad input, the whole MPI job for any error.

A rank that fails alone must never leave the others waiting in a collective, so every exit
path here calls ``MPI_Abort`` when the world has more than one rank.
"""
from __future__ import annotations

import functools
import os
import sys
import threading
import traceback

from hpcgnn.runtime.comm import world
from hpcgnn.runtime.errors import InputError

_hook_installed = False


def _abort_world(status):
    """End this process, and the whole MPI job with it when MPI runs with several ranks."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized() and mpi.COMM_WORLD.size > 1:
        mpi.COMM_WORLD.Abort(status)


def fail(prog, message, status=2):
    """Local. Print ``prog: error: message`` and end the process (the whole MPI job if any)."""
    print(f"{prog}: error: {message}", file=sys.stderr, flush=True)
    _abort_world(status)
    sys.exit(status)


def entry_point(prog):
    """Local. Decorate a subcommand's ``main`` so InputError becomes a one-line error exit."""
    def wrap(fn):
        @functools.wraps(fn)
        def run(argv=None):
            try:
                return fn(argv)
            except InputError as exc:
                fail(prog, str(exc))
            except KeyboardInterrupt:
                fail(prog, "interrupted", status=130)
        return run
    return wrap


def install_abort_hook(comm=None):
    """Local. Make any unhandled exception, on any thread, end the whole MPI job.

    The failing rank prints its traceback prefixed with its rank, then calls ``Abort`` so
    the other ranks do not wait forever in a collective.
    """
    global _hook_installed
    if _hook_installed:
        return
    comm = comm or world()

    def abort(exc_type, exc, tb):
        text = "".join(traceback.format_exception(exc_type, exc, tb))
        prefix = f"[rank {comm.rank}/{comm.size}] "
        sys.stderr.write("".join(prefix + line + "\n" for line in text.rstrip().splitlines()))
        sys.stderr.flush()
        if comm.size > 1:
            comm.Abort(1)
        os._exit(1)

    sys.excepthook = abort
    threading.excepthook = lambda args: abort(args.exc_type, args.exc_value, args.exc_traceback)
    _hook_installed = True
