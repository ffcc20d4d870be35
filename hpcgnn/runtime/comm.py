"""MPI communicators: the world, the ranks sharing a node, and how many cores a rank has.

``mpi4py.MPI`` is imported on first use (thread level MULTIPLE, since the loader's prefetch
thread makes MPI calls), so ``import hpcgnn`` never initialises MPI.
"""
from __future__ import annotations

import os
import signal
import threading

FORCE_RMA_ENV = "HPCGNN_FORCE_RMA"

_thread_level_set = False


def mpi():
    """Local. The ``mpi4py.MPI`` module (initialises MPI, thread level MULTIPLE, on first use)."""
    global _thread_level_set
    if not _thread_level_set:
        import mpi4py  # deferred: importing mpi4py.MPI initialises MPI; `import hpcgnn` must not

        mpi4py.rc.thread_level = "multiple"
        _thread_level_set = True
        handlers = _python_signal_handlers()
        from mpi4py import MPI  # deferred: as above

        _restore_signal_handlers(handlers)
    from mpi4py import MPI  # deferred: as above

    return MPI


#: the signals that end a process by default and that a user or a batch system sends to stop one:
#: their handlers (:func:`hpcgnn.runtime.abort.handle_termination`) must survive MPI_Init
ENDING_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _python_signal_handlers():
    return {signum: signal.getsignal(signum) for signum in ENDING_SIGNALS}


def _restore_signal_handlers(handlers):
    """MPI_Init (MPICH's singleton start, its network layer) installs its own handler for some of
    these signals behind Python's back: SIGHUP then no longer reaches the process's handler. Set
    Python's again (only the main thread can)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum, handler in handlers.items():
        if callable(handler):
            signal.signal(signum, handler)


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
    if force_rma():
        return comm.Split(comm.rank, 0)
    return comm.Split_type(mpi().COMM_TYPE_SHARED, key=comm.rank)


def host_id() -> str:
    """Local. What identifies the kernel this process runs under: ranks with the same id share
    the same CPUs, even when they sit in separate containers or network namespaces that MPI
    treats as separate nodes (the kernel's boot id; the host name where there is none)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            return fh.read().strip()
    except OSError:
        return os.uname().nodename


def cores_per_rank(comm) -> int:
    """Collective over comm. CPU cores this rank can count on: its affinity set, shared with the
    ranks under the same kernel whose sets overlap it (unbound ranks share every core)."""
    mine = set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))
    here = host_id()
    sharing = sum(1 for host, other in comm.allgather((here, sorted(mine))) if host == here and mine & set(other))
    return max(1, len(mine) // max(sharing, 1))


def log(comm, *parts, all_ranks=False):
    """Local. Print ``[rank r/size] ...`` (rank 0 only unless ``all_ranks``), flushed at once."""
    if all_ranks or comm.rank == 0:
        print(f"[rank {comm.rank}/{comm.size}]", *parts, flush=True)
