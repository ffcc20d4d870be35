"""Evaluate a checkpoint: rebuild its model from the config it carries, run full-neighbourhood
inference, report accuracy, loss and the metric (``--metric``) on every split and optionally save
each rank's output rows."""
from __future__ import annotations

import os

import numpy as np
import torch

from hpcgnn.graph import DistGraph
from hpcgnn.graph.feature_scale import scale_features
from hpcgnn.nn import build_model, set_precision
from hpcgnn.nn.link import build_link_model
from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.stages import StageLog
from hpcgnn.store import DistEmbedding
from hpcgnn.training.checkpoint import (
    DATASET_KEYS,
    check_fits,
    check_node_state,
    chosen_checkpoint,
    dataset_identity,
    load_checkpoint,
    rank_shard_path,
)
from hpcgnn.training.early_stop import selection_key
from hpcgnn.training.inference import inference_sampler, input_rows, layerwise_inference, split_accuracy
from hpcgnn.training.link_task import TASK as LINK
from hpcgnn.training.link_task import evaluate_links, link_dataset_sizes, require_edge_sets
from hpcgnn.training.metrics import choose_metric, metric_key, task_of
from hpcgnn.training.outputs import InferenceOutputs
from hpcgnn.training.session import EMBEDDING_NAME, dataset_sizes


def model_from_checkpoint(state, graph) -> torch.nn.Module:
    """Local. The checkpoint's model with its trained parameters.

    Checkpoints older than the model registry lack ``in_dim``: it is then the feature width
    plus the embedding width, as the trainer built it.
    """
    config = state["config"]
    in_dim = config.get("in_dim")
    if in_dim is None:
        in_dim = (graph.ndata["feat"].shape[1] if "feat" in graph.ndata else 0) + config.get("embed_dim", 0)
    if config.get("task") == LINK:
        model = build_link_model(config, in_dim)
    else:
        model = build_model(config, in_dim, config["num_classes"])
    model.load_state_dict(state["model"])
    return model


def scored_as(which, config) -> str:
    """Local. Why this checkpoint is scored, in words; for ``best``, by which validation value
    the run selected it."""
    if not which.startswith("best"):
        return which
    key = selection_key(config.get("select"), metric_key(config.get("metric") or "acc"))
    return f"{which}, by {key}"


def link_checkpoint_metrics(model, graph, batch_size, inputs, outputs, sampler=None):
    """Collective over graph.comm. A link model's metrics on the validation and test edges, and this
    rank's rows of its last layer (the node embeddings) when ``outputs`` saves them."""
    last = {}

    def on_layer(i, rows):
        outputs.on_layer(i, rows)
        if outputs.directory and i == len(model.layers) - 1:
            last["rows"] = rows.copy()

    metrics = evaluate_links(model, graph, batch_size, inputs=inputs, on_layer=on_layer, sampler=sampler)
    return metrics, last.get("rows")


def require_task_inputs(graph, args, link):
    """Local. Refuse a dataset without what the checkpoint's task reads (edge sets for link
    prediction, labels for node classification) and flags of the other task."""
    if link:
        require_edge_sets(graph, args.data)
        if args.save_predictions:
            raise InputError(None, "applies to node classification checkpoints (this one predicts links)",
                             "--save-predictions", True)
    elif "label" not in graph.ndata:
        raise InputError(os.path.join(args.data, "meta.json"), "dataset has no node labels, and the checkpoint "
                         "classifies nodes: evaluate it with --data set to a labelled dataset (the one it was "
                         "trained on)", "node_fields", "label")


def evaluate_checkpoint(args, comm) -> dict:
    """Collective over comm. Accuracy, loss and the metric (``args.metric``, else the checkpoint's,
    else the task's default) of ``args.checkpoint`` on every split of ``args.data``.

    A checkpoint directory is scored by its ``best`` checkpoint (the model the training run
    selected and reported), or by its ``latest`` with ``args.latest``
    (:func:`~hpcgnn.training.checkpoint.chosen_checkpoint`); rank 0 prints which file and epoch.
    A checkpoint made for another dataset (node count, feature width, class count, task), or
    whose node embedding was trained on another numbering of the nodes, is refused on every
    rank before any inference.
    """
    if not os.path.exists(args.checkpoint):
        raise InputError(args.checkpoint, "checkpoint not found", "--checkpoint")
    path, which = chosen_checkpoint(args.checkpoint, getattr(args, "latest", False))
    state = load_checkpoint(path)  # refused before the dataset is opened if it is not plain data
    log = StageLog("evaluate", enabled=comm.rank == 0)  # a line per stage: large graphs take minutes
    if comm.rank == 0:
        print(f"evaluate: scoring {path}, epoch {state['epoch']} ({scored_as(which, state['config'])})", flush=True)
    graph = DistGraph(args.data, comm)
    scale_features(graph, state["config"].get("feature_scale", "none"), where=path)  # as its training run saw them
    log(f"load {args.data}: {graph.num_nodes:,} nodes, {graph.num_edges:,} edges, {comm.size} ranks")
    check_node_state(path, state, dataset_identity(graph, comm), "hpcgnn evaluate", warn=comm.rank == 0)
    saved = dict(state["config"])
    link = saved.get("task") == LINK
    require_task_inputs(graph, args, link)
    sizes = link_dataset_sizes(graph) if link else dataset_sizes(graph, comm)
    saved.setdefault("task", task_of((0,), saved.get("num_classes")))  # older checkpoints: single-label only
    check_fits(path, saved, sizes, DATASET_KEYS + ("task",))
    metric = choose_metric(args.metric or saved.get("metric"), sizes["task"], os.path.join(args.data, "meta.json"))
    try:
        model = model_from_checkpoint(state, graph)
    except (RuntimeError, ValueError, KeyError, TypeError) as exc:
        raise InputError(path, f"checkpoint parameters do not fit its model config ({type(exc).__name__})") from None
    if args.precision is not None:
        set_precision(model, args.precision)
    embedding = None
    if state["config"].get("embed_dim"):  # the learnable node embedding: this rank's shard beside the checkpoint
        directory = os.path.dirname(path)
        embedding = DistEmbedding(graph.num_nodes, state["config"]["embed_dim"], name=EMBEDDING_NAME, comm=comm,
                                  book=graph.book)
        embedding.load(rank_shard_path(directory, state["epoch"], comm.rank) + ".emb.npz")
    outputs = InferenceOutputs(args.save_embeddings, args.embedding_layer, args.save_predictions,
                               len(model.layers), sizes["task"], log)
    if link:
        accuracy, logits = link_checkpoint_metrics(model, graph, args.batch_size, input_rows(graph, embedding), outputs,
                                                   inference_sampler(state["config"]))
    else:
        logits = layerwise_inference(model, graph, args.batch_size, inputs=input_rows(graph, embedding),
                                     on_layer=outputs.on_layer, sampler=inference_sampler(state["config"]))
        accuracy = split_accuracy(logits, graph, metric=metric)
    log("metrics of every split")
    if outputs.save(graph, np.asarray(logits), {"checkpoint": os.path.abspath(path), "epoch": state["epoch"]}):
        log(f"save embeddings to {args.save_embeddings}")
    if embedding is not None:
        embedding.close()
    graph.close()
    return accuracy
