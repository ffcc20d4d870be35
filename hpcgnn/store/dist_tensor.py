"""``DistTensor``: a row-sharded array that any rank reads and writes by global id.

Rows are owned as the partition book says (part r's rows live on rank r, inside an MPI
window, see :mod:`hpcgnn.store.window`). Reads are one-sided.
Consistency follows DistDGL: a write is visible to every rank after the next
:meth:`DistTensor.barrier` (and :meth:`hpcgnn.DistGraph.barrier` does the same for every field
of a graph at once).
"""
from __future__ import annotations

import numpy as np
import torch

from hpcgnn.runtime.collectives import exchange_by_owner
from hpcgnn.runtime.comm import world
from hpcgnn.runtime.resources import CollectiveResource
from hpcgnn.runtime.rng import unit_uniform
from hpcgnn.store.partition_book import PartitionBook
from hpcgnn.store.window import RowWindow, sync_windows, take_rows


def zeros_init(gids, row_shape, dtype):
    """Local. Initialiser: zero rows."""
    return np.zeros((len(gids), *row_shape), dtype=dtype)


def uniform_init(low=-1.0, high=1.0, seed=0):
    """Local. Initialiser drawing each element from U(low, high) as a function of its global id.

    The values depend only on (seed, row id, column), so a tensor holds the same numbers
    whatever the number of ranks it is spread over.
    """
    def init(gids, row_shape, dtype):
        width = int(np.prod(row_shape, dtype=np.int64))
        index = (np.asarray(gids, dtype=np.uint64)[:, None] * np.uint64(width)
                 + np.arange(width, dtype=np.uint64)[None, :])
        unit = unit_uniform(index, seed)
        return (low + (high - low) * unit).astype(dtype).reshape((len(gids), *row_shape))
    return init


def as_ids(gids):
    """Local. Ids from a list, numpy array or torch tensor, as a flat int64 array."""
    if hasattr(gids, "numpy"):
        gids = gids.detach().cpu().numpy()
    return np.asarray(gids, dtype=np.int64).reshape(-1)


class DistTensor(CollectiveResource):
    """Collective over comm. A ``shape[0]``-row array sharded over the ranks of ``comm``.

    Parameters
    ----------
    shape : tuple
        Global shape; rows are split as ``book`` says.
    dtype : numpy or torch dtype
    name : str, optional
        For messages and checkpoints.
    init : callable, optional
        ``init(gids, row_shape, dtype) -> array`` filling this rank's rows (default zeros);
        see :func:`uniform_init`.
    comm : MPI communicator, optional
        Default ``MPI.COMM_WORLD``.
    book : PartitionBook, optional
        Row ownership; default: rows split evenly over the ranks in rank order.
    local_data : callable or array, optional
        This rank's rows, written into the shard instead of ``init``; a callable
        ``local_data(out)`` fills the shard in place (e.g. an HDF5 ``read_direct``).
    encoding : str, optional
        What the stored values mean when ``dtype`` alone does not say: ``"bfloat16"`` for uint16
        bit patterns of bfloat16 values (:mod:`hpcgnn.format.feat_dtype`); :func:`float_rows`
        decodes gathered rows.
    """

    def __init__(self, shape, dtype=np.float32, name=None, init=None, comm=None, book=None, local_data=None,
                 encoding=None):
        self.comm = comm if comm is not None else world()
        self.encoding = encoding
        self.shape = tuple(int(x) for x in shape)
        self.dtype = np.dtype(_torch_to_numpy(dtype))
        self.name = name or "tensor"
        if book is None:
            bounds = np.arange(self.comm.size + 1) * self.shape[0] // self.comm.size
            book = PartitionBook(bounds)
        if book.num_parts != self.comm.size or book.num_ids != self.shape[0]:
            raise ValueError(f"DistTensor '{self.name}': partition book has {book.num_parts} parts over "
                             f"{book.num_ids} rows, communicator {self.comm.size} ranks, shape {self.shape}")
        self.book = book
        self.local_range = book.part_range(self.comm.rank)
        rows = self.local_range[1] - self.local_range[0]
        self.window = RowWindow(self.comm, rows, self.shape[1:], self.dtype)
        if callable(local_data):
            local_data(self.window.local)
        elif local_data is not None:
            self.window.local[...] = local_data
        else:
            self.window.local[...] = (init or zeros_init)(np.arange(*self.local_range), self.shape[1:], self.dtype)
        self._node_ids = self._node_id_range()
        self.window.sync()

    def _node_id_range(self):
        """Global ids held by this node's table, when they form one range (then a read of node-local
        rows is one index_select)."""
        if self.window.node_table is None:
            return None
        ranks = self.window.node_ranks
        if not np.array_equal(ranks, np.arange(ranks[0], ranks[0] + ranks.shape[0])):
            return None
        return int(self.book.starts[ranks[0]]), int(self.book.starts[ranks[-1] + 1])

    @property
    def local(self) -> np.ndarray:
        """This rank's rows (a writable view of its shard)."""
        return self.window.local

    def __len__(self):
        return self.shape[0]

    def gather(self, gids, out=None) -> np.ndarray:
        """Local. Rows ``gids`` (any order, repeats allowed) as a numpy array, in request order."""
        gids = as_ids(gids)
        if out is None:
            out = np.empty((gids.shape[0], *self.shape[1:]), dtype=self.dtype)
        elif not out.flags.c_contiguous or out.dtype != self.dtype or out.shape[0] != gids.shape[0]:
            raise ValueError(f"DistTensor '{self.name}': out must be a C-contiguous {self.dtype} array "
                             f"with {gids.shape[0]} rows")
        if gids.shape[0] == 0:
            return out
        lo, hi = int(gids.min()), int(gids.max())
        if lo < 0 or hi >= self.shape[0]:
            self.book.check(gids, f"DistTensor '{self.name}': row")
        if self._node_ids is not None and lo >= self._node_ids[0] and hi < self._node_ids[1]:
            base = self._node_ids[0]
            take_rows(self.window.node_table, gids - base if base else gids, out)
            return out
        owners = self.book.owner(gids)
        return self.window.read(owners, gids - self.book.starts[owners], out)

    def __getitem__(self, gids):
        """Local. Rows ``gids`` as a torch tensor (ids may be a tensor, array or list); an encoded
        field's rows decoded (bfloat16 bit patterns as float32 values)."""
        rows = self.gather(gids)
        return torch.from_numpy(rows) if self.encoding is None else float_rows(rows, self.encoding)

    def __setitem__(self, gids, values):
        """Local. Write rows ``gids``; every rank sees them after the next :meth:`barrier`."""
        gids = as_ids(gids)
        if hasattr(values, "detach"):
            values = values.detach().cpu().numpy()
        values = np.broadcast_to(np.asarray(values, dtype=self.dtype), (gids.shape[0], *self.shape[1:]))
        if gids.shape[0] == 0:
            return
        self.book.check(gids, f"DistTensor '{self.name}': row")
        owners = self.book.owner(gids)
        self.window.write(owners, gids - self.book.starts[owners], values)

    def assign(self, gids, values):
        """Collective over comm. Every rank writes rows ``gids`` at once, with a fixed outcome when
        ranks write the same row: the highest rank's value (and a rank's last) is kept.

        Rows travel to their owners (one Alltoallv), which apply them in rank order: unlike
        ``tensor[gids] = values``, whose concurrent one-sided writes of one row land in any
        order, the result does not depend on timing. Visible to every rank on return; no row
        is changed before every rank has entered the call (the counts' Alltoall waits for all),
        so reads a rank finished before it are never torn.
        """
        gids = as_ids(gids)
        if hasattr(values, "detach"):
            values = values.detach().cpu().numpy()
        values = np.ascontiguousarray(np.broadcast_to(np.asarray(values, dtype=self.dtype),
                                                      (gids.shape[0], *self.shape[1:])))
        if gids.shape[0]:
            self.book.check(gids, f"DistTensor '{self.name}': row")
        lids, rows = exchange_by_owner(self.comm, self.book.owner(gids), gids, values)
        lids = lids - self.local_range[0]
        # the last occurrence of each row wins (numpy leaves repeated fancy-index stores unordered)
        last = lids.shape[0] - 1 - np.unique(lids[::-1], return_index=True)[1]
        self.window.local[lids[last]] = rows[last]
        sync_windows(self.comm, [self.window])

    def barrier(self):
        """Collective over comm. Complete every rank's writes and make them visible to all."""
        self.window.sync()

    def close(self):
        """Collective over comm. Free the window (the tensor can no longer be used)."""
        self.window.close()


    def __repr__(self):
        return f"DistTensor(name={self.name!r}, shape={self.shape}, dtype={self.dtype}, parts={self.book.num_parts})"


def _torch_to_numpy(dtype):
    if dtype is None:
        return np.float32
    if isinstance(dtype, torch.dtype):
        return torch.empty(0, dtype=dtype).numpy().dtype
    return dtype


def float_rows(rows, encoding=None) -> torch.Tensor:
    """Local. Gathered rows of a float field as a float32 tensor, decoding ``encoding``
    (``"bfloat16"`` bit patterns) and widening float16; float32 rows are shared, not copied."""
    if encoding == "bfloat16":
        return torch.from_numpy(np.ascontiguousarray(rows).view(np.int16)).view(torch.bfloat16).float()
    if encoding is not None:
        raise ValueError(f"unknown field encoding {encoding!r}")
    return torch.from_numpy(np.asarray(rows, dtype=np.float32))
