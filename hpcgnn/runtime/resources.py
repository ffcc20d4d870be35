"""Objects whose ``close()`` is collective (they hold MPI windows, communicators or threads
that call MPI), and their release at interpreter exit.

Every :class:`CollectiveResource` is recorded when its construction succeeds and forgotten
when it is closed. At exit, the resources a script left open are closed newest first (every
rank created them in the same order, so every rank closes them in the same order and the
collectives pair up), before mpi4py finalises MPI. This matters most on the route between
machines: a :class:`~hpcgnn.runtime.progress.ProgressThread` left running keeps entering MPI
while ``MPI_Finalize`` tears it down, which corrupts the heap; a window freed by
``MPI_Finalize`` itself draws transport warnings.
"""
from __future__ import annotations

import atexit
import functools
import sys

from hpcgnn.runtime.failure_report import abort_job

# Open resources in creation order (strong references: MPI holds their memory anyway, and an
# id stays unique while its object lives).
_open: dict[int, CollectiveResource] = {}
_exit_hook_installed = False


class CollectiveResource:
    """Local. A base class: ``with obj:`` calls the collective ``close()`` on a normal exit only,
    and an object left open is closed at interpreter exit.

    After an exception the ranks are no longer in step: a collective in clean-up could pair
    with an unrelated one on another rank and hang, so the resource is left to the abort that
    follows (see :func:`_release_at_exit`).

    Subclasses define ``__init__`` and ``close`` as usual: the object is recorded when the
    outermost ``__init__`` returns and forgotten when ``close`` is first called, so ``close``
    may be called again (by a parent resource, or at exit) and must then do nothing harmful.
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is not None:
            @functools.wraps(init)
            def recorded_init(self, *args, **kw):
                init(self, *args, **kw)
                if type(self).__init__ is recorded_init:  # the outermost constructor has finished
                    _record(self)

            cls.__init__ = recorded_init
        close = cls.__dict__.get("close")
        if close is not None:
            @functools.wraps(close)
            def forgetting_close(self, *args, **kw):
                _open.pop(id(self), None)
                return close(self, *args, **kw)

            cls.close = forgetting_close

    def close(self):
        """Collective. Release the resource."""
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()


def _open_resources() -> list:
    """Local. The collective resources not yet closed, oldest first."""
    return list(_open.values())


def _record(resource):
    global _exit_hook_installed
    if not _exit_hook_installed:
        # Registered once a resource exists, hence after MPI is initialised: atexit runs
        # handlers last-in first-out, and mpi4py finalises MPI after them.
        atexit.register(_release_at_exit)
        _exit_hook_installed = True
    _open[id(resource)] = resource


def _release_at_exit():
    """Local. Close the resources a script left open, newest first, as every rank does in the
    same order (a resource that closes its parts, as a graph closes its windows, has closed
    them by the time their turn comes).

    After an uncaught exception the ranks are out of step and a collective could hang: the
    whole job is aborted instead (the traceback has been printed by then). When MPI has
    already been finalised by the script there is nothing left to release.
    """
    if not _open:
        return
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None or not mpi.Is_initialized() or mpi.Is_finalized():
        _open.clear()
        return
    if getattr(sys, "last_value", None) is not None:
        if mpi.COMM_WORLD.size > 1:
            abort_job(mpi.COMM_WORLD, 1)
        return
    while _open:
        _, resource = _open.popitem()  # newest first
        resource.close()
