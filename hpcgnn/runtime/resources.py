"""Objects whose ``close()`` is collective (they hold MPI windows or communicators)."""
from __future__ import annotations


class CollectiveResource:
    """Local. A base class: ``with obj:`` calls the collective ``close()`` on a normal exit only.

    After an exception the ranks are no longer in step: a collective in clean-up could pair
    with an unrelated one on another rank and hang, so the resource is left to the abort that
    follows (or to the exit-time release of :mod:`hpcgnn.store.window`).
    """

    def close(self):
        """Collective. Release the resource."""
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
