"""Evaluate a checkpoint: rebuild its model from the config it carries, run full-neighbourhood
inference, report the task's figures on every split and optionally save each rank's output rows."""
from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import torch

from hpcgnn.graph import DistGraph
from hpcgnn.graph.feature_scale import scale_features
from hpcgnn.nn import set_precision
from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.stages import StageLog
from hpcgnn.store import DistEmbedding
from hpcgnn.tasks import DatasetFacts, task_named
from hpcgnn.tasks.inference import input_rows
from hpcgnn.tasks.metrics import metric_key, task_of
from hpcgnn.training.checkpoint import (
    DATASET_KEYS,
    check_fits,
    check_node_state,
    chosen_checkpoint,
    dataset_identity,
    load_checkpoint,
    saved_rank_count,
    settings_view,
    shard_files,
)
from hpcgnn.training.config import EvaluateConfig, TrainConfig, stored_config
from hpcgnn.training.device import place_rank
from hpcgnn.training.early_stop import selection_key
from hpcgnn.training.outputs import InferenceOutputs
from hpcgnn.training.session import EMBEDDING_NAME, use_kernels


def _saved_run(state, path, graph) -> tuple[TrainConfig, DatasetFacts]:
    """Local. The config and dataset facts a checkpoint was trained with. Checkpoints of older
    releases stored both as one flat config, some without ``in_dim`` (then the feature width
    plus the embedding width, as the trainer built it) or ``task`` (then single-label)."""
    config = stored_config(state["config"], path)
    if isinstance(state.get("facts"), dict):
        return config, DatasetFacts(**state["facts"])
    old = state["config"]
    in_dim = old.get("in_dim")
    if in_dim is None:
        in_dim = (graph.ndata["feat"].shape[1] if "feat" in graph.ndata else 0) + old.get("embed_dim", 0)
    kind = old.get("task") or task_of((0,), old.get("num_classes"))
    return config, DatasetFacts(old.get("num_nodes"), old.get("feat_dim"), old.get("num_classes", 0), kind, in_dim)


def _scored_as(which, config) -> str:
    """Local. Why this checkpoint is scored, in words; for ``best``, by which validation value
    the run selected it."""
    if not which.startswith("best"):
        return which
    key = selection_key(config.evaluation.select, metric_key(config.evaluation.metric or "acc"))
    return f"{which}, by {key}"


def evaluate_checkpoint(options: EvaluateConfig, comm) -> dict:
    """Collective over comm. The task's figures (node checkpoints: accuracy, loss and the metric
    ``options.metric``, else the checkpoint's, else the task's default) of ``options.checkpoint``
    on every split of ``options.data``.

    A checkpoint directory is scored by its ``best`` checkpoint (the model the training run
    selected and reported), or by its ``latest`` with ``options.latest``
    (:func:`~hpcgnn.training.checkpoint.chosen_checkpoint`); rank 0 prints which file and epoch.
    A checkpoint made for another dataset (node count, feature width, class count, task), or
    whose node embedding was trained on another numbering of the nodes, is refused on every
    rank before any inference.
    """
    if not os.path.exists(options.checkpoint):
        raise InputError(options.checkpoint, "checkpoint not found", "--checkpoint")
    path, which = chosen_checkpoint(options.checkpoint, options.latest)
    state = load_checkpoint(path)  # refused before the dataset is opened if it is not plain data
    placement = place_rank(options.device, comm)  # tensors load on the CPU; the model then moves here
    log = StageLog("evaluate", enabled=comm.rank == 0)  # a line per stage: large graphs take minutes
    if comm.rank == 0:
        print(f"evaluate: scoring {path}, epoch {state['epoch']} "
              f"({_scored_as(which, stored_config(state['config'], path))})", flush=True)
    graph = DistGraph(options.data, comm)
    config, facts = _saved_run(state, path, graph)
    scale_features(graph, config.input.feature_scale, where=path)  # as its training run saw them
    log(f"load {options.data}: {graph.num_nodes:,} nodes, {graph.num_edges:,} edges, {comm.size} ranks")
    check_node_state(path, state, dataset_identity(graph), "hpcgnn evaluate", warn=comm.rank == 0)
    task = task_named(config.task.name)
    task.check_evaluation(graph, options.data, options)
    here = task.facts(graph, replace(config, input=replace(config.input, data=options.data)), comm)
    check_fits(path, dict(settings_view(state, path), kind=facts.kind), here.as_dict(), DATASET_KEYS + ("kind",))
    metric = task.choose_metric(options.metric or config.evaluation.metric, here,
                                os.path.join(options.data, "meta.json"))
    config = replace(config, evaluation=replace(config.evaluation, metric=metric))
    model = _checkpoint_model(task, config, facts, state, path, options.precision)
    if placement.cuda:
        use_kernels(model, "torch")  # the compiled kernels run on the CPU only
    model.to(placement.device)
    embedding = None
    if config.input.embed_dim:  # the learnable node embedding: this rank's shard beside the checkpoint
        embedding = DistEmbedding(graph.num_nodes, config.input.embed_dim, name=EMBEDDING_NAME, comm=comm,
                                  book=graph.book)
        # a checkpoint of another rank count: this rank's rows assembled from the saving ranks' shards
        with shard_files(os.path.dirname(path), state["epoch"], saved_rank_count(path, state), comm) as shard_file:
            embedding.load(shard_file(embedding, ".emb.npz"))
    outputs = InferenceOutputs(options.save_embeddings, options.embedding_layer, options.save_predictions,
                               len(model.layers), facts.kind, log)
    figures = task.evaluate(model, graph, config, options.batch_size, input_rows(graph, embedding),
                            on_layer=outputs.on_layer)
    rows = figures.pop("rows", None)
    figures.pop("constant_share", None)
    log("metrics of every split")
    if outputs.save(graph, np.asarray(rows), {"checkpoint": os.path.abspath(path), "epoch": state["epoch"]}):
        log(f"save embeddings to {options.save_embeddings}")
    if embedding is not None:
        embedding.close()
    graph.close()
    return figures


def model_from_checkpoint(state, graph, path=None) -> torch.nn.Module:
    """Local. The model of the loaded checkpoint ``state`` with its trained parameters (``graph``:
    the dataset, for checkpoints of older releases that did not record the input width)."""
    config, facts = _saved_run(state, path, graph)
    return _checkpoint_model(task_named(config.task.name), config, facts, state, path)


def _checkpoint_model(task, config, facts, state, path, precision=None) -> torch.nn.Module:
    """Local. The checkpoint's model with its trained parameters (in ``precision`` when given)."""
    try:
        model = task.build_model(config, facts)
        model.load_state_dict(state["model"])
    except (RuntimeError, ValueError, KeyError, TypeError) as exc:
        raise InputError(path, f"checkpoint parameters do not fit its model config ({type(exc).__name__})") from None
    if precision is not None:
        set_precision(model, precision)
    return model
