"""Distributed layer-wise inference over all nodes with full neighbourhoods, and split metrics
(:mod:`hpcgnn.training.outputs` saves what it computes).

Layer l's output for every node is a DistTensor: each rank computes the rows of the nodes
it owns, in batches, reading layer l-1's rows of their in-neighbours (local or remote) through
the windows. Only a barrier separates layers, so ranks with more nodes never block others
mid-layer. Accuracy, loss and the ``--metric`` of every split are then reduced over ranks
(:mod:`hpcgnn.tasks.metrics`): the exact full-graph result, not a sampled estimate.
"""
from __future__ import annotations

import numpy as np
import torch

from hpcgnn.format.fields import MASKS
from hpcgnn.loading.device_stage import to_device
from hpcgnn.loading.typed_rows import TypedRows, typed_rows
from hpcgnn.nn import BlockTensors, as_block_tensors
from hpcgnn.nn.models import model_device
from hpcgnn.runtime.rng import derive_seed
from hpcgnn.runtime.watchdog import beat, waiting_in
from hpcgnn.sampling import NeighborSampler
from hpcgnn.sampling.registry import sampler_spec
from hpcgnn.store import DistTensor, float_rows
from hpcgnn.tasks.metrics import split_metrics, task_of


def model_inputs(feat, embedding, input_gids, device=None):
    """Local. The first layer's input rows: features, then the learnable embedding if any. On a
    typed graph (``feat`` a :class:`~hpcgnn.loading.typed_rows.TypedRows`) the embedding gives the
    rows of the types without features.

    The embedding's rows are read on the CPU (its shards are host memory) and moved to
    ``device`` (default: where ``feat`` is, else the CPU) inside autograd, so their gradients
    come back to the CPU rows the embedding's sparse optimizer reads."""
    if embedding is None:
        return feat
    if isinstance(feat, TypedRows):
        for t, at in feat.positions.items():
            if t not in feat.rows:
                feat.rows[t] = embedding(input_gids[at.cpu().numpy()]).to(at.device)
        return feat
    rows = embedding(input_gids)
    device = device if device is not None else (feat.device if feat is not None else rows.device)
    rows = rows.to(device)
    return rows if feat is None else torch.cat([feat, rows], dim=1)


def input_rows(graph, embedding=None, feature="feat"):
    """Local. ``gids -> first-layer input rows``: the ``feature`` field (if the graph has it) and
    the learnable node embedding (if any), as one float32 tensor."""
    table = graph.ndata.get(feature)
    if graph.is_typed:
        return lambda gids: model_inputs(typed_rows(graph, gids, feature), embedding, np.asarray(gids))

    def rows(gids):
        x = float_rows(table.gather(gids), table.encoding) if table is not None else None
        return model_inputs(x, embedding, gids)

    return rows


def inference_sampler(config):
    """Local. The one-layer sampler inference aggregates over, for a model trained with the
    :class:`~hpcgnn.training.config.TrainConfig` ``config``: None (every in-neighbour) unless the
    run's sampler evaluates on neighbourhoods of its own kind (PinSAGE's random walks)."""
    spec = sampler_spec(config.sampler.name)
    return None if spec.inference is None else spec.inference(config.sampler.options, config.seed)


@torch.no_grad()
def layerwise_inference(model, graph, batch_size=10_000, inputs=None, needs_degrees=None, on_layer=None, keep=False,
                        sampler=None):
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
    on_layer : callable, optional
        ``on_layer(i, rows)`` once layer ``i`` (0-based) is done on every rank, with this rank's
        rows of its output (after the activation the next layer receives): a view, valid only
        during the call (copy what is kept). For progress lines and hidden representations.
    keep : bool
        Return the last layer's DistTensor itself (every rank's rows readable by global id, as
        link prediction needs; the caller closes it) instead of a copy of this rank's rows.
    sampler : Sampler, optional
        A one-layer sampler of each node's neighbourhood (:func:`inference_sampler`); default:
        every in-neighbour.

    Returns
    -------
    torch.Tensor or DistTensor
        This rank's rows of the last layer, ``[num_local_nodes, out_dim]`` (``keep``: the
        DistTensor of all rows).
    """
    was_training = model.training
    model.eval()
    device = model_device(model)  # a GPU model reads its blocks and rows on the GPU
    if needs_degrees is None:
        needs_degrees = getattr(model, "needs_degrees", False)
    sampler = sampler or NeighborSampler([-1], input_degrees=needs_degrees)
    inputs = inputs or input_rows(graph)
    local_ids = graph.local_node_ids()
    h = None
    for i in range(len(model.layers)):
        out = DistTensor((graph.num_nodes, model.layers[i].out_features), np.float32, f"layer{i}",
                         comm=graph.comm, book=graph.book)
        read = inputs if i == 0 else (lambda gids, rows=h: torch.from_numpy(rows.gather(gids)))
        _layer_rows(model, i, graph, sampler, read, local_ids, batch_size, out.local, device)
        waiting_in(f"the barrier after inference layer {i + 1}")
        out.barrier()
        if on_layer is not None:
            on_layer(i, out.local)
        if h is not None:
            h.close()
        h = out
    model.train(was_training)
    if keep:
        return h
    logits = torch.from_numpy(h.local.copy())
    h.close()
    return logits


def _layer_rows(model, i, graph, sampler, read, local_ids, batch_size, out, device):
    """Layer ``i``'s rows of ``local_ids`` into ``out``, a batch at a time; ``read(gids)`` gives
    the layer's input rows (on the CPU: sampling and rows stay there, a GPU model gets copies)."""
    for lo in range(0, local_ids.shape[0], batch_size):
        beat(f"inference layer {i + 1} batch {lo // batch_size + 1}")
        chunk = local_ids[lo:lo + batch_size]
        batch = sampler.sample(graph, chunk, seed=derive_seed(getattr(sampler, "seed", 0), "layer", i))
        if device.type == "cpu":
            block = BlockTensors(batch.blocks[0], batch.input_degree)
        else:
            block = as_block_tensors(batch.blocks[:1], batch.input_degree, device=device)[0]
        rows = model.layer_forward(i, block, to_device(read(batch.input_gids), device))
        out[lo:lo + chunk.shape[0]] = rows.cpu().numpy()


def split_accuracy(logits, graph, label="label", metric="acc") -> dict:
    """Collective over graph.comm. Accuracy, mean loss and ``metric`` on every split mask present,
    over all ranks: ``{split}_acc``, ``{split}_loss`` and, for a metric other than acc,
    ``{split}_{metric}`` with ``_`` for ``-`` (``val_roc_auc``); None for a missing or empty split.
    The task (multi-class, binary, multi-label) follows from the label's shape and the output
    width; see :mod:`hpcgnn.tasks.metrics` for each metric's definition."""
    labels = graph.ndata[label]
    task = task_of(labels.shape, logits.shape[1])
    scores = logits.numpy()
    result = {}
    for mask in MASKS:
        # only the split's rows are copied: the logits may be huge
        selected = graph.ndata[mask].local.astype(bool) if mask in graph.ndata else np.zeros(len(scores), bool)
        values = split_metrics(scores[selected], labels.local[selected], task, metric, graph.comm)
        result.update({f"{mask.replace('_mask', '')}_{key}": value for key, value in values.items()})
    return result
