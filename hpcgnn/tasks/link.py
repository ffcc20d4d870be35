"""The link-prediction task (``hpcgnn train --task link``): its loss, its loader and its evaluation.

Training: batches of positive edges from :func:`~hpcgnn.graph.edge_split` (the same count on
every rank), K negatives per positive (``--negative-sampler``, ``--negatives``), blocks of every
endpoint with the batch's positives hidden, the encoder's embeddings scored by the predictor
(:class:`~hpcgnn.nn.link.LinkModel`), binary cross-entropy on the logits (``--link-loss bce``)
or a margin ranking loss between each positive and its own negatives (``margin``).

Evaluation: full-graph layer-wise inference to every node's embedding (a DistTensor), then each
rank scores the validation and test edges it owns (their fixed negatives come with the dataset,
drawn once by ``hpcgnn partition``), and the metrics are reduced over the ranks
(:mod:`hpcgnn.tasks.link_metrics`): the same figures on any number of ranks.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F

from hpcgnn.graph import edge_split
from hpcgnn.loading.edge_loader import EdgeDataLoader
from hpcgnn.nn.link import PREDICTORS, build_link_model
from hpcgnn.nn.models import model_device
from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.flags import MAX_REPEATS, Domain
from hpcgnn.runtime.options import option
from hpcgnn.runtime.watchdog import beat
from hpcgnn.sampling.negative import NEGATIVE_SAMPLERS, build_negative_sampler
from hpcgnn.tasks.collapse import constant_share
from hpcgnn.tasks.inference import inference_sampler, layerwise_inference
from hpcgnn.tasks.link_metrics import LINK_METRICS, link_metrics
from hpcgnn.tasks.node import feature_width, require_fields
from hpcgnn.tasks.registry import DatasetFacts, Task, register_task

_SPLITS = ("val", "test")
_LOSSES = ("bce", "margin")
#: pairs scored at once in evaluation: bounds the gathered embedding rows
_EVAL_CHUNK_PAIRS = 1 << 18
#: the share of all training edges in one global batch above which --exclude self is warned about
_EXCLUSION_WARN_SHARE = 0.5


def _require_edge_sets(graph, where):
    """Local. Refuse a dataset partitioned without held-out edge sets."""
    if getattr(graph, "link", None) is None:
        raise InputError(os.path.join(where, "meta.json"), "dataset has no edge sets for --task link: partition it "
                         "with --edge-split 0.85,0.05,0.1 (or a dataset's own split, --edge-split dataset)", "link")


def build_link_loader(graph, config, sampler, prefetch) -> EdgeDataLoader:
    """Collective over graph.comm. This rank's training edges in batches, with negatives."""
    options, batch_size = config.task.options, config.optimizer.batch_size
    seeds = edge_split(graph, seed=config.seed)
    total = graph.comm.allreduce(seeds.eids.shape[0])
    if total == 0:
        raise InputError(os.path.join(config.input.data, "meta.json"), "no training edges: the message-passing graph "
                         "is empty", "num_edges", 0)
    hidden = min(1.0, batch_size * graph.comm.size / total)
    if options.exclude == "self" and hidden >= _EXCLUSION_WARN_SHARE and graph.comm.rank == 0:
        print(f"hpcgnn: warning: a batch holds {hidden:.0%} of the training edges and --exclude self hides "
              "them from its neighbourhoods, so the encoder sees little of the graph; use smaller batches, or "
              "--exclude none for full-batch (graph auto-encoder) training", file=sys.stderr, flush=True)
    negatives = build_negative_sampler(options.negative_sampler, options.negatives, graph)
    return EdgeDataLoader(graph, seeds, sampler, negatives, batch_size, prefetch=prefetch, seed=config.seed,
                          feature="feat" if "feat" in graph.ndata else None, exclude=options.exclude == "self",
                          max_batches=config.optimizer.steps_per_epoch)


class LinkLoss:
    """Local. The training loss of a link batch, from the model's embeddings of its endpoints.

    ``bce``: binary cross-entropy with logits, mean over every positive (label 1) and negative
    (label 0) pair. ``margin``: mean over (positive, one of its negatives) of
    ``relu(margin - s_pos + s_neg)``. Either way the mean over ranks of equal batches is the
    whole batch's loss.
    """

    def __init__(self, model, kind="bce", margin=1.0):
        if kind not in _LOSSES:
            raise ValueError(f"unknown link loss {kind!r} (choose from {', '.join(_LOSSES)})")
        self.model, self.kind, self.margin = model, kind, float(margin)

    def batch(self, h, batch):
        """Local. ``(loss, correct, seen)``: the loss to back-propagate, and the pairs whose logit has
        the right sign out of all pairs scored."""
        pairs = batch.extra
        pos = self.model.score(h[pairs["pos_src"]], h[pairs["pos_dst"]])
        neg = self.model.score(h[pairs["neg_src"]], h[pairs["neg_dst"]])
        seen = pos.numel() + neg.numel()
        if pos.numel() == 0:
            return h.sum() * 0.0, 0.0, 0  # a padding step: no edges on this rank
        if self.kind == "bce":
            logits = torch.cat([pos, neg])
            labels = torch.cat([torch.ones_like(pos), torch.zeros_like(neg)])
            loss = F.binary_cross_entropy_with_logits(logits, labels)
        else:
            loss = F.relu(self.margin - pos[:, None] + neg.view(pos.numel(), -1)).mean()
        correct = float((pos > 0).sum() + (neg <= 0).sum())
        return loss, correct, seen


@torch.no_grad()
def score_edges(model, embeddings, src, dst, neg, neg_src=None):
    """Local. ``(pos [n], neg [n, K])`` float64 logits of positive edges ``src -> dst`` and of each
    one's negatives ``src -> neg[i, j]`` (``neg_src[i, j] -> neg[i, j]`` when given), embeddings
    read from the DistTensor ``embeddings``."""
    n, k = neg.shape
    pos_scores, neg_scores = np.empty(n), np.empty((n, k))
    step = max(1, _EVAL_CHUNK_PAIRS // (k + 1))
    device = model_device(model)  # the rows are read on the CPU; a GPU model scores them there

    def rows(ids):
        return torch.from_numpy(embeddings.gather(ids)).to(device)

    for lo in range(0, n, step):
        hi = min(n, lo + step)
        h_src, h_dst, h_neg = rows(src[lo:hi]), rows(dst[lo:hi]), rows(neg[lo:hi].reshape(-1))
        h_neg_src = h_src.repeat_interleave(k, 0) if neg_src is None else rows(neg_src[lo:hi].reshape(-1))
        pos_scores[lo:hi] = model.score(h_src, h_dst).cpu().numpy()
        neg_scores[lo:hi] = model.score(h_neg_src, h_neg).view(hi - lo, k).cpu().numpy()
    return pos_scores, neg_scores


def evaluate_links(model, graph, batch_size, inputs=None, on_layer=None, sampler=None, check_collapse=False) -> dict:
    """Collective over graph.comm. ``{split}_{metric}`` for the validation and test edge sets:
    ``loss``, ``auc``, ``ap``, ``mrr``, ``hits@K`` (see :mod:`hpcgnn.tasks.link_metrics`); with
    ``check_collapse``, also ``constant_share``: the share of the validation scores, positive and
    negative, that are one value (:func:`hpcgnn.tasks.collapse.constant_share`; near 1 for a
    dead model)."""
    embeddings = layerwise_inference(model, graph, batch_size, inputs=inputs, on_layer=on_layer, keep=True,
                                     sampler=sampler)
    try:
        result = {}
        for split in _SPLITS:
            beat(f"scoring the {split} edges")
            pos, neg = score_edges(model, embeddings, *graph.link[split])
            result.update({f"{split}_{key}": value for key, value in link_metrics(pos, neg, graph.comm).items()})
            if check_collapse and split == "val":
                result["constant_share"] = constant_share(np.concatenate([pos, neg.reshape(-1)]), graph.comm)
    finally:
        embeddings.close()
    return result


@dataclass(frozen=True)
class LinkOptions:
    """Local. ``--task link``: the edge-score predictor, the negatives and the loss."""

    predictor: str = option("dot", "edge score from the two endpoints' embeddings: dot product, or an MLP on their "
                            "element-wise product", choices=tuple(PREDICTORS))
    negative_sampler: str = option("corrupt", "negatives per positive (u, v): corrupt = (u, uniform node); uniform = "
                                   "random node pairs; degree = (u, node drawn by in-degree^0.75); in-batch = (u, "
                                   "destination of another positive of the batch)", choices=NEGATIVE_SAMPLERS)
    negatives: int = option(1, "negative pairs per positive edge in training", metavar="K",
                            type=Domain(int, ge=1, le=MAX_REPEATS))
    link_loss: str = option("bce", "bce: binary cross-entropy on logits; margin: relu(margin - pos + neg) per "
                            "(positive, negative)", choices=_LOSSES)
    margin: float = option(1.0, "of --link-loss margin", type=Domain(float, ge=0))
    exclude: str = option("self", "self: hide each batch's positive edges and their reverses from its "
                          "neighbourhoods (the model cannot read the answer); none: keep them (DGL's exclude=None; "
                          "it leaks the answer, for measurements and for tests that compare rank counts)",
                          choices=("self", "none"))


class LinkPrediction(Task):
    """Local. ``--task link``: predict the edges ``hpcgnn partition --edge-split`` held out."""

    name = "link"
    options = LinkOptions
    summary = "predict edges held out by 'hpcgnn partition --edge-split' (see the link flags)"
    metrics = LINK_METRICS
    scored = "validation edges' scores"
    fit_keys = ("predictor",)

    def settle(self, config, graph):
        """Local. Refuse a typed dataset: its held-out edges would need a relation to predict, and
        partition --edge-split holds out none on a typed graph."""
        if graph.is_typed:
            raise InputError(os.path.join(config.input.data, "meta.json"), "link prediction on a typed dataset "
                             f"({graph.schema.num_types} node types, {graph.schema.num_relations} relations) is not "
                             "supported: train it with --task node", "--task", self.name)
        return config

    def facts(self, graph, config, comm) -> DatasetFacts:
        """Collective over comm. Node count and feature width; the dataset's held-out edge sets."""
        require_fields(graph, config.input.data, () if config.input.embed_dim else ("feat",))
        _require_edge_sets(graph, config.input.data)
        feat_dim = feature_width(graph)
        return DatasetFacts(int(graph.num_nodes), feat_dim, 0, "link", feat_dim + config.input.embed_dim)

    def choose_metric(self, metric, facts, where=None) -> str:
        """Local. ``metric``, else auc (every link metric is reported; this one selects the model)."""
        if metric is None:
            return "auc"
        if metric not in LINK_METRICS:
            raise InputError(where, f"--task link reports {', '.join(LINK_METRICS)}", "--metric", metric)
        return metric

    def build_model(self, config, facts):
        """Local. The registered encoder, ``--hidden`` wide, and the ``--predictor``."""
        return build_link_model(config.model, facts.in_dim, config.task.options.predictor)

    def build_loader(self, graph, config, sampler, prefetch):
        """Collective over graph.comm. Batches of training edges with their negatives."""
        return build_link_loader(graph, config, sampler, prefetch)

    def build_loss(self, model, graph, config, facts):
        """Local. ``--link-loss`` on the scores of each batch's positives and negatives."""
        return LinkLoss(model, config.task.options.link_loss, config.task.options.margin)

    def evaluate(self, model, graph, config, batch_size, inputs, on_layer=None) -> dict:
        """Collective over graph.comm. Every link metric on the validation and test edges; the
        node embeddings (the last layer's rows) when ``on_layer`` is given."""
        last = {}

        def keep_last(i, rows):
            on_layer(i, rows)
            if i == len(model.layers) - 1:
                last["rows"] = rows.copy()

        metrics = evaluate_links(model, graph, batch_size, inputs=inputs, on_layer=keep_last if on_layer else None,
                                 sampler=inference_sampler(config), check_collapse=True)
        return dict(metrics, rows=last.get("rows"))

    def describe(self, config, facts) -> str:
        """Local. Predictor, negatives and metric."""
        options = config.task.options
        return (f"link prediction ({options.predictor} predictor, {options.negatives} {options.negative_sampler} "
                f"negative{'s' if options.negatives > 1 else ''} per edge, metric {config.evaluation.metric})")

    def check_evaluation(self, graph, data, options) -> None:
        """Local. A link checkpoint needs the dataset's edge sets, and saves no class predictions."""
        _require_edge_sets(graph, data)
        if options.save_predictions:
            raise InputError(None, "applies to node classification checkpoints (this one predicts links)",
                             "--save-predictions", True)


register_task(LinkPrediction())
