"""A lock file that one run holds at a time: a checkpoint directory's, a partition output's.

The lock is a JSON record of its holder: host, pid, start time, and ``SLURM_JOB_ID`` when set.
It is created whole or not at all: a complete temporary file is hard-linked onto the name,
which fails if the name exists (also on NFS, where ``O_EXCL`` was long unreliable); ``O_EXCL``
is the fallback on file systems without hard links.

While the run lasts, a daemon thread touches the file every :data:`REFRESH_S` seconds: that is
the holder's lease. Another run is refused with one line naming the lock file and its holder,
unless it passes ``force``; it takes over a lock that is stale:

- the holder ran on this host and its pid is gone (a run killed with SIGKILL or SIGTERM);
- the holder is the current SLURM job (a requeued job starting again);
- the lock was not refreshed for :data:`LEASE_S` seconds (a holder that crashed on another
  host, whose pid cannot be checked from here).

A process ended by a signal releases its locks (:func:`hpcgnn.runtime.files.on_termination`).
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import sys
import threading
import time
import uuid

from hpcgnn.runtime.collectives import fail_together
from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.files import cancel_on_termination, on_termination

#: errors of file systems without hard links, where the lock is made with O_EXCL instead
NO_HARD_LINKS = (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.EMLINK)
#: seconds between the holder's refreshes of the lock's mtime
REFRESH_S = 30.0
#: a lock not refreshed for this many seconds is stale: ten missed refreshes, so that a holder
#: whose rank 0 is busy, or a file system whose clocks differ a little, never loses it
LEASE_S = 300.0


def holder_record() -> dict:
    """Local. What this process writes into a lock it takes."""
    now = time.time()
    return {"host": socket.gethostname(), "pid": os.getpid(), "started": now,
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(now)),
            "slurm_job_id": os.environ.get("SLURM_JOB_ID") or None, "token": uuid.uuid4().hex}


def describe(holder: dict) -> str:
    """Local. A lock holder in a few words: ``host h pid 123 since <time> (SLURM job 42)``."""
    if not holder:
        return "an unknown holder (unreadable lock file)"
    text = f"host {holder.get('host', '?')} pid {holder.get('pid', '?')}"
    if holder.get("started_at"):
        text += f" since {holder['started_at']}"
    if holder.get("slurm_job_id"):
        text += f" (SLURM job {holder['slurm_job_id']})"
    return " ".join(text.split())[:300]  # the file may be anyone's: keep the message one short line


def read_lock(path) -> tuple[dict, float] | None:
    """Local. ``(holder record, mtime)`` of the lock at ``path``; None if there is none.

    A lock file that is not a JSON record (edited by hand, or written by something else)
    gives an empty record: only its age can then make it stale.
    """
    try:
        with open(path, "rb") as fh:
            mtime = os.fstat(fh.fileno()).st_mtime
            data = fh.read(65536)
    except FileNotFoundError:
        return None
    try:
        holder = json.loads(data)
    except ValueError:
        holder = {}
    return (holder if isinstance(holder, dict) else {}), mtime


def pid_alive(pid) -> bool:
    """Local. Whether process ``pid`` exists on this host (a process of another user counts)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        return True
    return True


def stale_reason(holder: dict, mtime: float, now=None) -> str | None:
    """Local. Why a lock held by ``holder`` and last refreshed at ``mtime`` is stale; None if it is live."""
    now = time.time() if now is None else now
    pid = holder.get("pid")
    if (holder.get("host") == socket.gethostname() and isinstance(pid, int) and not isinstance(pid, bool)
            and pid > 0 and not pid_alive(pid)):
        return f"its pid {pid} is gone from this host"
    job = os.environ.get("SLURM_JOB_ID")
    if job and holder.get("slurm_job_id") == job:
        return f"it belongs to this SLURM job {job} (requeued)"
    if now - mtime > LEASE_S:
        return f"not refreshed for {now - mtime:.0f} s (lease {LEASE_S:.0f} s)"
    return None


class FileLock:
    """Local. The lock file ``path``, held by this process (rank 0 of a run).

    Parameters
    ----------
    path : str
        The lock file; its directory is created if missing.
    force : bool
        Take the lock even from a live holder.
    in_use : str
        What a refusal says before naming the holder (``the checkpoint directory is in use by
        another run``).
    remedy : str
        What a refusal says after naming the holder.

    Raises
    ------
    InputError
        The lock is held by a live holder (named) and ``force`` is false, or the lock cannot
        be written.
    """

    def __init__(self, path, force=False, in_use="in use by another run",
                 remedy="wait for it to end, or pass --force if it is gone"):
        self.path = os.fspath(path)
        self.holder = holder_record()
        self.in_use, self.remedy = in_use, remedy
        self._stop = threading.Event()
        try:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            self._acquire(force)
        except OSError as exc:
            raise InputError(self.path, f"cannot create the lock ({exc.strerror or exc})") from None
        self._thread = threading.Thread(target=self._refresh, name="hpcgnn-lock", daemon=True)
        self._thread.start()
        on_termination(self.release)  # SIGTERM (a cancelled or timed-out job) releases it too

    def _acquire(self, force):
        # a few rounds: the lock may vanish, or be taken by a third run, while we look at it
        for _ in range(5):
            if self._link():
                return
            found = read_lock(self.path)
            if found is None:
                continue
            holder, mtime = found
            reason = stale_reason(holder, mtime) or ("--force" if force else None)
            if reason is None:
                raise InputError(self.path, f"{self.in_use}, {describe(holder)}; {self.remedy}")
            if self._remove_if_unchanged(holder):
                print(f"hpcgnn: taking over the lock {self.path} of {describe(holder)}: {reason}",
                      file=sys.stderr, flush=True)
        raise InputError(self.path, "could not take the lock: other runs are taking it at the same time")

    def _link(self) -> bool:
        """Create the lock from a complete temporary file; False if a lock exists."""
        tmp = f"{self.path}.{self.holder['token']}.tmp"
        with open(tmp, "w") as fh:
            json.dump(self.holder, fh)
            fh.write("\n")
        try:
            os.link(tmp, self.path)
            return True
        except FileExistsError:
            return False
        except OSError as exc:
            if exc.errno not in NO_HARD_LINKS:
                raise
            return self._create_exclusive()
        finally:
            os.unlink(tmp)

    def _create_exclusive(self) -> bool:
        """The fallback where hard links are not supported: a reader may briefly see it empty."""
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as fh:
            json.dump(self.holder, fh)
            fh.write("\n")
        return True

    def _remove_if_unchanged(self, holder) -> bool:
        """Remove the lock if it is still ``holder``'s; False if another run replaced it meanwhile.

        The lock is renamed aside first, so that of two runs taking over the same stale lock
        at once only one removes it; a fresh lock moved aside by mistake is put back.
        """
        aside = f"{self.path}.{self.holder['token']}.stale"
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return False
        moved = read_lock(aside)
        if moved is not None and moved[0] == holder:
            os.unlink(aside)
            return True
        with contextlib.suppress(OSError):  # a third run already holds it: that one stands
            os.link(aside, self.path)
        os.unlink(aside)
        return False

    def held(self) -> bool:
        """Local. Whether the lock file is still this process's (``--force`` elsewhere takes it)."""
        found = read_lock(self.path)
        return found is not None and found[0].get("token") == self.holder["token"]

    def _refresh(self):
        while not self._stop.wait(REFRESH_S):
            try:
                if not self.held():
                    print(f"hpcgnn: warning: lost the lock {self.path} to another run (--force); "
                          "both now write what it guards", file=sys.stderr, flush=True)
                    return
                os.utime(self.path)
            except OSError:  # a file system hiccup: the next round tries again, the lease has room
                pass

    def release(self):
        """Local. Stop refreshing and remove the lock if it is still this process's."""
        cancel_on_termination(self.release)
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()
        with contextlib.suppress(OSError):
            if self.held():
                os.unlink(self.path)


@contextlib.contextmanager
def held_by_rank0(comm, take_lock, where=None):
    """Collective over comm. Hold the lock ``take_lock()`` makes on rank 0 while the body runs.

    Rank 0 decides and every rank learns the outcome, so a refused run fails on every rank
    together (the error names ``where`` on the ranks that did not see it). The lock is
    released on the way out, also by an exception; the release is local, so a failing rank
    never waits for the others there. Yields the lock on rank 0, None elsewhere.

    Raises
    ------
    InputError
        On every rank: the lock is held by a live holder (see :class:`FileLock`).
    """
    lock = error = None
    if comm is None or comm.rank == 0:
        try:
            lock = take_lock()
        except InputError as exc:
            error = exc
    if comm is not None:
        fail_together(comm, error, where)
    elif error is not None:
        raise error
    try:
        yield lock
    finally:
        if lock is not None:
            lock.release()
