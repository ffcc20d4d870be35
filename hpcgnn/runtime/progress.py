"""A background thread that lends MPI progress to one-sided reads aimed at this rank.

Across machines, MPI libraries that emulate RMA over TCP (UCX's ``rma_am``, libfabric's tcp
provider, MPICH's ch4 active-message fallback) serve a ``Get`` only when the *target* process
enters MPI. A rank busy in a forward/backward pass makes no MPI calls for hundreds of
milliseconds, so every rank reading its rows waits for that compute to end. This thread enters
MPI every ``interval`` seconds (an ``Iprobe`` on a private communicator, which runs the progress
engine) and sleeps in between, so a remote read waits at most about one interval for its owner,
at a CPU cost bounded by the duty cycle (a poll costs a few microseconds).

The loop runs in compiled code without the GIL (:mod:`hpcgnn._progress`), calling the
``MPI_Iprobe`` of the MPI library mpi4py loaded: a Python loop would wait for the GIL at each
wake-up, which a busy main thread holds for up to 5 ms. Where that library cannot be found,
the same loop runs in Python.

MPICH's own asynchronous progress thread (``MPIR_CVAR_ASYNC_PROGRESS=1``) spins without
sleeping: on a node whose cores all compute it takes a core from the rank.
"""
from __future__ import annotations

import ctypes
import os
import threading

import numpy as np

from hpcgnn import _progress
from hpcgnn.runtime.comm import mpi
from hpcgnn.runtime.resources import CollectiveResource

THREAD_NAME = "hpcgnn-progress"
# 0.5 ms: a remote read waits at most about this for its owner; the thread wakes 2000 times a
# second at a few microseconds each (under 1% of a core).
DEFAULT_INTERVAL_S = 0.0005


class ProgressThread(CollectiveResource):
    """Collective over comm (construction and close). Poll MPI every ``interval`` seconds.

    Parameters
    ----------
    comm : MPI communicator
        Duplicated, so the polls never match a message of the program.
    interval : float
        Seconds between polls.

    Attributes
    ----------
    compiled : bool
        True when the loop runs without the GIL.
    """

    def __init__(self, comm, interval=DEFAULT_INTERVAL_S):
        if interval <= 0:
            raise ValueError(f"progress interval must be positive, got {interval}")
        self.interval = float(interval)
        self.comm = comm.Dup()
        self._polls = np.zeros(1, dtype=np.int_)
        self._halt = np.zeros(1, dtype=np.uint8)
        self._stop = threading.Event()
        iprobe = _iprobe_address()
        self.compiled = iprobe is not None
        target = self._run_python if iprobe is None else self._run_compiled
        self._thread = threading.Thread(target=target, args=(iprobe,), daemon=True, name=THREAD_NAME)
        self._thread.start()

    @property
    def polls(self) -> int:
        """Polls made so far."""
        return int(self._polls[0])

    def _run_compiled(self, iprobe):
        MPI = mpi()
        _progress.poll(iprobe, self.comm.handle % 2**64, MPI.ANY_SOURCE, MPI.ANY_TAG, self.interval, self._halt,
                       self._polls)

    def _run_python(self, _):
        MPI = mpi()
        while not self._stop.wait(self.interval):
            self.comm.Iprobe(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG)
            self._polls[0] += 1

    def close(self):
        """Collective over comm. Stop and join the thread, free its communicator."""
        if self.comm is None:
            return
        self._stop.set()
        self._halt[0] = 1
        self._thread.join()
        self.comm.Free()
        self.comm = None


def spans_nodes(comm, ncomm) -> bool:
    """Local. True when ``comm`` reaches beyond this rank's node (``ncomm``): reads may then
    cross a network whose RMA needs the owner's progress. The same answer on every rank."""
    return ncomm.size < comm.size


def _iprobe_address():
    """Local. Address of ``MPI_Iprobe`` in the MPI library this process loaded (None if unknown)."""
    mpi()
    try:
        with open("/proc/self/maps") as fh:
            paths = [line.split()[-1] for line in fh if "/libmpi" in line]
    except OSError:
        return None
    for path in dict.fromkeys(paths):
        if os.path.basename(path).startswith(("libmpi.so", "libmpi_abi.so")):
            try:
                return ctypes.cast(ctypes.CDLL(path).MPI_Iprobe, ctypes.c_void_p).value
            except (OSError, AttributeError):
                continue
    return None
