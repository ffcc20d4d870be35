"""MPI plumbing shared by every distributed piece: communicators, reductions, logging, abort.

Nothing here runs at import time; ``mpi4py.MPI`` is imported on first use, so
``import hpcgnn`` never initialises MPI.
"""
from __future__ import annotations

import os
import sys
import threading
import traceback

import numpy as np

FORCE_RMA_ENV = "HPCGNN_FORCE_RMA"


def mpi():
    """Local. The ``mpi4py.MPI`` module (initialises MPI, thread level MULTIPLE, on first use)."""
    import mpi4py

    if not getattr(mpi4py, "_hpcgnn_configured", False):
        mpi4py.rc.thread_level = "multiple"
        mpi4py._hpcgnn_configured = True
    from mpi4py import MPI

    return MPI


def world():
    """Local. ``MPI.COMM_WORLD``; a plain ``python script.py`` gets a world of size 1."""
    return mpi().COMM_WORLD


def force_rma() -> bool:
    """Local. True when ``HPCGNN_FORCE_RMA=1``: ranks on one machine talk through RMA, as across nodes."""
    return os.environ.get(FORCE_RMA_ENV, "0") not in ("", "0", "false", "no")


def node_comm(comm):
    """Collective over comm. The ranks of ``comm`` that share memory with this one.

    With ``HPCGNN_FORCE_RMA=1`` every rank is its own node, so all traffic between ranks takes
    the inter-node (RMA) route.
    """
    MPI = mpi()
    if force_rma():
        return comm.Split(comm.rank, 0)
    return comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.rank)


def cores_per_rank(comm):
    """Collective over comm. CPU cores this rank can count on: its affinity set, shared with the
    ranks on the same node whose sets overlap it (unbound ranks share every core)."""
    import os

    mine = set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))
    node = comm.Split_type(mpi().COMM_TYPE_SHARED, key=comm.rank)  # the real node, even when RMA is forced
    try:
        sharing = sum(1 for other in node.allgather(sorted(mine)) if mine & set(other))
    finally:
        node.Free()
    return max(1, len(mine) // max(sharing, 1))


def allreduce_(tensor, comm, average=True):
    """Collective over comm. In-place sum (or mean) of a contiguous torch tensor or numpy array."""
    MPI = mpi()
    array = tensor.detach().numpy() if hasattr(tensor, "detach") else tensor
    if not array.flags.c_contiguous:
        raise ValueError("allreduce_ needs a contiguous buffer")
    if comm.size > 1:
        comm.Allreduce(MPI.IN_PLACE, array, op=MPI.SUM)
    if average and comm.size > 1:
        array /= comm.size
    return tensor


def broadcast_module(module, comm, root=0):
    """Collective over comm. Copy ``root``'s parameters and buffers into every rank's module."""
    import torch

    with torch.no_grad():
        for tensor in list(module.parameters()) + list(module.buffers()):
            if comm.size > 1:
                comm.Bcast(tensor.data.numpy(), root=root)


def allgather_int(value, comm) -> np.ndarray:
    """Collective over comm. Every rank's integer ``value``, as an int64 array indexed by rank."""
    out = np.zeros(comm.size, dtype=np.int64)
    comm.Allgather(np.array([value], dtype=np.int64), out)
    return out


def log(comm, *parts, all_ranks=False):
    """Local. Print ``[rank r/size] ...`` (rank 0 only unless ``all_ranks``), flushed at once."""
    if all_ranks or comm.rank == 0:
        print(f"[rank {comm.rank}/{comm.size}]", *parts, flush=True)


_hook_installed = False


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
