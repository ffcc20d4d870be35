"""Sparse optimizers for :class:`~hpcgnn.store.embedding.DistEmbedding`: lazy Adagrad and Adam.

After ``loss.backward()``, :meth:`step` takes each embedding's traced gradient rows, sends every
row to the rank that owns it (:func:`~hpcgnn.runtime.collectives.exchange_by_owner`), and each
owner updates its own rows and the optimizer state stored beside them. Only rows looked up
somewhere since the last step are touched.

Every rank must call ``step()`` the same number of times, even with nothing looked up: the
step is a collective over the embedding's communicator.
"""
from __future__ import annotations

import numpy as np

from hpcgnn.runtime.collectives import exchange_by_owner
from hpcgnn.runtime.errors import InputError
from hpcgnn.store.embedding import DistEmbedding, check_shard_layout, load_arrays, save_arrays


def _sum_duplicates(lids, grads):
    """Unique local ids (sorted) and the sum of their gradient rows."""
    if lids.shape[0] == 0:
        return lids, grads
    order = np.argsort(lids, kind="stable")
    lids, grads = lids[order], grads[order]
    starts = np.flatnonzero(np.concatenate([[True], lids[1:] != lids[:-1]]))
    if starts.shape[0] == lids.shape[0]:  # no id twice: the sum is the rows themselves (a copy's time saved)
        return lids, grads
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
            recv_gids, recv_grads = exchange_by_owner(emb.comm, emb.weight.book.owner(gids), gids, grads)
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
            check_shard_layout(source, f"{i}.", state_dict, emb.weight.shape, emb.local_range)
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
        save_arrays(path, self.state_dict())

    def load(self, path):
        """Local. Restore the state written by :meth:`save` (raises InputError naming ``path``)."""
        self.load_state_dict(load_arrays(path), source=path)


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
