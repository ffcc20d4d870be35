"""VR-GCN's histories (Chen, Zhu & Song 2018) and the constant rows they give each block.

The input of every layer above the first has a history: a DistTensor sharded like the nodes,
holding each node's activation from the last step that computed it (zeros at the start).
Before each forward pass :meth:`ControlVariate.fill` turns them into each block's constant rows
(:mod:`hpcgnn.sampling.vr`), reading the rows of every destination's whole in-neighbourhood
through the windows; after it :meth:`ControlVariate.update` writes the activations just computed
(before dropout, whose mean they are) back, every rank at once, with a fixed outcome when two
ranks computed the same node. The input layer's rows are the features' neighbour means,
computed once at start-up.
"""
from __future__ import annotations

import warnings

import numpy as np
import torch

from hpcgnn.nn import BlockTensors
from hpcgnn.runtime.collectives import fail_together
from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.resources import CollectiveResource
from hpcgnn.runtime.watchdog import beat, waiting_in
from hpcgnn.sampling import NeighborSampler
from hpcgnn.store import DistTensor, float_rows
from hpcgnn.store.embedding import check_shard_layout, load_arrays, save_arrays

#: owned nodes per batch of the start-up pass over the features
_INPUT_MEAN_BATCH = 4096


def _input_means(graph, feature="feat", batch_size=_INPUT_MEAN_BATCH) -> DistTensor:
    """Collective over graph.comm. The mean of every node's in-neighbours' ``feature`` rows (0 for
    no in-neighbours), as a DistTensor sharded like the nodes."""
    feat = graph.ndata[feature]
    sampler = NeighborSampler([-1])
    local_ids = graph.local_node_ids()

    def fill(out):
        for lo in range(0, local_ids.shape[0], batch_size):
            beat(f"neighbour means of the features, batch {lo // batch_size + 1}")
            batch = sampler.sample(graph, local_ids[lo:lo + batch_size])
            rows = float_rows(feat.gather(batch.input_gids), feat.encoding)
            out[lo:lo + batch.seed_gids.shape[0]] = BlockTensors(batch.blocks[0]).mean_neighbours(rows).numpy()

    waiting_in("the start-up pass over the features (VR-GCN's neighbour means)")
    return DistTensor((graph.num_nodes, feat.shape[1]), np.float32, "vr_input_mean", comm=graph.comm,
                      book=graph.book, local_data=fill)


def _history_rows(history, offsets, full_src, sampled_src, sampled_weight, counts) -> torch.Tensor:
    """Local. ``c_v = mean over v's in-neighbours of hbar - sum over v's sampled ones of w hbar``, for
    every destination ``v`` (``offsets``/``full_src``: whole in-neighbour lists; ``sampled_src``,
    ``sampled_weight`` grouped by destination with ``counts``)."""
    num_dst = offsets.shape[0] - 1
    degree = np.diff(offsets)
    columns, position = np.unique(np.concatenate([full_src, sampled_src]), return_inverse=True)
    rows = torch.from_numpy(history.gather(columns))
    dst = np.concatenate([np.repeat(np.arange(num_dst), degree), np.repeat(np.arange(num_dst), counts)])
    value = np.concatenate([np.repeat(1.0 / np.maximum(degree, 1), degree), -np.asarray(sampled_weight)])
    order = np.argsort(dst, kind="stable")
    indptr = np.zeros(num_dst + 1, dtype=np.int64)
    np.cumsum(degree + counts, out=indptr[1:])
    with warnings.catch_warnings():  # torch flags sparse CSR as beta on every construction
        warnings.simplefilter("ignore", UserWarning)
        matrix = torch.sparse_csr_tensor(torch.from_numpy(indptr), torch.from_numpy(position[order]),
                                         torch.from_numpy(value[order].astype(np.float32)),
                                         size=(num_dst, columns.shape[0]))
    return matrix @ rows


class ControlVariate(CollectiveResource):
    """Collective over graph.comm. The histories of ``model``'s hidden layers and the features'
    neighbour means, for :class:`~hpcgnn.sampling.vr.ControlVariateSampler`'s batches.

    Parameters
    ----------
    graph : DistGraph
    model : LayerStack
        Its layers' ``in_features`` size the histories; :meth:`fill` and :meth:`update` use the
        activations it records (``record_hidden``, switched on here).
    """

    def __init__(self, graph, model, feature="feat"):
        self.comm = graph.comm
        self.input_mean = _input_means(graph, feature)
        self.histories = [DistTensor((graph.num_nodes, layer.fc_neigh.in_features), np.float32, f"vr_history{i}",
                                     comm=graph.comm, book=graph.book) for i, layer in enumerate(model.layers)
                          if i > 0]
        model.record_hidden = True

    def fill(self, batch):
        """Local. Set every block's ``extra_rows``: the input block's from the feature means, the
        others' from the histories (as they are now: call after the previous :meth:`update`)."""
        blocks = batch.blocks
        blocks[0].extra_rows = torch.from_numpy(self.input_mean.gather(batch.extra["vr_nodes"][0]))
        for i in range(1, len(blocks)):
            (offsets, full_src), (counts, sampled_src) = batch.extra["vr_full"][i], batch.extra["vr_sampled"][i]
            weight = np.repeat(1.0 / np.maximum(counts, 1), counts)
            blocks[i].extra_rows = _history_rows(self.histories[i - 1], offsets, full_src, sampled_src, weight, counts)

    def update(self, batch, hidden):
        """Collective over comm. Write ``hidden[l]`` (layer ``l``'s activations, before dropout) as
        the history of layer ``l + 1``'s live sources; every rank's writes are visible on return."""
        for i, history in enumerate(self.histories):
            waiting_in(f"the VR-GCN history write of layer {i + 2}")
            history.assign(batch.extra["vr_nodes"][i + 1], hidden[i])

    def save(self, path):
        """Local. This rank's history shards, atomically (npz; one ``path`` per rank)."""
        arrays = {f"history{i}": h.local for i, h in enumerate(self.histories)}
        arrays.update({f"history{i}_shape": np.array(h.shape, np.int64) for i, h in enumerate(self.histories)})
        arrays.update({f"history{i}_local_range": np.array(h.local_range, np.int64)
                       for i, h in enumerate(self.histories)})
        save_arrays(path, arrays)

    def load(self, path):
        """Collective over comm. Replace this rank's history shards with those saved at ``path``;
        InputError on every rank if any rank's file is missing or does not fit."""
        error, arrays = None, None
        names = [f"history{i}" for i in range(len(self.histories))]
        try:
            arrays = load_arrays(path, [n + suffix for n in names for suffix in ("", "_shape", "_local_range")])
            for name, history in zip(names, self.histories):
                check_shard_layout(path, name + "_", arrays, history.shape, history.local_range)
        except InputError as exc:
            error = exc
        fail_together(self.comm, error, path)
        for name, history in zip(names, self.histories):
            history.local[...] = arrays[name]
            history.barrier()

    def close(self):
        """Collective over comm. Free the windows."""
        for history in self.histories:
            history.close()
        self.input_mean.close()
