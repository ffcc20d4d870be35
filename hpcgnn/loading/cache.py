"""A hot remote-row cache: local copies of the rows on other nodes that batches read most.

Which rows: a first pass samples batches the way training will (a stream of its own, so the
training batches do not change) and counts how often each row owned by another node is an
input of a batch; the most read rows that fit the budget are copied once. This follows the
access-count policy of SALIENT++ and GraphLearn-for-PyTorch: rather than guessing from
in-degrees, it counts what the sampler and the partition really read (hops of any depth,
weights, which neighbours are remote at all). A degree ranking was not measured against it.

Only rows of ranks on *other* nodes are cached: rows of this node are read from shared memory
at the cost of a copy anyway. The cache is a snapshot for read-only fields (node features);
after the tensor is written, :meth:`RemoteRowCache.refresh` re-reads it.
"""
from __future__ import annotations

import numpy as np

from hpcgnn.runtime.rng import derive_seed
from hpcgnn.store.window import scatter_rows

#: presampling stops once it has seen this many remote reads per cache slot (or after one epoch)
READS_PER_SLOT = 10


class RemoteRowCache:
    """Local. Copies of rows ``gids`` (owned by other nodes) of ``tensor``.

    Parameters
    ----------
    tensor : DistTensor
        A field that does not change while the cache is used (or call :meth:`refresh`).
    gids : array of int
        Rows to hold; only those owned by ranks on other nodes are kept.

    Attributes
    ----------
    gids : ndarray
        The cached rows' global ids, sorted.
    rows : ndarray
        Their values, ``rows[i]`` of ``gids[i]``.
    """

    def __init__(self, tensor, gids):
        self.tensor = tensor
        gids = np.unique(np.asarray(gids, dtype=np.int64))
        self.gids = gids[off_node(tensor, gids)]
        self.rows = np.empty((self.gids.shape[0], *tensor.shape[1:]), dtype=tensor.dtype)
        self.refresh()

    @property
    def nbytes(self) -> int:
        return int(self.rows.nbytes)

    def __len__(self):
        return int(self.gids.shape[0])

    def refresh(self):
        """Local. Re-read every cached row from its owner (after the tensor was written)."""
        self.tensor.gather(self.gids, out=self.rows)

    def lookup(self, gids):
        """Local. ``(hit, slot)``: ``hit[i]`` when ``gids[i]`` is cached, as ``rows[slot[i]]``."""
        gids = np.asarray(gids, dtype=np.int64)
        if not len(self):
            return np.zeros(gids.shape[0], dtype=bool), np.zeros(gids.shape[0], dtype=np.int64)
        slot = np.searchsorted(self.gids, gids)
        np.minimum(slot, self.gids.shape[0] - 1, out=slot)
        return self.gids[slot] == gids, slot

    def gather(self, gids, out=None):
        """Local. Rows ``gids`` as :meth:`DistTensor.gather` returns them, cached ones from the copy.

        Returns ``(rows, remote, hits)``: the rows, how many requested rows live on other nodes
        and how many of those the cache served.
        """
        gids = np.asarray(gids, dtype=np.int64)
        tensor = self.tensor
        if out is None:
            out = np.empty((gids.shape[0], *tensor.shape[1:]), dtype=tensor.dtype)
        if gids.shape[0] == 0:
            return out, 0, 0
        tensor.book.check(gids, f"DistTensor '{tensor.name}': row")
        owners = tensor.book.owner(gids)
        remote = np.flatnonzero(tensor.window.node_slot[owners] < 0)
        hit, slot = self.lookup(gids[remote])
        served = remote[hit]
        if served.shape[0]:
            scatter_rows(self.rows, slot[hit], out, served)
        if served.shape[0] < gids.shape[0]:
            rest = np.ones(gids.shape[0], dtype=bool)
            rest[served] = False
            rest = np.flatnonzero(rest)
            tensor.window.read(owners[rest], gids[rest] - tensor.book.starts[owners[rest]], out, where=rest)
        return out, int(remote.shape[0]), int(served.shape[0])


def off_node(tensor, gids) -> np.ndarray:
    """Local. Mask of ``gids`` whose rows live on ranks of other nodes (read over the network)."""
    gids = np.asarray(gids, dtype=np.int64)
    return tensor.window.node_slot[tensor.book.owner(gids)] < 0


def hot_remote_rows(tensor, sampler, graph, plan, capacity, seed=0):
    """Local. Up to ``capacity`` global ids of rows on other nodes that batches read most.

    Samples the batches of one epoch of ``plan`` (with seeds of their own stream) until it has
    counted ``READS_PER_SLOT * capacity`` remote reads of batch inputs; ties go to the smaller id.
    """
    if capacity <= 0:
        return np.zeros(0, dtype=np.int64)
    seen, reads = [], 0
    for index, seeds in enumerate(plan.batches(epoch=0)):
        batch = sampler.sample(graph, seeds, seed=derive_seed(seed, "cache_presample", graph.comm.rank, index))
        remote = batch.input_gids[off_node(tensor, batch.input_gids)]
        seen.append(remote)
        reads += remote.shape[0]
        if reads >= READS_PER_SLOT * capacity:
            break
    if not seen:
        return np.zeros(0, dtype=np.int64)
    gids, counts = np.unique(np.concatenate(seen), return_counts=True)
    order = np.lexsort((gids, -counts))[:capacity]
    return np.sort(gids[order])
