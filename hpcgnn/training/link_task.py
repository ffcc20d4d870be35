"""The link-prediction task (``hpcgnn train --task link``): its loss, its loader and its evaluation.

Training: batches of positive edges from :func:`~hpcgnn.graph.edge_split` (the same count on
every rank), K negatives per positive (``--negative-sampler``, ``--negatives``), blocks of every
endpoint with the batch's positives hidden, the encoder's embeddings scored by the predictor
(:class:`~hpcgnn.nn.link.LinkModel`), binary cross-entropy on the logits (``--link-loss bce``)
or a margin ranking loss between each positive and its own negatives (``margin``).

Evaluation: full-graph layer-wise inference to every node's embedding (a DistTensor), then each
rank scores the validation and test edges it owns (their fixed negatives come with the dataset,
drawn once by ``hpcgnn partition``), and the metrics are reduced over the ranks
(:mod:`hpcgnn.training.link_metrics`): the same figures on any number of ranks.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import torch
from torch.nn import functional as F

from hpcgnn.graph import edge_split
from hpcgnn.loading.edge_loader import EdgeDataLoader
from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.watchdog import beat
from hpcgnn.sampling.negative import build_negative_sampler
from hpcgnn.training.collapse import constant_share
from hpcgnn.training.inference import layerwise_inference
from hpcgnn.training.link_metrics import link_metrics

TASK = "link"
SPLITS = ("val", "test")
LOSSES = ("bce", "margin")
#: pairs scored at once in evaluation: bounds the gathered embedding rows
EVAL_CHUNK_PAIRS = 1 << 18
#: the share of all training edges in one global batch above which --exclude self is warned about
EXCLUSION_WARN_SHARE = 0.5


def require_edge_sets(graph, where):
    """Local. Refuse a dataset partitioned without held-out edge sets."""
    if getattr(graph, "link", None) is None:
        raise InputError(os.path.join(where, "meta.json"), "dataset has no edge sets for --task link: partition it "
                         "with --edge-split 0.85,0.05,0.1 (or a dataset's own split, --edge-split dataset)", "link")


def link_dataset_sizes(graph) -> dict:
    """Local. What the dataset decides of a link model: node count, feature width, the task."""
    feat_dim = int(graph.ndata["feat"].shape[1]) if "feat" in graph.ndata else 0
    return {"num_nodes": int(graph.num_nodes), "feat_dim": feat_dim, "num_classes": 0, "task": TASK}


def build_link_loader(graph, args, sampler, prefetch) -> EdgeDataLoader:
    """Collective over graph.comm. This rank's training edges in batches, with negatives."""
    seeds = edge_split(graph, seed=args.seed)
    total = graph.comm.allreduce(seeds.eids.shape[0])
    if total == 0:
        raise InputError(os.path.join(args.data, "meta.json"), "no training edges: the message-passing graph is empty",
                         "num_edges", 0)
    hidden = min(1.0, args.batch_size * graph.comm.size / total)
    if args.exclude == "self" and hidden >= EXCLUSION_WARN_SHARE and graph.comm.rank == 0:
        print(f"hpcgnn: warning: a batch holds {hidden:.0%} of the training edges and --exclude self hides "
              "them from its neighbourhoods, so the encoder sees little of the graph; use smaller batches, or "
              "--exclude none for full-batch (graph auto-encoder) training", file=sys.stderr, flush=True)
    negatives = build_negative_sampler(args.negative_sampler, args.negatives, graph)
    return EdgeDataLoader(graph, seeds, sampler, negatives, args.batch_size, prefetch=prefetch, seed=args.seed,
                          feature="feat" if "feat" in graph.ndata else None, exclude=args.exclude == "self",
                          max_batches=args.steps_per_epoch)


class LinkLoss:
    """Local. The training loss of a link batch, from the model's embeddings of its endpoints.

    ``bce``: binary cross-entropy with logits, mean over every positive (label 1) and negative
    (label 0) pair. ``margin``: mean over (positive, one of its negatives) of
    ``relu(margin - s_pos + s_neg)``. Either way the mean over ranks of equal batches is the
    whole batch's loss.
    """

    def __init__(self, model, kind="bce", margin=1.0):
        if kind not in LOSSES:
            raise ValueError(f"unknown link loss {kind!r} (choose from {', '.join(LOSSES)})")
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
    step = max(1, EVAL_CHUNK_PAIRS // (k + 1))
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        h_src = torch.from_numpy(embeddings.gather(src[lo:hi]))
        h_dst = torch.from_numpy(embeddings.gather(dst[lo:hi]))
        h_neg = torch.from_numpy(embeddings.gather(neg[lo:hi].reshape(-1)))
        if neg_src is None:
            h_neg_src = h_src.repeat_interleave(k, 0)
        else:
            h_neg_src = torch.from_numpy(embeddings.gather(neg_src[lo:hi].reshape(-1)))
        pos_scores[lo:hi] = model.score(h_src, h_dst).numpy()
        neg_scores[lo:hi] = model.score(h_neg_src, h_neg).view(hi - lo, k).numpy()
    return pos_scores, neg_scores


def evaluate_links(model, graph, batch_size, inputs=None, on_layer=None, sampler=None, check_collapse=False) -> dict:
    """Collective over graph.comm. ``{split}_{metric}`` for the validation and test edge sets:
    ``loss``, ``auc``, ``ap``, ``mrr``, ``hits@K`` (see :mod:`hpcgnn.training.link_metrics`); with
    ``check_collapse``, also ``constant_share``: the share of the validation scores, positive and
    negative, that are one value (:func:`hpcgnn.training.collapse.constant_share`; near 1 for a
    dead model)."""
    embeddings = layerwise_inference(model, graph, batch_size, inputs=inputs, on_layer=on_layer, keep=True,
                                     sampler=sampler)
    try:
        result = {}
        for split in SPLITS:
            beat(f"scoring the {split} edges")
            pos, neg = score_edges(model, embeddings, *graph.link[split])
            result.update({f"{split}_{key}": value for key, value in link_metrics(pos, neg, graph.comm).items()})
            if check_collapse and split == "val":
                result["constant_share"] = constant_share(np.concatenate([pos, neg.reshape(-1)]), graph.comm)
    finally:
        embeddings.close()
    return result
