"""Write-then-rename helpers: a reader never sees a half-written file or directory.

Every temporary path made here is registered until it is renamed into place or removed, so
that a process ended by SIGTERM or SIGINT (:mod:`hpcgnn.runtime.abort`) removes what it was
writing (:func:`remove_temporaries`) instead of leaving ``.name.tmp-*`` behind.
"""
from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import stat
import tempfile
import threading
import uuid

from hpcgnn.runtime.errors import InputError

_temporaries: set[str] = set()
# what remove_temporaries removed: a writer still running (the main thread, while the signal
# thread ends the job) must not recreate a directory that is gone on purpose
_removed: set[str] = set()
# set once the process is being ended by a signal: a temporary made after the cleanup ran would
# be left behind, so making one fails (and removes it)
_ending = False
_cleanups: list = []
_lock = threading.Lock()


def _register(path):
    with _lock:
        if not _ending:
            _temporaries.add(path)
            return
        _removed.add(path)
    _remove(path)
    raise InterruptedError(errno.EINTR, "the process is being stopped", path)


def track_temporary(path):
    """Local. Remove ``path`` too if this process ends by a signal or a failure; returns ``path``.

    For a temporary directory another rank made (:func:`make_temp_dir` on rank 0, broadcast):
    ``MPI_Abort`` kills the other ranks without their cleanup, so every rank that writes into
    it must be able to remove it, and none recreates it once removed (:func:`atomic_path`).
    """
    _register(os.path.abspath(os.fspath(path)))
    return path


def forget(path):
    """Local. Stop tracking a temporary ``path`` (it was renamed into place or removed)."""
    with _lock:
        _temporaries.discard(os.path.abspath(os.fspath(path)))


def on_termination(cleanup):
    """Local. Call ``cleanup()`` too when the process is ended by a signal (a lock to release);
    undo with :func:`cancel_on_termination`."""
    with _lock:
        _cleanups.append(cleanup)


def cancel_on_termination(cleanup):
    """Local. Forget a cleanup registered with :func:`on_termination`."""
    with _lock:
        if cleanup in _cleanups:
            _cleanups.remove(cleanup)


def remove_temporaries(final=False) -> list[str]:
    """Local. Remove every temporary file and directory this process has not finished, and run
    the cleanups registered with :func:`on_termination`; returns the paths removed.

    Safe to call from a signal-handling thread: a writer still holding a removed file open
    only writes into an unlinked inode, and none makes a removed directory again. With
    ``final`` (the process is being ended while its main thread still runs), a temporary made
    or tracked from now on is removed at once and its writer fails.
    """
    global _ending
    with _lock:
        _ending = _ending or final
        paths = sorted(_temporaries)
        _removed.update(paths)
        _temporaries.clear()
        cleanups = list(_cleanups)
        _cleanups.clear()
    for cleanup in cleanups:
        with contextlib.suppress(Exception):
            cleanup()
    for path in paths:
        _remove(path)
    return paths


def _remove(path):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            os.unlink(path)


@contextlib.contextmanager
def atomic_path(path, suffix=""):
    """Local. Yield a temporary path next to ``path``; rename it onto ``path`` on success.

    On an exception the temporary file is removed and ``path`` is left untouched. An OS error
    while writing (read-only directory, full disk, quota, file-size limit) becomes an
    :class:`~hpcgnn.runtime.errors.InputError` naming ``path`` (:func:`write_error`).
    """
    path = os.fspath(path)
    tmp = None
    try:
        tmp = _new_temp_file(path, suffix)
        yield tmp
        os.replace(tmp, path)
        forget(tmp)
    except BaseException as exc:
        _discard(tmp)
        error = write_error(path, exc)
        if error is not None:
            raise error from None
        raise


@contextlib.contextmanager
def collective_atomic_path(path, comm, suffix="", committing=None):
    """Collective over comm. :func:`atomic_path` for a set of files that every rank writes at
    once, each rank its own ``path``: no file of the set is renamed into place unless every
    rank's write succeeded.

    When any rank's write fails, every rank removes its temporary file and raises: the failed
    rank its own one-line error naming its file, the others one naming that rank. Once every
    write has succeeded, ``committing()`` (if given) runs on every rank, then every rank waits
    for the others and renames its file into place (a hook that removes what the new set
    replaces runs before any file of the set appears).
    """
    path = os.fspath(path)
    tmp = error = None
    try:
        tmp = _new_temp_file(path, suffix)
        yield tmp
    except Exception as exc:  # noqa: BLE001 - every rank must learn of any failure, bugs included
        error = write_error(path, exc) or exc
    except BaseException:  # interrupted: no collective, the signal handling ends the job
        _discard(tmp)
        raise
    from hpcgnn.runtime.collectives import fail_together  # deferred: MPI's helpers, only when collective

    try:
        fail_together(comm, error, path)
    except BaseException:  # this rank's write, or another's, failed: no file of the set stays
        _discard(tmp)
        raise
    if committing is not None:
        committing()
    comm.Barrier()
    try:
        os.replace(tmp, path)
    except OSError as exc:
        _discard(tmp)
        raise write_error(path, exc) from None
    forget(tmp)


def _new_temp_file(path, suffix) -> str:
    """A fresh temporary file beside ``path``, tracked until renamed or removed."""
    directory = os.path.dirname(os.path.abspath(path))
    if not _inside_temporary(directory):  # one removed by a peer's abort stays removed
        os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp" + suffix, dir=directory)
    _register(tmp)
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a dataset should be shareable
    return tmp


def _inside_temporary(directory) -> bool:
    with _lock:
        return any(directory == t or directory.startswith(t + os.sep) for t in _temporaries | _removed)


def _discard(tmp):
    if tmp is not None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        forget(tmp)


def write_error(path, exc: BaseException) -> InputError | None:
    """Local. The one-line error for a failed write of ``path``: ``<path>: cannot write (No space
    left on device)``; None when ``exc`` has no OS error behind it (:func:`os_error_in`)."""
    cause = os_error_in(exc)
    if cause is None and isinstance(exc, OSError):
        cause = exc
    if cause is None:
        return None
    return InputError(path, f"cannot write ({os_reason(cause)})")


#: how the HDF5 library quotes the system's error of a failed write in its own message
HDF5_ERRNO = re.compile(r"errno = (\d+)")


def open_regular(path, flag=None):
    """Local. ``path`` opened for reading (binary), refused in one line naming ``path`` (and the
    ``flag`` that names it) unless it is a regular file.

    A FIFO where a file is expected would block the open, then the read, forever (a device may
    never end): the open is non-blocking, and the kind of file is read from the open descriptor,
    so swapping the path between a check and the open changes nothing.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise InputError(path, f"cannot read ({os_reason(exc)})", flag) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
                else "a socket" if stat.S_ISSOCK(mode) else "a device")
        raise InputError(path, f"not a regular file ({kind})", flag)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def os_error_in(exc: BaseException) -> OSError | None:
    """Local. The OS error (one with an errno) behind ``exc``, if any.

    h5py reports a failed write as an ``OSError`` and then, while closing the file, raises a
    ``RuntimeError`` in the middle of handling it: the OS error is in the exception's context.
    A small file fails only when it is closed (HDF5 writes it then), as a ``RuntimeError``
    alone whose text quotes the system's ``errno = N``. Torch's writer reports the file's
    ``OSError`` as the context of a ``RuntimeError`` ("unexpected pos") when it writes to a
    Python file object (never give it a path: its own writer hides the system's error).
    """
    seen = 0
    first = exc
    while exc is not None and seen < 8:
        if isinstance(exc, OSError) and exc.errno is not None:
            return exc
        exc = exc.__cause__ or exc.__context__
        seen += 1
    if isinstance(first, RuntimeError):
        quoted = HDF5_ERRNO.search(str(first))
        if quoted and int(quoted.group(1)) in errno.errorcode:
            number = int(quoted.group(1))
            return OSError(number, os.strerror(number))
    return None


def os_reason(exc: OSError) -> str:
    """Local. The system's words for an OS error (``No space left on device``), without paths."""
    if exc.errno is not None:
        return os.strerror(exc.errno)
    return str(exc.strerror or exc)


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def make_parent_dir(final_dir):
    """Local. Make the directory ``final_dir`` will be created in; one line naming ``final_dir``
    if that cannot be done."""
    final_dir = os.path.abspath(os.fspath(final_dir))
    try:
        os.makedirs(os.path.dirname(final_dir), exist_ok=True)
    except FileExistsError:  # makedirs met a file where a directory belongs
        raise InputError(final_dir, "cannot create the output directory (a component of the path is a file)") from None
    except OSError as exc:
        raise InputError(final_dir, f"cannot create the output directory ({os_reason(exc)})") from None


def make_temp_dir(final_dir):
    """Local. A fresh, empty sibling directory of ``final_dir`` to build it in (tracked until
    :func:`replace_dir` or :func:`forget`)."""
    final_dir = os.path.abspath(os.fspath(final_dir))
    make_parent_dir(final_dir)
    try:
        tmp = tempfile.mkdtemp(prefix="." + os.path.basename(final_dir) + ".tmp-",
                               dir=os.path.dirname(final_dir))
    except OSError as exc:
        raise InputError(final_dir, f"cannot create the output directory ({os_reason(exc)})") from None
    _register(tmp)
    os.chmod(tmp, 0o777 & ~_umask())
    return tmp


def remove_temp_dir(tmp_dir):
    """Local. Remove an unfinished directory made by :func:`make_temp_dir`."""
    shutil.rmtree(tmp_dir, ignore_errors=True)
    forget(tmp_dir)


def replace_dir(tmp_dir, final_dir):
    """Local. Move a finished directory onto ``final_dir``, replacing an older one if present."""
    final_dir = os.fspath(final_dir)
    if os.path.exists(final_dir):
        old = final_dir.rstrip("/") + ".old-" + uuid.uuid4().hex[:12]
        os.replace(final_dir, old)
        os.replace(tmp_dir, final_dir)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp_dir, final_dir)
    forget(tmp_dir)
