"""A lock file that one run holds at a time: a checkpoint directory's, a partition output's.

The lock is a JSON record of its holder: host, pid, start time, and ``SLURM_JOB_ID`` when set.
It is created whole or not at all: a complete temporary file is hard-linked onto the name,
which fails if the name exists (also on NFS, where ``O_EXCL`` was long unreliable); ``O_EXCL``
is the fallback on file systems without hard links.

While the run lasts, a daemon thread touches the file every :data:`REFRESH_S` seconds: that is
the holder's lease. Another run is refused with one line naming the lock file and its holder,
unless it passes ``force``; it takes over a lock that is stale:

- the holder ran on this host and its pid is gone, or now names a process that started after
  the lock was taken (a run killed with SIGKILL or SIGTERM, its pid since reused);
- the holder is the current SLURM job (a requeued job starting again) and is dead: on this
  host by its pid as above; on another host by its lease, which a live holder refreshes every
  :data:`REFRESH_S` seconds (the run waits :func:`_heartbeat_wait_s` to see whether it is);
- the lock was not refreshed for :data:`LEASE_S` seconds (a holder that crashed on another
  host, whose pid cannot be checked from here).

A live holder on this host is never taken over without ``force``, whatever its SLURM job: a
second job step, or a second run started in the same allocation, carries the same
``SLURM_JOB_ID`` as the live run.

A process ended by a signal releases its locks (:func:`hpcgnn.runtime.files.on_termination`).
"""
from __future__ import annotations

import contextlib
import errno
import functools
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


def _heartbeat_wait_s() -> float:
    """Local. How long a run watches a lock of its own SLURM job held on another host for a
    refresh: two and a half refresh periods (a live holder refreshes at least twice)."""
    return 2.5 * REFRESH_S


def _process_started(pid) -> float | None:
    """Local. When process ``pid`` of this host started, in seconds since the epoch (Linux's
    ``/proc``); None where that cannot be told.

    The time is at most a second early (the boot time ``/proc/stat`` gives is whole seconds),
    never late: a process found to start after some moment surely did.
    """
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as fh:
            stat = fh.read()
        with open("/proc/stat", "rb") as fh:
            boot = next(int(line.split()[1]) for line in fh if line.startswith(b"btime "))
        ticks = int(stat[stat.rindex(b")") + 2:].split()[19])  # field 22, starttime, in clock ticks
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _holder_here(holder: dict) -> str | None:
    """Local. Whether the holder of a lock, if it ran on this host, still runs there.

    ``"live"``, or why it is dead (its pid is gone, or names a process started after the lock
    was taken: the pid was reused); None when it ran on another host (or its record does not
    say which process holds it), where its pid cannot be checked.
    """
    pid = holder.get("pid")
    if holder.get("host") != socket.gethostname() or not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return None
    if not pid_alive(pid):
        return f"its pid {pid} is gone from this host"
    took = holder.get("started")
    started = _process_started(pid)
    if started is not None and isinstance(took, (int, float)) and not isinstance(took, bool) and started > took:
        return f"its pid {pid} now names a process started after the lock was taken"
    return "live"


def stale_reason(holder: dict, mtime: float, now=None) -> str | None:
    """Local. Why a lock held by ``holder`` and last refreshed at ``mtime`` is stale; None if it is
    live, or if only watching its lease can tell (:func:`_requeued_elsewhere`)."""
    now = time.time() if now is None else now
    if now - mtime > LEASE_S:
        return f"not refreshed for {now - mtime:.0f} s (lease {LEASE_S:.0f} s)"
    here = _holder_here(holder)
    return None if here in (None, "live") else here


def _requeued_elsewhere(holder: dict) -> bool:
    """Local. Whether ``holder`` is this SLURM job, on another host: a requeued job's earlier
    start (dead), or a live step of the same job; its lease tells which."""
    job = os.environ.get("SLURM_JOB_ID")
    return bool(job) and holder.get("slurm_job_id") == job and _holder_here(holder) is None


def _watch_lease(path, holder, mtime) -> str:
    """Local. Watch the lock ``path`` (held by ``holder``, refreshed at ``mtime``) for
    :func:`_heartbeat_wait_s`: ``"refreshed"`` (its holder lives), ``"changed"`` (it was removed
    or replaced meanwhile) or ``"silent"`` (its holder is dead)."""
    wait = _heartbeat_wait_s()
    print(f"hpcgnn: the lock {path} is held by this SLURM job's {describe(holder)}: waiting up to {wait:.0f} s "
          "to see whether that run still refreshes it", file=sys.stderr, flush=True)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        time.sleep(min(1.0, REFRESH_S / 4))
        found = read_lock(path)
        if found is None or found[0] != holder:
            return "changed"
        if found[1] != mtime:
            return "refreshed"
    return "silent"


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
            if reason is None and _requeued_elsewhere(holder):
                seen = _watch_lease(self.path, holder, mtime)
                if seen == "changed":
                    continue
                if seen == "silent":
                    reason = (f"it belongs to this SLURM job {holder['slurm_job_id']} and was not refreshed for "
                              f"{_heartbeat_wait_s():.0f} s (requeued)")
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
    never waits for the others there. A rank other than 0 that is ended by a signal or a
    failure removes the job's lock too (``MPI_Abort`` then kills rank 0 before it can). Yields
    the lock on rank 0, None elsewhere.

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
    release_for_rank0 = None
    if comm is not None and comm.size > 1:
        path, token = comm.bcast((lock.path, lock.holder["token"]) if lock is not None else None, root=0)
        if lock is None:
            release_for_rank0 = functools.partial(_remove_if_token, path, token)
            on_termination(release_for_rank0)
    try:
        yield lock
    finally:
        if lock is not None:
            lock.release()
        if release_for_rank0 is not None:
            cancel_on_termination(release_for_rank0)


def _remove_if_token(path, token):
    """Remove the lock at ``path`` if it is still the one with ``token`` (this job's)."""
    found = read_lock(path)
    if found is not None and found[0].get("token") == token:
        with contextlib.suppress(OSError):
            os.unlink(path)
