"""Node classification (``--task node``, the default): a label per node (one class, or several of
a multi-label ``[N, C]`` field), cross-entropy on batches of training nodes, and accuracy, loss
and the run's metric on every split from full-neighbourhood inference."""
from __future__ import annotations

import os
from dataclasses import dataclass, replace

from hpcgnn.graph import node_split
from hpcgnn.loading import NodeDataLoader
from hpcgnn.loading.typed_rows import TypedFieldFetch, type_widths
from hpcgnn.nn import build_model
from hpcgnn.nn.relational_models import TypeProjection
from hpcgnn.nn.typed_model import TypedModel
from hpcgnn.runtime.comm import mpi
from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.flags import MAX_MIB, Domain
from hpcgnn.runtime.options import option
from hpcgnn.sampling.registry import sampler_spec
from hpcgnn.tasks.collapse import constant_share
from hpcgnn.tasks.inference import inference_sampler, layerwise_inference, split_accuracy
from hpcgnn.tasks.metrics import CLASS_WEIGHTS, METRICS, TrainingLoss, class_weights, task_of
from hpcgnn.tasks.registry import DatasetFacts, Task, register_task

#: why a run needs a node field it lacks, and the flag that does without it
_MISSING_FIELD = {
    "feat": "dataset has no node features: train with --embed-dim D to learn a D-wide embedding per node instead",
    "label": "dataset has no node labels to classify: for link prediction train with --task link (on a dataset "
             "partitioned with --edge-split T,V,E)",
    "train_mask": "dataset has no training nodes (no train_mask): partition it with --split 0.6,0.2,0.2 (or "
                  "per-class:20,30), or train with --task link (on a dataset partitioned with --edge-split T,V,E)",
}


def require_fields(graph, data, fields):
    """Local. Refuse a dataset without one of the node ``fields`` a run reads, naming the flag that
    does without it."""
    for field in fields:
        if field not in graph.ndata:
            raise InputError(os.path.join(data, "meta.json"), _MISSING_FIELD[field], "node_fields", field)


#: the sampler that keeps each edge's relation (hpcgnn.sampling.relational)
RELATIONAL = "relational"


def feature_width(graph) -> int:
    """Local. The width of the ``feat`` field (0 without features)."""
    return int(graph.ndata["feat"].shape[1]) if "feat" in graph.ndata else 0


def relational_embed_dim(config, graph) -> int:
    """Local. The embedding width of ``--featureless relational``: ``(relations + 1) x --hidden``,
    R-GCN's input layer's row per featureless node (a ``--hidden`` slice per relation and one for
    the node's own term; the memory of ``relations + 1`` shared embeddings). Refused in one line
    naming the flag for a model other than R-GCN, a one-layer model (its input layer's width is the
    class count), an input dropout (the rows are not features) and another ``--embed-dim``."""
    model, flag = config.model, "--featureless"
    if model.model != "rgcn":
        raise InputError(None, "--featureless relational is R-GCN's input layer for node types without features, "
                         f"and --model is {model.model}: train --model rgcn, or --featureless shared", flag,
                         model.featureless)
    if model.layers is not None and model.layers < 2:
        raise InputError(None, "--featureless relational needs a hidden layer (its rows are --hidden slices): "
                         "train with --layers 2 or more, or --featureless shared", flag, model.featureless)
    if model.input_dropout:
        raise InputError(None, "--featureless relational learns the rows of featureless types, which take no input "
                         "dropout: train with --input-dropout 0, or --featureless shared", flag, model.featureless)
    width = (graph.schema.num_relations + 1) * model.hidden
    if config.input.embed_dim not in (0, width):
        raise InputError(None, f"--featureless relational learns a row of (relations + 1) x --hidden = {width} per "
                         "featureless node: leave --embed-dim unset, or train with --featureless shared",
                         "--embed-dim", config.input.embed_dim)
    return width


@dataclass(frozen=True)
class NodeOptions:
    """Local. ``--task node``: the loss's class weights and the cache of other ranks' feature rows."""

    class_weight: str = option("none", "weights of the training loss: balanced = inverse frequency of the training "
                               "labels (multi-label: each label's positives weigh negatives/positives)",
                               choices=CLASS_WEIGHTS)
    cache_mb: float = option(0, "per rank: MB of feature rows of other nodes kept locally, the ones batches read "
                             "most (chosen by sampling batches first; 0: no cache)",
                             type=Domain(float, gt=0, le=MAX_MIB, special={0: "no cache"}))


class NodeClassification(Task):
    """Local. ``--task node``: classify nodes (``label``, ``train_mask``, ``val_mask``, ``test_mask``)."""

    name = "node"
    options = NodeOptions
    summary = "classify nodes (label, masks)"
    metrics = METRICS
    scored = "nodes' logits"
    folds_nodes = True

    def settle(self, config, graph):
        """Local. What a typed graph settles: batches sampled per relation (``--sampler neighbor``,
        the default, becomes ``relational`` with the same fanouts; a sampler whose batches lose the
        relations is refused), and for node types without features the learned embedding they
        take as input (``--embed-dim`` defaults to ``--hidden``; with ``--featureless relational``
        R-GCN's per-relation rows, :func:`relational_embed_dim`)."""
        if not graph.is_typed:
            return config
        name = config.sampler.name
        if name == "neighbor":
            options = sampler_spec(RELATIONAL).options(fanouts=config.sampler.options.fanouts)
            config = replace(config, sampler=replace(config.sampler, name=RELATIONAL, options=options))
        elif name != RELATIONAL:
            raise InputError(os.path.join(config.input.data, "meta.json"), f"the {name} sampler does not keep each "
                             f"edge's relation, and this dataset is typed ({graph.schema.num_relations} relations): "
                             f"train it with --sampler {RELATIONAL}", "--sampler", name)
        if 0 not in type_widths(graph):
            return config
        if config.model.featureless == "relational":
            return replace(config, input=replace(config.input, embed_dim=relational_embed_dim(config, graph)))
        if not config.input.embed_dim:
            config = replace(config, input=replace(config.input, embed_dim=config.model.hidden))
        return config

    def facts(self, graph, config, comm) -> DatasetFacts:
        """Collective over comm. Node count, feature width, classes (one more than the largest label;
        a multi-label ``label`` [N, C]: C) and the kind of target (:func:`~.metrics.task_of`). On a
        typed graph: every type's feature width and the relations; the model's input width is then
        ``--hidden``, the width every type is projected to."""
        typed = graph.is_typed
        needed = (() if config.input.embed_dim or typed else ("feat",)) + ("label", "train_mask")
        require_fields(graph, config.input.data, needed)
        label = graph.ndata["label"]
        if len(label.shape) == 2:
            num_classes = int(label.shape[1])
        else:
            num_classes = int(comm.allreduce(int(label.local.max(initial=-1)), op=mpi().MAX)) + 1
        kind = task_of(label.shape, num_classes)
        if typed:
            return DatasetFacts(int(graph.num_nodes), 0, num_classes, kind, config.model.hidden, type_widths(graph),
                                graph.schema.num_relations)
        feat_dim = feature_width(graph)
        return DatasetFacts(int(graph.num_nodes), feat_dim, num_classes, kind, feat_dim + config.input.embed_dim)

    def build_model(self, config, facts):
        """Local. The registered model, ``facts.num_classes`` outputs; on a typed graph behind the
        per-type input projection (a type without features: its embedding, projected unless it is
        already ``--hidden`` wide)."""
        if not facts.typed:
            return build_model(config.model, facts.in_dim, facts.num_classes)
        embed = config.input.embed_dim
        stack = build_model(config.model, facts.in_dim, facts.num_classes, num_relations=facts.num_relations)
        if config.model.featureless == "relational" and 0 in facts.type_widths:
            # R-GCN's input layer reads the featureless types' per-relation rows as they are
            return TypedModel(TypeProjection(facts.type_widths, facts.in_dim, facts.num_relations + 1), stack)
        widths = [w if w else (0 if embed == facts.in_dim else embed) for w in facts.type_widths]
        return TypedModel(TypeProjection(widths, facts.in_dim), stack)

    def build_loader(self, graph, config, sampler, prefetch) -> NodeDataLoader:
        """Collective over graph.comm. This rank's training nodes in batches of ``--batch-size`` (a
        subgraph sampler's own seeds: clusters, or one subgraph per step); a typed graph's batches
        gather every node type's own features (:class:`~hpcgnn.loading.typed_rows.TypedFieldFetch`)."""
        train_ids = node_split("train_mask", graph, seed=config.seed)
        if graph.comm.allreduce(train_ids.shape[0]) == 0:
            raise InputError(os.path.join(config.input.data, "meta.json"), "no training nodes: the mask selects none",
                             "train_mask", 0)
        feature = "feat" if "feat" in graph.ndata else None
        cache_bytes = int(config.task.options.cache_mb * 2**20)
        fetch = None
        if graph.is_typed:
            if cache_bytes:
                raise InputError(None, "the feature cache holds rows of one feature table, and a typed dataset has "
                                 "one per node type: train without it", "--cache-mb", config.task.options.cache_mb)
            fetch = TypedFieldFetch(graph)
        steps = config.optimizer.steps_per_epoch
        if sampler_spec(config.sampler.name).subgraph:
            ids, per_batch = sampler.loader_seeds()
            return NodeDataLoader(graph, ids, sampler, per_batch, prefetch=prefetch, seed=config.seed, feature=feature,
                                  max_batches=steps, fetch=fetch)
        return NodeDataLoader(graph, train_ids, sampler, config.optimizer.batch_size, prefetch=prefetch,
                              seed=config.seed, feature=feature, cache_bytes=cache_bytes, max_batches=steps,
                              fetch=fetch)

    def build_loss(self, model, graph, config, facts) -> TrainingLoss:
        """Collective over graph.comm. Cross-entropy (multi-label: binary), class-weighted with
        ``--class-weight balanced`` from the labels of the training nodes each rank owns."""
        weights = None
        if config.task.options.class_weight == "balanced":
            owned_train = graph.ndata["train_mask"].local.astype(bool)
            weights = class_weights(graph.ndata["label"].local[owned_train], facts.kind, facts.num_classes, graph.comm)
        return TrainingLoss(facts.kind, weights)

    def evaluate(self, model, graph, config, batch_size, inputs, on_layer=None) -> dict:
        """Collective over graph.comm. Accuracy, loss and the run's metric on every split."""
        logits = layerwise_inference(model, graph, batch_size, inputs=inputs, on_layer=on_layer,
                                     sampler=inference_sampler(config))
        return dict(split_accuracy(logits, graph, metric=config.evaluation.metric),
                    constant_share=constant_share(logits.numpy(), graph.comm), rows=logits)

    def describe(self, config, facts) -> str:
        """Local. Classes, kind of target and metric."""
        return (f"{facts.num_classes} {'labels' if facts.kind == 'multilabel' else 'classes'} "
                f"({facts.kind}, metric {config.evaluation.metric})")

    def check_evaluation(self, graph, data, options) -> None:
        """Local. A node checkpoint is scored on a labelled dataset."""
        if "label" not in graph.ndata:
            raise InputError(os.path.join(data, "meta.json"), "dataset has no node labels, and the checkpoint "
                             "classifies nodes: evaluate it with --data set to a labelled dataset (the one it was "
                             "trained on)", "node_fields", "label")


register_task(NodeClassification())
