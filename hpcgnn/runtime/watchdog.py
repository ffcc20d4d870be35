"""A watchdog that ends the MPI job when a rank stops making progress, naming the ranks at fault.

A rank that is stopped (SIGSTOP, a frozen node) or stuck outside MPI (hung I/O) leaves every
other rank waiting in its next collective forever: MPI has no timeout. The training loop
reports progress with :func:`beat` (once per step and per inference batch); a thread on every
rank checks that the last beat is younger than ``timeout_s``. When it is not, the thread tells
every other rank (a small message on a private communicator) and listens for their answers
for a grace period; each live rank's thread answers at once with what its main thread is
doing. A rank that hears from a stalled rank fires too, at once, so the job ends within
about one grace period of the first stall. Ranks that do not answer within the grace period
are the ones that stopped; the lowest-numbered live rank prints one line naming them and what
the others were waiting in, then aborts the job. The other live ranks wait for that abort
(bounded, in case the reporting rank dies first) so the line is never lost to an earlier one.

The check costs a Python wake-up every ``poll_s`` (0.25 s) and one ``Iprobe``: nothing per step.

Phases without steps to beat (reading and partitioning an input, opening a dataset) take the
watchdog in its ``liveness`` form: a rank that waits on rank 0's long work is healthy, so only
a rank that stops answering counts. Each rank's thread sends its successor in a ring a small
heartbeat every few seconds; a rank that hears nothing from its predecessor for ``timeout_s``
fires, and the report proceeds as above. It catches a stopped rank (SIGSTOP, a frozen node) and
one whose main thread holds the interpreter lock in a compiled call for that long; not a rank
blocked outside MPI that still answers (hung I/O: the beats of the main thread catch that).
:func:`start_phase` runs one from the moment MPI is initialised (``hpcgnn partition``, the start
of ``hpcgnn train``) until the step-beating watchdog takes over.

``MPI_Init`` itself is the one place no thread of the process can help: it waits for every rank
of the job while holding the interpreter lock. :func:`init_timer` starts a small separate
process that, when ``MPI_Init`` has not returned within ``timeout_s``, prints one line and kills
this rank with SIGKILL, so that the launcher ends the job (``mpiexec`` does; under ``srun``
every rank's own timer ends it). A rank stopped before ``MPI_Init`` is ended by its peers'
timers that way; one stopped after the timer was disarmed is a peer's ring watchdog's case.
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time

from hpcgnn.runtime.comm import mpi
from hpcgnn.runtime.failure_report import abort_job
from hpcgnn.runtime.files import remove_temporaries

DEFAULT_TIMEOUT_S = 600.0
_POLL_S = 0.25
#: how long a rank that fired but does not report waits for the reporting rank's abort, beyond
#: that rank's own grace period, before it aborts the job itself
_REPORTER_WAIT_S = 5.0
_TAG = 7311
_HEARTBEAT_TAG = 7312
#: the longest gap between two heartbeats of the liveness form (a quarter of the timeout below)
_HEARTBEAT_MAX_S = 5.0

_active: Watchdog | None = None
_phase: Watchdog | None = None


def beat(where: str):
    """Local. Record that this rank's main thread made progress and is now at ``where``."""
    if _active is not None:
        _active.beat(where)


def waiting_in(where: str):
    """Local. Name what the main thread now waits in (``gradient Allreduce``) without counting
    it as progress."""
    if _active is not None:
        _active.where = where


class Watchdog:
    """Local. Aborts the job when no :func:`beat` arrives on some rank for ``timeout_s`` seconds.

    Parameters
    ----------
    comm : MPI communicator
        The ranks watched together (duplicated; the watchdog's messages never meet the job's).
    timeout_s : float
        Seconds without progress before the job is ended; 0 disables the watchdog.
    prog : str
        Prefix of the error line (``hpcgnn train``).
    grace_s : float, optional
        How long a rank that fired listens for the others' answers; default
        ``min(10, max(2, timeout_s / 4))``.
    liveness : bool
        Fire only when a rank stops answering (module docstring), not when its main thread
        makes no progress; for phases whose ranks wait on one rank's long work.

    Use as a context manager (or call :meth:`close`); :func:`beat` reaches the innermost one.
    A step-beating watchdog takes over from the one :func:`start_phase` runs (it closes it).
    """

    def __init__(self, comm, timeout_s: float, prog: str = "hpcgnn", grace_s: float | None = None,
                 liveness: bool = False):
        global _active
        if not liveness:
            end_phase()
        self.timeout_s = float(timeout_s)
        self.prog = prog
        self.liveness = liveness
        self.grace_s = grace_s if grace_s is not None else min(10.0, max(2.0, self.timeout_s / 4))
        self.where = "starting"
        self._last = self._heard = self._sent = time.monotonic()
        self._heartbeat_s = min(_HEARTBEAT_MAX_S, max(_POLL_S, self.timeout_s / 4))
        self._sends = []
        self._stop = threading.Event()
        self._thread = None
        self.comm = None
        if self.timeout_s <= 0 or (liveness and comm.size == 1):  # one rank alone waits on nobody
            return
        self.comm = comm.Dup()
        self._previous = _active
        _active = self
        self._thread = threading.Thread(target=self._run, name="hpcgnn-watchdog", daemon=True)
        self._thread.start()

    def beat(self, where: str):
        """Local. Progress: restart the clock; the main thread is now at ``where``."""
        self.where = where
        self._last = time.monotonic()

    def _stop_thread(self) -> bool:
        """Stop this rank's thread (False when it was stopped already)."""
        global _active
        if self._thread is None:
            return False
        self._stop.set()
        self._thread.join()
        self._thread = None
        if _active is self:
            _active = self._previous
        return True

    def close(self):
        """Collective over comm. Stop the thread and free the private communicator."""
        if not self._stop_thread():
            return
        mpi().Request.Waitall(self._sends)
        self.comm.Barrier()  # no rank frees the communicator while another's answer is in flight
        self._receive({})  # heartbeats sent before the barrier
        self.comm.Free()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            self.close()
        else:
            # an error leaves through here: stop this rank's thread, so a program that catches the
            # error and goes on is not aborted by a stale clock later; the collective close could
            # wait for ranks that never arrive, so the communicator is left to the process's end
            self._stop_thread()
        return False

    # --- the watching thread ---

    def _status(self):
        now = time.monotonic()
        idle = now - self._last
        stalled = (now - self._heard if self.liveness else idle) > self.timeout_s
        return (self.comm.rank, self.where, round(idle, 1), stalled)

    def _heartbeat(self):
        """Liveness form: tell the next rank of the ring that this process still runs."""
        self._sends = [request for request in self._sends if not request.Test()]
        if time.monotonic() - self._sent >= self._heartbeat_s:
            successor = (self.comm.rank + 1) % self.comm.size
            self._sends.append(self.comm.isend(None, dest=successor, tag=_HEARTBEAT_TAG))
            self._sent = time.monotonic()

    def _announce(self):
        status = self._status()
        for rank in range(self.comm.size):
            if rank != self.comm.rank:
                self.comm.isend(status, dest=rank, tag=_TAG)  # small: completes eagerly; never waited on

    def _receive(self, answers):
        MPI = mpi()
        info = MPI.Status()
        while self.comm.iprobe(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=info):
            message = self.comm.recv(source=info.Get_source(), tag=info.Get_tag())
            if info.Get_tag() == _HEARTBEAT_TAG:
                self._heard = time.monotonic()
            else:
                answers[message[0]] = message
        return answers

    def _run(self):
        answers = {}
        announced = False
        while not self._stop.wait(_POLL_S):
            if self.comm.size > 1:
                if self.liveness:
                    self._heartbeat()
                self._receive(answers)
            stalled = self._status()[3] or any(answer[3] for answer in answers.values())
            if not (stalled or answers):
                continue
            if not announced:
                self._announce()  # another rank fired, or this one did: everyone says where it is
                announced = True
            if stalled:
                deadline = time.monotonic() + self.grace_s
                while time.monotonic() < deadline and len(answers) < self.comm.size - 1:
                    time.sleep(0.05)
                    self._receive(answers)
                self._fire(answers)
                return

    def _fire(self, answers):
        statuses = dict(answers)
        statuses[self.comm.rank] = self._status()
        silent = [r for r in range(self.comm.size) if r not in statuses]
        if min(statuses) == self.comm.rank:  # one line for the job, from the lowest live rank
            parts = [f"{'a rank stopped answering' if self.liveness else 'no progress'} for {self.timeout_s:g}s "
                     "(--watchdog-s)"]
            if silent:
                why = "stopped, or holding the interpreter lock" if self.liveness else "stopped, or stuck outside MPI"
                parts.append(f"rank{'s' * (len(silent) > 1)} {_ranks(silent)} did not answer ({why})")
            groups = {}
            for rank, where, idle, _ in statuses.values():
                groups.setdefault(where, []).append((rank, idle))
            for where, members in sorted(groups.items(), key=lambda kv: kv[1][0][0]):
                ranks = sorted(r for r, _ in members)
                idle = max(i for _, i in members)
                parts.append(f"rank{'s' * (len(ranks) > 1)} {_ranks(ranks)} at {where} for {idle:g}s")
            print(f"{self.prog}: error: watchdog: " + "; ".join(parts), file=sys.stderr, flush=True)
        else:
            # the reporting rank ends the job once it has printed; only if it dies first does
            # this rank end it, so its abort never races the report
            time.sleep(2 * self.grace_s + _REPORTER_WAIT_S)
        remove_temporaries(final=True)  # the abort kills the other ranks before they can remove theirs
        abort_job(mpi().COMM_WORLD, 3)


def _ranks(ranks) -> str:
    ranks = sorted(ranks)
    return ",".join(map(str, ranks)) if len(ranks) <= 8 else f"{','.join(map(str, ranks[:8]))},... ({len(ranks)})"


def start_phase(comm, timeout_s: float, prog: str = "hpcgnn"):
    """Collective over comm. Watch the ranks' liveness (:class:`Watchdog` with ``liveness``)
    until :func:`end_phase` or a step-beating :class:`Watchdog` takes over; 0 disables it."""
    global _phase
    end_phase()
    _phase = Watchdog(comm, timeout_s, prog, liveness=True)


def end_phase():
    """Collective over the phase's comm (local when no phase watchdog runs). Stop the
    watchdog :func:`start_phase` started."""
    global _phase
    phase, _phase = _phase, None
    if phase is not None:
        phase.close()


#: the separate process of :func:`init_timer`: it waits for its stdin to close (``MPI_Init``
#: returned, or the rank died) for ``timeout`` seconds, else prints the line and kills the rank
_TIMER = """
import os, select, signal, sys
rank, timeout, line = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
if not select.select([sys.stdin], [], [], timeout)[0]:
    os.write(2, (line + chr(10)).encode())
    os.kill(rank, signal.SIGKILL)
"""


@contextlib.contextmanager
def init_timer(timeout_s: float, prog: str = "hpcgnn"):
    """Local. Kill this process, after one line, if the body (``MPI_Init``) runs past ``timeout_s``.

    ``MPI_Init`` waits for every rank of the job holding the interpreter lock, so no thread of
    this process can act: a small separate process keeps the time (module docstring). 0 (or
    a process no launcher started, whose ``MPI_Init`` waits on nobody) times nothing.
    """
    if timeout_s <= 0:
        yield
        return
    rank = os.environ.get("PMI_RANK") or os.environ.get("OMPI_COMM_WORLD_RANK") or "?"
    line = (f"{prog}: error: watchdog: MPI_Init did not return within {timeout_s:g}s (--watchdog-s) on rank "
            f"{rank}: a rank of the job stopped or failed while starting; ending this rank so that the "
            "launcher ends the job")
    timer = subprocess.Popen([sys.executable, "-I", "-S", "-c", _TIMER, str(os.getpid()), repr(float(timeout_s)),
                              line], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, close_fds=True)
    try:
        yield
    finally:
        timer.stdin.close()  # the timer's select returns: it exits without a word
        timer.wait()
