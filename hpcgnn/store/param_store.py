"""One flat float32 vector sharded over the ranks in an MPI window, read and updated one-sidedly:
the parameter store of asynchronous training (``--sync async``).

Rank ``r`` owns the contiguous range ``bounds[r]:bounds[r + 1]`` of the vector and, in a second
window, one int64 version counter for it. A rank reads the whole vector (:meth:`ParamStore.read`)
and adds an update to it (:meth:`ParamStore.add`) without the owners taking part: no server
process, no step barrier. Every access goes through MPI's atomic accumulate operations
(``Get_accumulate`` with ``NO_OP`` to read, ``Accumulate`` with ``SUM`` to add,
``Fetch_and_op`` for the counters), which MPI makes element-wise atomic against each other, so
concurrent updates from every rank all land: none overwrites another. A read may see one rank's
update on some shards and not yet on others; each shard's version says how many updates it had
when read.

The lag of an update to a shard is the number of updates other ranks added to that shard
between this rank's read and its add: the parameters its gradient was computed from were that
many updates old. :meth:`ParamStore.add` scales each shard's update by ``min(1, P / (1 + lag))``
(staleness-aware learning rates, after Zhang et al., IJCAI 2016, relative to the lag P ranks
stepping in turn make): an update no staler than that counts fully, and a slow rank's older ones
count less, in proportion. Scaling every update by ``1 / (1 + lag)`` (their rule as it stands)
makes a round of P updates one synchronous step's size; with each rank's own Adam step that
learned markedly slower per epoch than synchronous training (the stragglers benchmark), since
Adam already sizes each step to about the learning rate.

Both windows hold one passive-target epoch (``Lock_all``) for their lifetime. Across machines an
MPI that emulates RMA over TCP completes an access when the owner enters MPI: the training run's
progress thread (:mod:`hpcgnn.runtime.progress`) provides that.
"""
from __future__ import annotations

import numpy as np

from hpcgnn.runtime.comm import mpi
from hpcgnn.runtime.resources import CollectiveResource


def shard_bounds(count, ranks) -> np.ndarray:
    """Local. ``ranks + 1`` offsets cutting ``count`` entries into contiguous shards whose sizes
    differ by at most one."""
    return np.array([count * r // ranks for r in range(ranks + 1)], dtype=np.int64)


def lag_scale(lag, ranks) -> float:
    """Local. The weight of an update ``lag`` updates old among ``ranks`` ranks: 1 up to the lag of
    ranks stepping in turn (``ranks - 1``), then ``ranks / (1 + lag)``."""
    return min(1.0, ranks / (1.0 + lag))


class ParamStore(CollectiveResource):
    """Collective over comm (construction, :meth:`reset`, :meth:`close`). The vector ``values``
    (the same on every rank) spread over the ranks of ``comm``.

    Attributes
    ----------
    bounds : ndarray
        Shard offsets: rank ``r`` owns ``bounds[r]:bounds[r + 1]``.
    network_bytes : int
        Bytes this rank read from or added to other ranks' shards.
    """

    def __init__(self, comm, values):
        MPI = mpi()
        values = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
        self.comm = comm
        self.size = values.shape[0]
        self.bounds = shard_bounds(self.size, comm.size)
        lo, hi = self.bounds[comm.rank], self.bounds[comm.rank + 1]
        self.win = MPI.Win.Allocate(max(int(hi - lo), 1) * 4, 4, comm=comm)
        self.local = np.frombuffer(self.win.tomemory(), dtype=np.float32)[:hi - lo]
        self.local[:] = values[lo:hi]
        self.version_win = MPI.Win.Allocate(8, 8, comm=comm)
        np.frombuffer(self.version_win.tomemory(), dtype=np.int64)[:] = 0
        self._scaled = np.empty(self.size, dtype=np.float32)  # what add sends: kept until flushed
        self.network_bytes = 0
        comm.Barrier()  # every shard initialised before anyone reads
        self.win.Lock_all(MPI.MODE_NOCHECK)
        self.version_win.Lock_all(MPI.MODE_NOCHECK)

    def _owners(self):
        return [r for r in range(self.comm.size) if self.bounds[r + 1] > self.bounds[r]]

    def read(self, out) -> np.ndarray:
        """Local. Fill ``out`` (float32, the vector's length) with the current values; returns each
        shard's version (updates added to it) as read."""
        MPI = mpi()
        versions = np.zeros(self.comm.size, dtype=np.int64)
        ignored = np.zeros(1, dtype=np.int64)
        for owner in self._owners():
            lo, hi = int(self.bounds[owner]), int(self.bounds[owner + 1])
            self.version_win.Fetch_and_op(ignored, versions[owner:owner + 1], owner, 0, MPI.NO_OP)
            self.win.Get_accumulate([out[lo:hi], MPI.FLOAT], [out[lo:hi], MPI.FLOAT], owner,
                                    [0, hi - lo, MPI.FLOAT], MPI.NO_OP)
        self.version_win.Flush_all()
        self.win.Flush_all()
        self._count(4)
        return versions

    def add(self, update, read_versions) -> np.ndarray:
        """Local. Add ``update`` to the vector, each shard's part scaled by ``min(1, P / (1 + lag))``
        (P ranks), where ``lag`` is the number of updates the shard received since
        ``read_versions`` (from :meth:`read`); returns the lags. The update is complete at every
        owner on return."""
        MPI = mpi()
        update = np.ascontiguousarray(update, dtype=np.float32).reshape(-1)
        before = np.zeros(self.comm.size, dtype=np.int64)
        one = np.ones(1, dtype=np.int64)
        owners = self._owners()
        for owner in owners:
            self.version_win.Fetch_and_op(one, before[owner:owner + 1], owner, 0, MPI.SUM)
        self.version_win.Flush_all()
        lags = np.maximum(before - read_versions, 0)
        for owner in owners:
            lo, hi = int(self.bounds[owner]), int(self.bounds[owner + 1])
            np.multiply(update[lo:hi], np.float32(lag_scale(lags[owner], self.comm.size)), out=self._scaled[lo:hi])
            self.win.Accumulate([self._scaled[lo:hi], MPI.FLOAT], owner, [0, hi - lo, MPI.FLOAT], MPI.SUM)
        self.win.Flush_all()
        self._count(4)
        return lags[owners]

    def _count(self, itemsize):
        mine = int(self.bounds[self.comm.rank + 1] - self.bounds[self.comm.rank])
        self.network_bytes += (self.size - mine) * itemsize

    def reset(self, values):
        """Collective over comm. Set the vector to ``values`` (the same on every rank), as a resumed
        run's loaded parameters; the versions stay."""
        values = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
        self.comm.Barrier()  # no update of the old values is in flight
        lo, hi = int(self.bounds[self.comm.rank]), int(self.bounds[self.comm.rank + 1])
        self.win.Put([values[lo:hi], mpi().FLOAT], self.comm.rank, [0, hi - lo, mpi().FLOAT])
        self.win.Flush_all()
        self.win.Sync()
        self.comm.Barrier()

    def close(self):
        """Collective over comm. Free the windows."""
        if self.win is None:
            return
        self.comm.Barrier()
        self.local = None
        for win in (self.win, self.version_win):
            win.Unlock_all()
            win.Free()
        self.win = self.version_win = None
