"""A background thread that lends MPI progress to one-sided reads aimed at this rank.

Across machines, MPI libraries that emulate RMA over TCP (UCX's ``rma_am``, libfabric's tcp
provider, MPICH's ch4 active-message fallback) serve a ``Get`` only when the *target* process
enters MPI. A rank busy in a forward/backward pass makes no MPI calls for hundreds of
milliseconds, so every rank reading its rows waits for that compute to end. This thread enters
MPI every ``interval`` seconds (an ``Iprobe`` on a private communicator, which runs the progress
engine) and sleeps in between, so a remote read waits at most about one interval for its owner,
at a CPU cost bounded by the duty cycle (a poll costs a few microseconds).

MPICH's own asynchronous progress thread (``MPIR_CVAR_ASYNC_PROGRESS=1``) spins without
sleeping: on a node whose cores all compute it takes a core from the rank.
"""
from __future__ import annotations

import threading

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
    polls : int
        Polls made so far.
    """

    def __init__(self, comm, interval=DEFAULT_INTERVAL_S):
        if interval <= 0:
            raise ValueError(f"progress interval must be positive, got {interval}")
        self.interval = float(interval)
        self.comm = comm.Dup()
        self.polls = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=THREAD_NAME)
        self._thread.start()

    def _run(self):
        MPI = mpi()
        while not self._stop.wait(self.interval):
            self.comm.Iprobe(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG)
            self.polls += 1

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def close(self):
        """Collective over comm. Stop and join the thread, free its communicator."""
        if self.comm is None:
            return
        self._stop.set()
        self._thread.join()
        self.comm.Free()
        self.comm = None


def spans_nodes(comm, ncomm) -> bool:
    """Local. True when ``comm`` reaches beyond this rank's node (``ncomm``): reads may then
    cross a network whose RMA needs the owner's progress. The same answer on every rank."""
    return ncomm.size < comm.size
