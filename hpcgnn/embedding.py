"""Learnable per-node embeddings for transductive models, with sparse optimizers.

A :class:`DistEmbedding` keeps its table in a :class:`~hpcgnn.dist_tensor.DistTensor`, so
each rank stores only the rows it owns. A lookup ``emb(gids)`` copies the rows into a fresh
leaf tensor and remembers ``(gids, tensor)``; after ``loss.backward()`` the optimizers below
read the gradient rows from those tensors, send each row to the rank that owns it (one
``Alltoallv`` for ids, one for rows), and every owner updates its own rows and the optimizer
state stored beside them. Only rows looked up somewhere since the last step are touched.

Every rank must call ``step()`` the same number of times, even with nothing looked up: the
step is a collective over the embedding's communicator.
"""
from __future__ import annotations

import zlib

import numpy as np

from hpcgnn.atomic import atomic_path
from hpcgnn.comm import mpi, world
from hpcgnn.dist_tensor import DistTensor, as_ids, uniform_init
from hpcgnn.errors import InputError


def _write_npz(path, arrays):
    with atomic_path(path, suffix=".npz") as tmp:
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)


def _read_npz(path, fields=()):
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {f: data[f] for f in data.files}
    except Exception as exc:  # a collective load must fail on every rank, so report any reason alike
        raise InputError(path, f"cannot read checkpoint: {type(exc).__name__}: {exc}") from exc
    missing = [f for f in fields if f not in arrays]
    if missing:
        raise InputError(path, "missing field", field=missing[0])
    return arrays


def _check_layout(path, prefix, arrays, shape, local_range):
    """Raise InputError unless a saved shard has the expected global shape and row range."""
    for field, want in ((prefix + "shape", shape), (prefix + "local_range", local_range)):
        got = tuple(int(x) for x in np.asarray(arrays[field]).reshape(-1))
        if got != tuple(want):
            raise InputError(path, f"expected {tuple(want)} for this rank's shard", field=field, value=got)


class DistEmbedding:
    """Collective over comm. A ``num_embeddings x embedding_dim`` float32 table sharded by ``book``.

    Parameters
    ----------
    num_embeddings, embedding_dim : int
    name : str, optional
        Used in messages, checkpoints and the default initialiser's seed.
    init : callable, optional
        ``init(gids, row_shape, dtype) -> array`` (see :func:`hpcgnn.dist_tensor.uniform_init`).
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
        import torch

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
        _write_npz(path, {"name": np.str_(self.name), "shape": np.array(self.weight.shape, np.int64),
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
            arrays = _read_npz(path, ("shape", "local_range", "rows"))
            _check_layout(path, "", arrays, self.weight.shape, self.local_range)
            if arrays["rows"].shape != self.weight.local.shape:
                raise InputError(path, f"expected shape {self.weight.local.shape}", field="rows",
                                 value=arrays["rows"].shape)
        except InputError as exc:
            error = exc
        # also a barrier: no rank is still reading the old rows when we overwrite them
        _raise_if_any_failed(self.comm, error, path)
        self.weight.local[...] = arrays["rows"]
        self._trace = []
        self.weight.barrier()  # other ranks may read these rows right after

    def close(self):
        """Collective over comm. Free the table (the embedding can no longer be used)."""
        self._trace = []
        self.weight.close()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:  # after an exception the ranks may be out of step: no collective
            self.close()

    def __repr__(self):
        return f"DistEmbedding(name={self.name!r}, shape={self.weight.shape}, parts={self.weight.book.num_parts})"


def _raise_if_any_failed(comm, error, path):
    """Raise on every rank when any rank failed, so none is left waiting in a later collective."""
    messages = comm.allgather(None if error is None else str(error))
    if error is not None:
        raise error
    failed = [(r, m) for r, m in enumerate(messages) if m is not None]
    if failed:
        rank, message = failed[0]
        raise InputError(path, f"not loaded because rank {rank} failed: {message}")


def _exchange_to_owners(emb, gids, grads):
    """Collective over emb.comm. Send each gradient row to its owner; return what this rank owns."""
    MPI = mpi()
    comm, dim = emb.comm, emb.embedding_dim
    owners = emb.weight.book.owner(gids)
    order = np.argsort(owners, kind="stable")
    gids, grads = np.ascontiguousarray(gids[order]), np.ascontiguousarray(grads[order])
    send_counts = np.bincount(owners, minlength=comm.size).astype(np.int64)
    recv_counts = np.empty_like(send_counts)
    comm.Alltoall(send_counts, recv_counts)
    send_displs = np.concatenate([[0], np.cumsum(send_counts)[:-1]])
    recv_displs = np.concatenate([[0], np.cumsum(recv_counts)[:-1]])
    total = int(recv_counts.sum())
    recv_gids = np.empty(total, np.int64)
    recv_grads = np.empty((total, dim), np.float32)
    counts = [send_counts.tolist(), send_displs.tolist(), recv_counts.tolist(), recv_displs.tolist()]
    comm.Alltoallv([gids, (counts[0], counts[1]), MPI.INT64_T], [recv_gids, (counts[2], counts[3]), MPI.INT64_T])
    # counts in rows, not floats, so a large exchange does not overflow MPI's int counts
    rowtype = MPI.FLOAT.Create_contiguous(dim).Commit()
    try:
        comm.Alltoallv([grads, (counts[0], counts[1]), rowtype], [recv_grads, (counts[2], counts[3]), rowtype])
    finally:
        rowtype.Free()
    return recv_gids, recv_grads


def _sum_duplicates(lids, grads):
    """Unique local ids (sorted) and the sum of their gradient rows."""
    if lids.shape[0] == 0:
        return lids, grads
    order = np.argsort(lids, kind="stable")
    lids, grads = lids[order], grads[order]
    starts = np.flatnonzero(np.concatenate([[True], lids[1:] != lids[:-1]]))
    return lids[starts], np.add.reduceat(grads, starts, axis=0)


class _SparseOptimizer:
    """Shared machinery: trace collection, the exchange, and per-shard state checkpoints."""

    state_fields: tuple[str, ...] = ()
    hyper_fields: tuple[str, ...] = ()

    def __init__(self, params):
        self.params = list(params)
        if not all(isinstance(p, DistEmbedding) for p in self.params):
            raise TypeError("sparse optimizers take a list of DistEmbedding")
        self.state = [self._new_state(p) for p in self.params]

    def zero_grad(self):
        """Local. Forget every lookup recorded since the last step."""
        for emb in self.params:
            emb.clear_trace()

    def step(self):
        """Collective over comm. Apply the gradients of every rank's traced lookups, then clear the traces.

        Every rank must call it the same number of times, even if it looked nothing up.
        Updated rows are visible to every rank when it returns.
        """
        for emb, state in zip(self.params, self.state):
            gids, grads = emb.take_gradients()
            recv_gids, recv_grads = _exchange_to_owners(emb, gids, grads)
            # Every rank has entered this step before the exchange completes anywhere, so no
            # rank is still reading the rows we are about to overwrite.
            lids, grad_sums = _sum_duplicates(recv_gids - emb.local_range[0], recv_grads)
            if lids.shape[0]:
                self._update(emb.weight.local, state, lids, grad_sums)
            emb.weight.barrier()

    def _new_state(self, emb):
        raise NotImplementedError

    def _update(self, weight, state, lids, grads):
        raise NotImplementedError

    def state_dict(self) -> dict:
        """Local. This rank's optimizer state as a flat dict of numpy arrays (copies)."""
        out = {"optimizer": np.str_(type(self).__name__)}
        out.update({k: np.asarray(getattr(self, k), np.float64) for k in self.hyper_fields})
        for i, (emb, state) in enumerate(zip(self.params, self.state)):
            out[f"{i}.shape"] = np.array(emb.weight.shape, np.int64)
            out[f"{i}.local_range"] = np.array(emb.local_range, np.int64)
            out.update({f"{i}.{k}": state[k].copy() for k in self.state_fields})
        return out

    def load_state_dict(self, state_dict, source=None):
        """Local. Restore state (and hyperparameters) saved by :meth:`state_dict` on this rank.

        Raises
        ------
        InputError
            If it belongs to another optimizer type or another shape / rank layout;
            ``source`` names the file in the message.
        """
        kind = str(state_dict.get("optimizer", "missing"))
        if kind != type(self).__name__:
            raise InputError(source, f"not the state of a {type(self).__name__}", field="optimizer", value=kind)
        fields = list(self.hyper_fields)
        for i in range(len(self.params)):
            fields += [f"{i}.{k}" for k in ("shape", "local_range", *self.state_fields)]
        missing = [f for f in fields if f not in state_dict]
        if missing:
            raise InputError(source, "missing field", field=missing[0])
        saved = {int(k.split(".")[0]) for k in state_dict if k.split(".")[0].isdigit()}
        if saved != set(range(len(self.params))):
            raise InputError(source, f"expected state for {len(self.params)} embeddings", value=len(saved))
        for i, (emb, state) in enumerate(zip(self.params, self.state)):
            _check_layout(source, f"{i}.", state_dict, emb.weight.shape, emb.local_range)
            for k in self.state_fields:
                value = np.asarray(state_dict[f"{i}.{k}"])
                if value.shape != state[k].shape:
                    raise InputError(source, f"expected shape {state[k].shape}", field=f"{i}.{k}", value=value.shape)
        for i, state in enumerate(self.state):
            for k in self.state_fields:
                state[k][...] = state_dict[f"{i}.{k}"]
        for k in self.hyper_fields:
            setattr(self, k, _hyper_value(state_dict[k]))

    def save(self, path):
        """Local. Write :meth:`state_dict` to ``path`` (npz), atomically; one path per rank."""
        _write_npz(path, self.state_dict())

    def load(self, path):
        """Local. Restore the state written by :meth:`save` (raises InputError naming ``path``)."""
        self.load_state_dict(_read_npz(path), source=path)


def _hyper_value(array):
    array = np.asarray(array, np.float64)
    return float(array) if array.ndim == 0 else tuple(float(x) for x in array)


class SparseAdagrad(_SparseOptimizer):
    """Local. Adagrad on the rows looked up since the last step, as ``torch.optim.Adagrad``.

    ``sum += g * g; w -= lr * g / (sqrt(sum) + eps)`` per touched row, with ``g`` the sum of
    the gradients of that row over all lookups on all ranks. Untouched rows are unchanged,
    as in dense Adagrad.

    Parameters
    ----------
    params : list of DistEmbedding
    lr : float
    eps : float
    """

    state_fields = ("sum",)
    hyper_fields = ("lr", "eps")

    def __init__(self, params, lr, eps=1e-10):
        self.lr, self.eps = float(lr), float(eps)
        super().__init__(params)

    def _new_state(self, emb):
        return {"sum": np.zeros_like(emb.weight.local)}

    def _update(self, weight, state, lids, grads):
        acc = state["sum"][lids] + grads * grads
        state["sum"][lids] = acc
        weight[lids] = weight[lids] - self.lr * (grads / (np.sqrt(acc) + self.eps))


class SparseAdam(_SparseOptimizer):
    """Local. Lazy Adam: ``torch.optim.Adam`` applied only to the rows looked up since the last step.

    Each row keeps its own moments and step count, so a row left out of a step keeps its
    state untouched (dense Adam would decay its moments and still move it). For rows looked
    up in every step the result equals ``torch.optim.Adam`` (no weight decay, amsgrad off).

    Parameters
    ----------
    params : list of DistEmbedding
    lr : float
    betas : (float, float)
    eps : float
    """

    state_fields = ("exp_avg", "exp_avg_sq", "step")
    hyper_fields = ("lr", "betas", "eps")

    def __init__(self, params, lr, betas=(0.9, 0.999), eps=1e-8):
        self.lr, self.eps = float(lr), float(eps)
        self.betas = (float(betas[0]), float(betas[1]))
        super().__init__(params)

    def _new_state(self, emb):
        local = emb.weight.local
        return {"exp_avg": np.zeros_like(local), "exp_avg_sq": np.zeros_like(local),
                "step": np.zeros(local.shape[0], np.int64)}

    def _update(self, weight, state, lids, grads):
        beta1, beta2 = self.betas
        steps = state["step"][lids] + 1
        state["step"][lids] = steps
        exp_avg = state["exp_avg"][lids]
        exp_avg += (1.0 - beta1) * (grads - exp_avg)  # torch's lerp form
        exp_avg_sq = state["exp_avg_sq"][lids] * beta2 + (1.0 - beta2) * (grads * grads)
        state["exp_avg"][lids] = exp_avg
        state["exp_avg_sq"][lids] = exp_avg_sq
        # bias corrections in float64 per row (torch computes them as Python floats)
        step_size = (self.lr / (1.0 - beta1 ** steps)).astype(np.float32)[:, None]
        bias2_sqrt = np.sqrt(1.0 - beta2 ** steps).astype(np.float32)[:, None]
        denom = np.sqrt(exp_avg_sq) / bias2_sqrt + self.eps
        weight[lids] = weight[lids] - step_size * (exp_avg / denom)
