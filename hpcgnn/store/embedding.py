"""Learnable per-node embeddings for transductive models (their optimizers: :mod:`.sparse_optim`).

A :class:`DistEmbedding` keeps its table in a :class:`~hpcgnn.store.dist_tensor.DistTensor`, so
each rank stores only the rows it owns. A lookup ``emb(gids)`` copies the rows into a fresh
leaf tensor and remembers ``(gids, tensor)``; after ``loss.backward()`` a sparse optimizer
takes the gradient rows from those tensors (:meth:`DistEmbedding.take_gradients`) and has each
row's owner update it.
"""
from __future__ import annotations

import zlib

import numpy as np
import torch

from hpcgnn.runtime.collectives import fail_together
from hpcgnn.runtime.comm import world
from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.files import atomic_path, open_regular
from hpcgnn.runtime.resources import CollectiveResource
from hpcgnn.store.dist_tensor import DistTensor, as_ids, uniform_init


def save_arrays(path, arrays):
    """Local. ``np.savez`` to ``path`` atomically (no pickles)."""
    with atomic_path(path, suffix=".npz") as tmp:
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)


def load_arrays(path, fields=()):
    """Local. The arrays of an npz file, without pickles; InputError names the file and a missing field."""
    try:
        with open_regular(path) as fh, np.load(fh, allow_pickle=False) as data:  # a FIFO would block forever
            arrays = {f: data[f] for f in data.files}
    except InputError:
        raise
    except Exception as exc:  # a collective load must fail on every rank, so report any reason alike
        raise InputError(path, f"cannot read checkpoint: {type(exc).__name__}: {exc}") from exc
    missing = [f for f in fields if f not in arrays]
    if missing:
        raise InputError(path, "missing field", field=missing[0])
    return arrays


def check_shard_layout(path, prefix, arrays, shape, local_range):
    """Local. Raise InputError unless a saved shard has the expected global shape and row range."""
    for field, want in ((prefix + "shape", shape), (prefix + "local_range", local_range)):
        got = tuple(int(x) for x in np.asarray(arrays[field]).reshape(-1))
        if got != tuple(want):
            raise InputError(path, f"expected {tuple(want)} for this rank's shard", field=field, value=got)


class DistEmbedding(CollectiveResource):
    """Collective over comm. A ``num_embeddings x embedding_dim`` float32 table sharded by ``book``.

    Parameters
    ----------
    num_embeddings, embedding_dim : int
    name : str, optional
        Used in messages, checkpoints and the default initialiser's seed.
    init : callable, optional
        ``init(gids, row_shape, dtype) -> array`` (see :func:`hpcgnn.store.dist_tensor.uniform_init`).
        Default: U(-1/sqrt(dim), 1/sqrt(dim)) seeded by ``name``; the rows depend only on
        their global id, so the table is the same for any number of ranks.
    comm : MPI communicator, optional
        Default ``MPI.COMM_WORLD``.
    book : PartitionBook, optional
        Row ownership; default: even split in rank order.

    Notes
    -----
    ``emb(gids)`` returns a tensor that requires grad and is remembered until the next
    optimizer ``step()`` or ``zero_grad()``; under ``torch.no_grad()`` nothing is remembered.
    """

    def __init__(self, num_embeddings, embedding_dim, name=None, init=None, comm=None, book=None):
        self.comm = comm if comm is not None else world()
        self.name = name or "embedding"
        self.num_embeddings = int(num_embeddings)
        self.embedding_dim = int(embedding_dim)
        if init is None:
            bound = 1.0 / np.sqrt(max(self.embedding_dim, 1))
            # crc32 rather than hash(): Python salts str hashes per process, ranks would disagree
            init = uniform_init(-bound, bound, seed=zlib.crc32(self.name.encode()))
        self.weight = DistTensor((self.num_embeddings, self.embedding_dim), np.float32, name=self.name,
                                 init=init, comm=self.comm, book=book)
        self._trace = []

    @property
    def local_range(self) -> tuple[int, int]:
        """Global ids ``[start, end)`` of this rank's shard."""
        return self.weight.local_range

    def __call__(self, gids):
        """Local. Rows ``gids`` (repeats allowed) as a float32 tensor ``[len(gids), dim]``.

        With autograd enabled the tensor requires grad and is traced for the optimizer.
        """
        gids = as_ids(gids)
        rows = torch.from_numpy(self.weight.gather(gids))
        if torch.is_grad_enabled():
            rows.requires_grad_(True)
            self._trace.append((gids, rows))
        return rows

    def take_gradients(self):
        """Local. This rank's traced ``(gids, grad rows)`` since the last step; clears the trace.

        Lookups whose output received no gradient are skipped.
        """
        traced = [(gids, rows.grad) for gids, rows in self._trace if rows.grad is not None]
        self._trace = []
        if not traced:
            return np.zeros(0, np.int64), np.zeros((0, self.embedding_dim), np.float32)
        gids = np.concatenate([g for g, _ in traced])
        grads = np.concatenate([grad.detach().numpy().astype(np.float32, copy=False) for _, grad in traced])
        return gids, grads

    def clear_trace(self):
        """Local. Forget the lookups recorded since the last step."""
        self._trace = []

    def save(self, path):
        """Local. Write this rank's shard and its layout to ``path`` (npz), atomically.

        Each rank needs its own ``path``, e.g. ``f"emb.{comm.rank}.npz"``.
        """
        save_arrays(path, {"name": np.str_(self.name), "shape": np.array(self.weight.shape, np.int64),
                          "local_range": np.array(self.local_range, np.int64), "rows": self.weight.local})

    def load(self, path):
        """Collective over comm. Replace this rank's shard with the one saved at ``path``.

        Raises
        ------
        InputError
            On every rank, if any rank's file is missing a field or was saved for a
            different shape or rank layout (its ``local_range`` differs).
        """
        error, arrays = None, None
        try:
            arrays = load_arrays(path, ("shape", "local_range", "rows"))
            check_shard_layout(path, "", arrays, self.weight.shape, self.local_range)
            if arrays["rows"].shape != self.weight.local.shape:
                raise InputError(path, f"expected shape {self.weight.local.shape}", field="rows",
                                 value=arrays["rows"].shape)
        except InputError as exc:
            error = exc
        # also a barrier: no rank is still reading the old rows when we overwrite them
        fail_together(self.comm, error, path)
        self.weight.local[...] = arrays["rows"]
        self._trace = []
        self.weight.barrier()  # other ranks may read these rows right after

    def close(self):
        """Collective over comm. Free the table (the embedding can no longer be used)."""
        self._trace = []
        self.weight.close()


    def __repr__(self):
        return f"DistEmbedding(name={self.name!r}, shape={self.weight.shape}, parts={self.weight.book.num_parts})"
