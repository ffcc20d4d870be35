"""Distributed layer-wise inference over all nodes with full neighbourhoods, split metrics and
saved embeddings.

Layer l's output for every node is a DistTensor: each rank computes the rows of the nodes
it owns, in batches, reading layer l-1's rows of their in-neighbours (local or remote) through
the windows. Only a barrier separates layers, so ranks with more nodes never block others
mid-layer. Accuracy is then reduced over ranks: the exact full-graph result, not a sampled
estimate.
"""
from __future__ import annotations

import h5py
import numpy as np
import torch
from torch.nn import functional as F

from hpcgnn.nn import BlockTensors
from hpcgnn.prep.graph import MASKS
from hpcgnn.runtime.comm import mpi
from hpcgnn.runtime.files import atomic_path
from hpcgnn.runtime.watchdog import beat, waiting_in
from hpcgnn.sampling import NeighborSampler
from hpcgnn.store import DistTensor


def model_inputs(feat, embedding, input_gids):
    """Local. The first layer's input rows: features, then the learnable embedding if any."""
    if embedding is None:
        return feat
    rows = embedding(input_gids)
    return rows if feat is None else torch.cat([feat, rows], dim=1)


def input_rows(graph, embedding=None, feature="feat"):
    """Local. ``gids -> first-layer input rows``: the ``feature`` field (if the graph has it) and
    the learnable node embedding (if any), as one float32 tensor."""
    table = graph.ndata.get(feature)

    def rows(gids):
        x = torch.from_numpy(table.gather(gids)).to(torch.float32) if table is not None else None
        return model_inputs(x, embedding, gids)

    return rows


@torch.no_grad()
def layerwise_inference(model, graph, batch_size=10_000, inputs=None, needs_degrees=None):
    """Collective over graph.comm. Every owned node's output of ``model`` (full neighbourhoods).

    Parameters
    ----------
    model : LayerStack
        Anything with ``layers`` and ``layer_forward(i, block, x)``.
    graph : DistGraph
    batch_size : int
        Owned nodes per inference batch.
    inputs : callable, optional
        ``inputs(gids) -> tensor``: the first layer's input rows; default :func:`input_rows`
        (the ``feat`` field).
    needs_degrees : bool, optional
        Give the first layer its input nodes' in-degrees; default: the model's ``needs_degrees``.

    Returns
    -------
    torch.Tensor
        This rank's rows of the last layer, ``[num_local_nodes, out_dim]``.
    """
    was_training = model.training
    model.eval()
    if needs_degrees is None:
        needs_degrees = getattr(model, "needs_degrees", False)
    sampler = NeighborSampler([-1], input_degrees=needs_degrees)
    inputs = inputs or input_rows(graph)
    local_ids = graph.local_node_ids()
    h = None
    for i in range(len(model.layers)):
        out = DistTensor((graph.num_nodes, model.layers[i].out_features), np.float32, f"layer{i}",
                         comm=graph.comm, book=graph.book)
        for lo in range(0, local_ids.shape[0], batch_size):
            beat(f"inference layer {i + 1} batch {lo // batch_size + 1}")
            chunk = local_ids[lo:lo + batch_size]
            batch = sampler.sample(graph, chunk)
            block = BlockTensors(batch.blocks[0], batch.input_degree)
            x = inputs(batch.input_gids) if i == 0 else torch.from_numpy(h.gather(batch.input_gids))
            out.local[lo:lo + chunk.shape[0]] = model.layer_forward(i, block, x).numpy()
        waiting_in(f"the barrier after inference layer {i + 1}")
        out.barrier()
        if h is not None:
            h.close()
        h = out
    logits = torch.from_numpy(h.local.copy())
    h.close()
    model.train(was_training)
    return logits


def split_accuracy(logits, graph, label="label") -> dict:
    """Collective over graph.comm. Accuracy and mean cross-entropy on every split mask present,
    over all ranks (``{split}_acc`` and ``{split}_loss``; None for a missing or empty split)."""
    MPI = mpi()
    predicted = logits.argmax(dim=1).numpy()
    labels = graph.ndata[label].local
    counts, losses = [], []
    for mask in MASKS:
        if mask not in graph.ndata:
            counts += [0, 0]
            losses.append(0.0)
            continue
        selected = graph.ndata[mask].local.astype(bool)
        counts += [int((predicted[selected] == labels[selected]).sum()), int(selected.sum())]
        rows = torch.from_numpy(np.flatnonzero(selected))  # only these rows: the logits may be huge
        targets = torch.from_numpy(labels[selected].astype(np.int64))
        losses.append(float(F.cross_entropy(logits[rows].double(), targets, reduction="sum")) if rows.numel() else 0.0)
    totals = np.array(counts, dtype=np.int64)
    graph.comm.Allreduce(MPI.IN_PLACE, totals, op=MPI.SUM)
    loss_totals = np.array(losses, dtype=np.float64)
    graph.comm.Allreduce(MPI.IN_PLACE, loss_totals, op=MPI.SUM)
    result = {}
    for i, mask in enumerate(MASKS):
        seen = totals[2 * i + 1]
        result[mask.replace("_mask", "_acc")] = float(totals[2 * i] / seen) if seen else None
        result[mask.replace("_mask", "_loss")] = float(loss_totals[i] / seen) if seen else None
    return result


def save_embeddings(logits, graph, path):
    """Local. This rank's output rows keyed by original node id, to an HDF5 file (atomic)."""
    with atomic_path(path, suffix=".h5") as tmp:
        with h5py.File(tmp, "w") as h5:
            h5.create_dataset("orig_id", data=graph.orig_id)
            h5.create_dataset("gid", data=graph.local_node_ids())
            h5.create_dataset("embedding", data=logits.numpy())
