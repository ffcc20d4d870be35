"""Row tables spread over ranks and read through MPI windows: the store's transport layer.

Every rank holds a shard: ``counts[r]`` rows of ``row_shape`` x ``dtype``. Ranks that share a
node map each other's shards (``MPI.Win.Allocate_shared``); MPI lays the node's shards out
back to back, so the node's rows form one array and a read of node-local rows is one
``torch.index_select`` over it (when MPI did not place them back to back, one fancy-index per
owner). Ranks on other nodes are read with passive-target ``Rget`` (one request per owner per
call; ``MPI_Type_create_hindexed_block`` datatypes pick the rows at the target and place them
in request order at the origin), under one ``Lock_all`` epoch held for the window's lifetime.
Inside a node a read needs nothing from the owner's CPU; across nodes, MPI libraries that
emulate RMA over TCP complete a read only when the owner enters MPI, which the owner's
:class:`~hpcgnn.runtime.progress.ProgressThread` does every 0.5 ms (``DistGraph`` starts one).
Runs of consecutive rows are one datatype block each.
``HPCGNN_FORCE_RMA=1`` puts every rank on its own "node".

Consistency: a write is visible to every rank after the next :func:`sync_windows` (or
``RowWindow.sync``), which every rank of the communicator calls. Windows still open at
interpreter exit are freed then (:mod:`hpcgnn.runtime.resources`), so a script that forgot
``close()`` ends cleanly.
"""
from __future__ import annotations

import ctypes

import numpy as np
import torch

from hpcgnn import _rows
from hpcgnn.runtime.collectives import allgather_int
from hpcgnn.runtime.comm import mpi, node_comm
from hpcgnn.runtime.resources import CollectiveResource

_TORCH_DTYPES = {np.dtype(t) for t in ("float32", "float64", "float16", "int64", "int32", "int16", "int8",
                                       "uint8", "bool")}


def take_rows(table, rows, out):
    """Local. ``out[:] = table[rows]`` along axis 0 (torch's index_select where it can:
    about twice as fast as ``np.take`` on one thread)."""
    if table.dtype in _TORCH_DTYPES and table.ndim >= 1 and out.flags.c_contiguous and table.flags.c_contiguous:
        torch.index_select(torch.from_numpy(table), 0, torch.from_numpy(np.ascontiguousarray(rows, dtype=np.int64)),
                           out=torch.from_numpy(out))
    else:
        np.take(table, rows, axis=0, out=out)
    return out


def scatter_rows(table, rows, out, where):
    """Local. ``out[where] = table[rows]`` along axis 0 in one pass (no temporary)."""
    if out.flags.c_contiguous and table.flags.c_contiguous and out.dtype == table.dtype and out.nbytes:
        _rows.copy_rows(_row_bytes(table), np.ascontiguousarray(rows, dtype=np.int64), _row_bytes(out),
                        np.ascontiguousarray(where, dtype=np.int64))
    else:
        out[where] = table[rows]
    return out


def _row_bytes(array):
    return array.reshape(array.shape[0], -1).view(np.uint8)


class RowWindow(CollectiveResource):
    """Collective over comm. A row table sharded over the ranks of ``comm``.

    Parameters
    ----------
    comm : MPI communicator
    num_local_rows : int
        Rows of this rank's shard (may be 0).
    row_shape : tuple
        Shape of one row (``()`` for a 1-D table).
    dtype : numpy dtype
    ncomm : MPI communicator, optional
        Node-local communicator to reuse (``hpcgnn.runtime.comm.node_comm(comm)`` by default).

    Attributes
    ----------
    local : ndarray
        This rank's shard, writable, shape ``(num_local_rows, *row_shape)``.
    counts : ndarray
        Rows per rank.
    network_bytes : int
        Bytes of rows this rank has read from or written to ranks on other nodes (payload only:
        what crosses the network, whatever MPI adds to it).
    """

    def __init__(self, comm, num_local_rows, row_shape=(), dtype=np.float32, ncomm=None):
        MPI = mpi()
        self.comm = comm
        self.dtype = np.dtype(dtype)
        self.row_shape = tuple(int(x) for x in row_shape)
        self.row_bytes = int(self.dtype.itemsize * np.prod(self.row_shape, dtype=np.int64))
        self.counts = allgather_int(int(num_local_rows), comm)
        self._own_ncomm = ncomm is None
        self.ncomm = node_comm(comm) if ncomm is None else ncomm
        self._node_ranks = np.array(self.ncomm.allgather(comm.rank), dtype=np.int64)
        nbytes = int(num_local_rows) * self.row_bytes
        self._shared_win = self._rma_win = None
        if self.ncomm.size > 1:
            self._shared_win = MPI.Win.Allocate_shared(max(nbytes, 1), 1, comm=self.ncomm)
            memory = self._shared_win.tomemory()
            self._node_views = [self._peer_view(r) for r in range(self.ncomm.size)]
            self.local = self._node_views[self.ncomm.rank]
            if self.ncomm.size < comm.size:
                self._rma_win = MPI.Win.Create(memory, 1, comm=comm)
        else:
            self._rma_win = MPI.Win.Allocate(max(nbytes, 1), 1, comm=comm)
            memory = self._rma_win.tomemory()
            self.local = np.frombuffer(memory, dtype=np.uint8)[:nbytes].view(self.dtype).reshape(
                (int(num_local_rows), *self.row_shape))
            self._node_views = [self.local]
        if self._rma_win is not None:  # one passive-target epoch for the window's lifetime
            self._rma_win.Lock_all(MPI.MODE_NOCHECK)
        # node_slot[r]: position of world rank r in this node (-1 if remote); lets a call
        # split ids into node-local and remote with one lookup.
        self.node_slot = np.full(comm.size, -1, dtype=np.int64)
        self.node_slot[self._node_ranks] = np.arange(self.ncomm.size)
        self._node_table, self._node_row_start = self._contiguous_node_table()
        # Rows are described as blocks of the widest basic type that divides them: MPICH's
        # datatype engine copies element by element, and 8-byte elements are ~4x faster than bytes.
        unit = next(u for u in (8, 4, 2, 1) if self.row_bytes % u == 0) if self.row_bytes else 1
        self._elemtype = {8: MPI.INT64_T, 4: MPI.INT32_T, 2: MPI.INT16_T, 1: MPI.BYTE}[unit]
        self._elems_per_row = self.row_bytes // unit
        self.network_bytes = 0

    def _peer_view(self, node_rank):
        buf, _ = self._shared_win.Shared_query(node_rank)
        rows = int(self.counts[self._node_ranks[node_rank]])
        raw = np.frombuffer(buf, dtype=np.uint8)[: rows * self.row_bytes]
        return raw.view(self.dtype).reshape((rows, *self.row_shape))

    def _contiguous_node_table(self):
        """One array over the node's shards when MPI placed them back to back (it must, by
        default), with each node rank's first row in it; else None (per-owner views are used)."""
        starts = np.concatenate([[0], np.cumsum([v.shape[0] for v in self._node_views])]).astype(np.int64)
        if len(self._node_views) == 1:
            return self._node_views[0], starts[:1]
        base = self._node_views[0].__array_interface__["data"][0]
        for view, start in zip(self._node_views, starts):
            if view.shape[0] and view.__array_interface__["data"][0] != base + start * self.row_bytes:
                return None, starts[:-1]
        total = int(starts[-1])
        raw = (ctypes.c_char * max(total * self.row_bytes, 1)).from_address(base)
        table = np.frombuffer(raw, dtype=np.uint8)[: total * self.row_bytes]
        return table.view(self.dtype).reshape((total, *self.row_shape)), starts[:-1]

    @property
    def node_table(self):
        """The rows of every rank on this node as one array (node ranks in order), or None when
        MPI did not place the shards back to back."""
        return self._node_table

    def node_table_rows(self, owners, lids):
        """Local. Where rows ``lids`` of ranks ``owners`` sit in :attr:`node_table`, or None when
        some owner is on another node or there is no node table."""
        slots = self.node_slot[np.asarray(owners, dtype=np.int64)]
        if self._node_table is None or (slots.shape[0] and int(slots.min()) < 0):
            return None
        return self._node_row_start[slots] + lids

    @property
    def node_ranks(self) -> np.ndarray:
        """Ranks of ``comm`` that share this node's memory, in node order."""
        return self._node_ranks

    # ------------------------------------------------------------------ reads
    def read(self, owners, lids, out, where=None):
        """Local. ``out[where[i]] = shard_of(owners[i])[lids[i]]`` for every i (``where`` defaults
        to ``0..n-1``); returns ``out``.

        Remote rows are requested first (one ``Rget`` per owner) and node-local rows are
        copied while those are in flight. Safe to call from several threads at once.
        """
        owners = np.asarray(owners, dtype=np.int64)
        lids = np.asarray(lids, dtype=np.int64)
        slots = self.node_slot[owners]
        local = slots >= 0
        if local.all():
            self._copy_node_rows(slots, lids, out, where)
            return out
        remote = np.flatnonzero(~local)
        self.network_bytes += remote.shape[0] * self.row_bytes
        positions = remote if where is None else where[remote]
        requests, types, stage, positions = self._post_gets(owners[remote], lids[remote], positions)
        if local.any():
            near = np.flatnonzero(local)
            self._copy_node_rows(slots[near], lids[near], out, near if where is None else where[near])
        mpi().Request.Waitall(requests)
        for datatype in types:
            datatype.Free()
        scatter_rows(stage, np.arange(stage.shape[0]), out, positions)
        return out

    def _copy_node_rows(self, slots, lids, out, where):
        if self._node_table is not None:
            rows = self._node_row_start[slots] + lids
            if where is None:
                take_rows(self._node_table, rows, out)
            else:
                scatter_rows(self._node_table, rows, out, where)
            return
        for slot in np.unique(slots):
            pick = np.flatnonzero(slots == slot)
            dest = pick if where is None else where[pick]
            out[dest] = self._node_views[slot][lids[pick]]

    def _post_gets(self, owners, lids, positions):
        """One Rget per owner into a staging buffer grouped by owner (scattered after Waitall:
        a plain origin buffer is cheaper for MPI than a second indexed datatype)."""
        order = np.argsort(owners, kind="stable")
        owners, lids, positions = owners[order], lids[order], positions[order]
        bounds = np.flatnonzero(np.diff(owners)) + 1
        stage = np.empty((owners.shape[0], *self.row_shape), dtype=self.dtype)
        flat = stage.reshape(-1).view(np.uint8)
        requests, types = [], []
        for lo, hi in zip(np.concatenate([[0], bounds]), np.concatenate([bounds, [owners.shape[0]]])):
            target = self._rows_type(lids[lo:hi])
            types.append(target)
            origin = [flat[lo * self.row_bytes:hi * self.row_bytes], (hi - lo) * self._elems_per_row,
                      self._elemtype]
            requests.append(self._rma_win.Rget(origin, int(owners[lo]), [0, 1, target]))
        return requests, types, stage, positions

    def _rows_type(self, rows):
        """A committed datatype selecting ``rows`` (byte displacements: no 2**31 limit).

        Runs of consecutive rows become one block each: across nodes MPI ships the flattened
        datatype with the request, so a whole in-edge list read as one block costs 16 bytes of
        description instead of 8 per entry (and the target packs it with one copy).
        """
        rows = np.asarray(rows, dtype=np.int64)
        starts = np.flatnonzero(np.diff(rows) != 1) + 1 if rows.shape[0] > 1 else rows[:0]
        if 2 * (starts.shape[0] + 1) <= rows.shape[0]:
            starts = np.concatenate([[0], starts])
            lengths = np.diff(np.append(starts, rows.shape[0])) * self._elems_per_row
            return self._elemtype.Create_hindexed(lengths.tolist(), (rows[starts] * self.row_bytes).tolist()).Commit()
        return self._elemtype.Create_hindexed_block(self._elems_per_row, (rows * self.row_bytes).tolist()).Commit()

    # ----------------------------------------------------------------- writes
    def write(self, owners, lids, values):
        """Local. ``shard_of(owners[i])[lids[i]] = values[i]``; visible everywhere after :meth:`sync`."""
        owners = np.asarray(owners, dtype=np.int64)
        lids = np.asarray(lids, dtype=np.int64)
        values = np.ascontiguousarray(values, dtype=self.dtype)
        slots = self.node_slot[owners]
        for slot in np.unique(slots[slots >= 0]):
            pick = np.flatnonzero(slots == slot)
            self._node_views[slot][lids[pick]] = values[pick]
        remote = np.flatnonzero(slots < 0)
        if remote.shape[0] == 0:
            return
        self.network_bytes += remote.shape[0] * self.row_bytes
        flat = values.reshape(-1).view(np.uint8)
        for owner in np.unique(owners[remote]):
            pick = remote[owners[remote] == owner]
            target = self._rows_type(lids[pick])
            origin = self._rows_type(pick)
            self._rma_win.Put([flat, 1, origin], int(owner), [0, 1, target])
            self._rma_win.Flush(int(owner))
            target.Free()
            origin.Free()

    def sync(self):
        """Collective over comm. Make every rank's writes visible to every rank (a barrier)."""
        sync_windows(self.comm, [self])

    def complete_writes(self):
        """Local. Complete this rank's RMA puts and publish them (the first half of a sync)."""
        if self._rma_win is not None:
            self._rma_win.Flush_all()
            self._rma_win.Sync()

    def refresh(self):
        """Local. See the other ranks' published writes (the second half of a sync)."""
        if self._rma_win is not None:
            self._rma_win.Sync()

    # --------------------------------------------------------------- lifetime
    def close(self):
        """Collective over comm. Free the windows (the shard becomes invalid)."""
        if self._rma_win is None and self._shared_win is None:
            return
        self.comm.Barrier()
        self.local = self._node_table = None
        self._node_views = []
        if self._rma_win is not None:
            self._rma_win.Unlock_all()
            self._rma_win.Free()
        if self._shared_win is not None:
            self._shared_win.Free()
        self._rma_win = self._shared_win = None
        if self._own_ncomm:
            self.ncomm.Free()



def sync_windows(comm, windows):
    """Collective over comm. Complete every rank's writes to ``windows`` and make them visible to
    every rank: one barrier for all of them.

    Shared-memory peers write with plain stores, which the barrier orders (MPI barriers are full
    memory fences); RMA puts are completed by ``Flush_all`` before it, and ``Win.Sync`` on both
    sides of it synchronises the public and private copies of each window.
    """
    for window in windows:
        window.complete_writes()
    comm.Barrier()
    for window in windows:
        window.refresh()
