"""The checkpoint directory's lock: one training run writes a checkpoint directory at a time.

Rank 0 of a run that writes checkpoints creates ``<checkpoint dir>/lock`` when the run starts
and removes it when the run ends, also when it ends with an exception. The lock file, its
holder record, its lease and the rules that make it stale are those of
:mod:`hpcgnn.runtime.lock` (a partition's output directory takes the same lock); the names
below are kept importable from here.
"""
from __future__ import annotations

import contextlib
import os

from hpcgnn.runtime.lock import (  # noqa: F401 - the generic lock's names, importable from here too
    LEASE_S,
    NO_HARD_LINKS,
    REFRESH_S,
    FileLock,
    describe,
    held_by_rank0,
    holder_record,
    pid_alive,
    read_lock,
    stale_reason,
)

LOCK_NAME = "lock"


class DirectoryLock(FileLock):
    """Local. The lock of one checkpoint directory, held by this process (rank 0 of a run).

    Parameters
    ----------
    directory : str
        The checkpoint directory (created if missing).
    force : bool
        Take the lock even from a live holder.

    Raises
    ------
    InputError
        The directory is locked by a live holder (named) and ``force`` is false, or the lock
        cannot be written.
    """

    def __init__(self, directory, force=False):
        super().__init__(os.path.join(directory, LOCK_NAME), force,
                         in_use="the checkpoint directory is in use by another run")


@contextlib.contextmanager
def checkpoint_lock(directory, comm, force=False):
    """Collective over comm. Hold ``directory``'s lock (on rank 0) while the body runs.

    Rank 0 decides and every rank learns the outcome, so a refused run fails on every rank
    together. With ``directory`` None (a run that writes no checkpoints) nothing is locked
    and nothing is communicated. The lock is released on the way out, also by an exception;
    the release is local, so a failing rank never waits for the others there.

    Raises
    ------
    InputError
        On every rank: the directory is locked by a live holder (see :class:`DirectoryLock`).
    """
    if directory is None:
        yield None
        return
    with held_by_rank0(comm, lambda: DirectoryLock(directory, force), directory) as lock:
        yield lock
