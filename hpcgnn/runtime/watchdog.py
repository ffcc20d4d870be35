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
"""
from __future__ import annotations

import sys
import threading
import time

from hpcgnn.runtime.comm import mpi
from hpcgnn.runtime.failure_report import abort_job

DEFAULT_TIMEOUT_S = 600.0
POLL_S = 0.25
#: how long a rank that fired but does not report waits for the reporting rank's abort, beyond
#: that rank's own grace period, before it aborts the job itself
REPORTER_WAIT_S = 5.0
TAG = 7311

_active: Watchdog | None = None


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

    Use as a context manager (or call :meth:`close`); :func:`beat` reaches the innermost one.
    """

    def __init__(self, comm, timeout_s: float, prog: str = "hpcgnn", grace_s: float | None = None):
        global _active
        self.timeout_s = float(timeout_s)
        self.prog = prog
        self.grace_s = grace_s if grace_s is not None else min(10.0, max(2.0, self.timeout_s / 4))
        self.where = "starting"
        self._last = time.monotonic()
        self._stop = threading.Event()
        self._thread = None
        self.comm = None
        if self.timeout_s <= 0:
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

    def close(self):
        """Collective over comm. Stop the thread and free the private communicator."""
        global _active
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        if _active is self:
            _active = self._previous
        self.comm.Barrier()  # no rank frees the communicator while another's answer is in flight
        self.comm.Free()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            self.close()
        return False

    # --- the watching thread ---

    def _status(self):
        idle = time.monotonic() - self._last
        return (self.comm.rank, self.where, round(idle, 1), idle > self.timeout_s)

    def _announce(self):
        status = self._status()
        for rank in range(self.comm.size):
            if rank != self.comm.rank:
                self.comm.isend(status, dest=rank, tag=TAG)  # small: completes eagerly; never waited on

    def _receive(self, answers):
        MPI = mpi()
        info = MPI.Status()
        while self.comm.iprobe(source=MPI.ANY_SOURCE, tag=TAG, status=info):
            answer = self.comm.recv(source=info.Get_source(), tag=TAG)
            answers[answer[0]] = answer
        return answers

    def _run(self):
        answers = {}
        announced = False
        while not self._stop.wait(POLL_S):
            if self.comm.size > 1:
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
            parts = [f"no progress for {self.timeout_s:g}s (--watchdog-s)"]
            if silent:
                parts.append(f"rank{'s' * (len(silent) > 1)} {_ranks(silent)} did not answer "
                             "(stopped, or stuck outside MPI)")
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
            time.sleep(2 * self.grace_s + REPORTER_WAIT_S)
        abort_job(mpi().COMM_WORLD, 3)


def _ranks(ranks) -> str:
    ranks = sorted(ranks)
    return ",".join(map(str, ranks)) if len(ranks) <= 8 else f"{','.join(map(str, ranks[:8]))},... ({len(ranks)})"
