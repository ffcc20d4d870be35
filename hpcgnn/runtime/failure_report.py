"""One error report per job: failing ranks agree, rank 0 prints, the job ends quietly.

When bad input fails every rank (a wrong flag, a dataset every rank refuses), a plain
"print, then ``MPI_Abort``" on each rank shows the same line once per rank, each followed by
the MPI library's abort banner, and loses lines: the first rank's abort kills the others
before the launcher has forwarded what they printed. Instead, a failing rank other than 0
sends its line to rank 0 (point to point, a tag nothing else uses) and waits for rank 0's
verdict; rank 0 collects lines for a grace period. When every rank failed, rank 0 prints each
distinct line once and calls ``MPI_Abort`` first (the others silence their stderr, so no
banner, and follow a moment later should rank 0's abort not have reached them); the exit
status is the same. When some rank does not report within the grace period (it is healthy,
or busy elsewhere), each failing rank prints its own line and aborts the job, as before: the
job never waits on a healthy rank for longer than the grace period.
"""
from __future__ import annotations

import os
import sys
import time

#: seconds failing ranks wait for each other (ranks that fail on the same input fail within
#: a fraction of this; a healthy rank delays the abort by at most this)
_GRACE_S = 3.0
# below 32767, the smallest tag bound MPI allows; no other message on COMM_WORLD uses them
_LINE_TAG = 32_101
_VERDICT_TAG = 32_102
_POLL_S = 0.01
# The launcher may act on an abort before it has forwarded what the aborting rank printed just
# before: a moment for the line to leave.
_FLUSH_S = 0.2


def abort_job(comm, status: int):
    """Local. End the whole MPI job with ``status`` once what this rank printed has left it.

    ``MPI_Abort`` acts at once: a launcher that kills the job may drop lines the rank wrote just
    before, still in its pipe. Flushing and giving them :data:`_FLUSH_S` keeps the report."""
    sys.stdout.flush()
    sys.stderr.flush()
    time.sleep(_FLUSH_S)
    comm.Abort(status)


def _silence_stderr():
    """The MPI library prints its abort banner on stderr; the report has been printed already."""
    sys.stderr.flush()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)


def summary(lines: dict) -> list[str]:
    """Local. The distinct report lines of ``{rank: line}``, once each.

    A line that merely quotes another rank's line (``rank 1 failed: <its line>``, raised by
    :func:`hpcgnn.runtime.collectives.fail_together` on the ranks that did not fail
    themselves) is dropped. When ranks report different lines, each names the ranks that
    reported it after ``prog: error:``.
    """
    texts = sorted(set(lines.values()), key=lambda t: min(r for r, v in lines.items() if v == t))
    kept = [t for t in texts if not any(other != t and _message(other) in t for other in texts)]
    if len(kept) == 1:
        return kept
    out = []
    for text in kept:
        ranks = sorted(r for r, v in lines.items() if v == text)
        tag = f"[rank{'s' if len(ranks) > 1 else ''} {','.join(map(str, ranks))}] "
        head, sep, message = text.partition(": error: ")
        out.append(f"{head}{sep}{tag}{message}" if sep else tag + text)
    return out


def _message(line: str) -> str:
    # 'prog: error: <message>': the part another rank's wrapper line would quote
    return line.split(": error: ", 1)[-1]


def end_job(world, line: str, status: int, grace_s: float = _GRACE_S):
    """Local. Report ``line`` once for the whole job and end it with ``status`` (never returns).

    Parameters
    ----------
    world : mpi4py.MPI.Comm
        ``COMM_WORLD`` of a job with more than one rank.
    line : str
        This rank's one-line report.
    status : int
        Exit status of the job.
    grace_s : float
        How long failing ranks wait for each other.
    """
    deadline = time.monotonic() + grace_s
    if world.rank != 0:
        world.isend(line, dest=0, tag=_LINE_TAG)  # small: completes eagerly, never waited on
        while time.monotonic() < deadline + 1.0:  # rank 0's verdict comes at its own deadline
            if world.iprobe(source=0, tag=_VERDICT_TAG):
                _silence_stderr()
                # rank 0 prints and aborts within _FLUSH_S; should its abort not reach this rank
                # (a slow launcher), end it here, quietly, once rank 0's line is out
                time.sleep(5 * _FLUSH_S)
                world.Abort(status)
                os._exit(status)
            time.sleep(_POLL_S)
        print(line, file=sys.stderr, flush=True)
        time.sleep(_FLUSH_S)
        world.Abort(status)
        os._exit(status)
    mpi = sys.modules["mpi4py.MPI"]
    lines = {0: line}
    status_info = mpi.Status()
    while len(lines) < world.size and time.monotonic() < deadline:
        while world.iprobe(source=mpi.ANY_SOURCE, tag=_LINE_TAG, status=status_info):
            source = status_info.Get_source()
            lines[source] = world.recv(source=source, tag=_LINE_TAG)
        time.sleep(_POLL_S)
    if len(lines) == world.size:
        for rank in range(1, world.size):
            world.isend(True, dest=rank, tag=_VERDICT_TAG)
    for text in summary(lines):
        print(text, file=sys.stderr, flush=True)
    sys.stdout.flush()
    time.sleep(_FLUSH_S)
    _silence_stderr()
    world.Abort(status)
    os._exit(status)
