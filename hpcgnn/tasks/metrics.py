"""Tasks, their training loss, and evaluation metrics beyond accuracy, computed where the nodes are.

The task is decided in one place, :func:`task_of`, from the ``label`` field's shape and the
class count:

* ``multiclass``: ``label`` [N], one class per node; C = largest label + 1 outputs; softmax
  cross-entropy.
* ``binary``: multi-class with C = 2; class 1 is the positive class.
* ``multilabel``: ``label`` [N, C] of 0/1 (ogbn-proteins, PPI, Yelp); C outputs, a sigmoid per
  label, binary cross-entropy with logits; a label is predicted when its logit is above 0.

Metrics of a split (``--metric``; record keys spell ``-`` as ``_``, e.g. ``val_roc_auc``):

* ``acc``: the fraction of nodes whose arg-max output is their label. Multi-label: the fraction
  of (node, label) entries predicted right, still reported as ``{split}_acc`` but refused as
  ``--metric``: with rare positives, predicting no label at all scores near 1.
* ``f1-micro``: 2 TP / (2 TP + FP + FN) with the counts summed over classes (for single-label
  tasks it equals accuracy).
* ``f1-macro``: the mean of the per-class F1 over the classes that occur in the split's labels
  or predictions (a class in neither has no F1).
* ``roc-auc``: binary, class 1 ranked by its probability; multi-class, the macro average of
  one-vs-rest AUCs, each class ranked by its softmax probability; multi-label, the macro
  average over labels, each ranked by its logit. Classes (labels) without both positive and
  negative nodes in the split are left out of the average; None when no class has both.

Each rank scores the nodes it owns. Accuracy and F1 need per-class counts (TP, FP, FN): one
Allreduce of 3C numbers. ROC-AUC is exact, without gathering the scores on one rank: they are
redistributed by value, so rank r holds the r-th value range of every column (range bounds from
quantiles of every rank's scores, so each rank receives about its share); each rank counts, for
its positives, the negatives below them in its range, and an exclusive scan adds the negatives
of the lower ranges. Each score moves once, as in a distributed sort, and the figure is the
same on any number of ranks. (A histogram of binned scores would cost C x bins numbers per
evaluation whatever the split's size, and only approximate the area.)
"""
from __future__ import annotations

import numpy as np

from hpcgnn.runtime.collectives import allgather_int, exchange_by_owner
from hpcgnn.runtime.comm import mpi
from hpcgnn.runtime.errors import InputError

TASKS = ("multiclass", "binary", "multilabel")
METRICS = ("acc", "f1-macro", "f1-micro", "roc-auc")
#: what ``--task link`` reports on its edge sets (:mod:`hpcgnn.tasks.link_metrics`); all of
#: them every evaluation, ``--metric`` choosing the one model selection uses
LINK_METRICS = ("auc", "ap", "mrr", "hits@10", "hits@50", "hits@100")
_DEFAULT_METRIC = {"multiclass": "acc", "binary": "roc-auc", "multilabel": "f1-micro"}
CLASS_WEIGHTS = ("none", "balanced")
#: (node, class) scores a rank sends in one ROC-AUC exchange: bounds its memory on wide outputs
_AUC_CHUNK_SCORES = 1 << 22
#: quantiles of every rank's scores, per class, that place the ROC-AUC range bounds
_SPLITTER_SAMPLES = 64


def task_of(label_shape, num_classes) -> str:
    """Local. ``multilabel`` for a 2-D label, ``binary`` for two classes, else ``multiclass``."""
    if len(label_shape) == 2:
        return "multilabel"
    return "binary" if num_classes == 2 else "multiclass"


def metric_key(metric) -> str:
    """Local. The record-key spelling of a metric: ``roc-auc`` -> ``roc_auc``."""
    return metric.replace("-", "_")


#: record keys of the metrics reported beside accuracy: ``{split}_{key}``
EXTRA_KEYS = tuple(metric_key(m) for m in METRICS if m != "acc")


def choose_metric(metric, task, where=None) -> str:
    """Local. The metric a run reports and selects models by: ``metric``, or the task's default.

    Raises
    ------
    InputError
        Naming ``--metric``: an unknown metric, or ``acc`` for a multi-label task.
    """
    if metric is None:
        return _DEFAULT_METRIC[task]
    if metric not in METRICS:
        raise InputError(where, f"unknown metric (choose from {', '.join(METRICS)})", "--metric", metric)
    if metric == "acc" and task == "multilabel":
        raise InputError(where, "accuracy does not apply to a multi-label dataset (with rare positives, "
                         "predicting no label scores near 1): choose f1-micro, f1-macro or roc-auc", "--metric", metric)
    return metric


def _confusion_counts(logits, labels, task) -> np.ndarray:
    """Local. ``[3, C]`` int64: per class, this rank's true positives, false positives and false
    negatives among the rows ``logits`` [n, C] with labels ``labels``."""
    num_classes = logits.shape[1]
    if task == "multilabel":
        predicted, actual = logits > 0, labels > 0
        counts = [(predicted & actual).sum(0), (predicted & ~actual).sum(0), (~predicted & actual).sum(0)]
    else:
        predicted = logits.argmax(1)
        hits = np.bincount(labels[predicted == labels], minlength=num_classes)
        counts = [hits, np.bincount(predicted, minlength=num_classes) - hits,
                  np.bincount(labels, minlength=num_classes) - hits]
    return np.stack(counts).astype(np.int64)


def _f1_scores(counts) -> tuple[float, float]:
    """Local. ``(micro, macro)`` F1 of summed counts ``[3, C]`` (TP, FP, FN); 0 when no class
    occurs in the labels or the predictions."""
    tp, fp, fn = np.asarray(counts, dtype=np.float64)
    denominator = 2 * tp + fp + fn
    seen = denominator > 0
    micro = float(2 * tp.sum() / denominator.sum()) if seen.any() else 0.0
    macro = float(np.mean(2 * tp[seen] / denominator[seen])) if seen.any() else 0.0
    return micro, macro


def _log_softmax(logits) -> np.ndarray:
    """Local. Row-wise log-probabilities, float64 (monotone in the probability, without the ties
    float32 probabilities would round many scores into)."""
    z = np.asarray(logits, dtype=np.float64)
    z = z - z.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def class_probabilities(logits, task) -> np.ndarray:
    """Local. The rows' predicted probabilities, float64: softmax over the classes, or for a
    multi-label task the sigmoid of each label's logit."""
    if task == "multilabel":
        return 1.0 / (1.0 + np.exp(-np.asarray(logits, dtype=np.float64)))
    return np.exp(_log_softmax(logits))


def logits_of(probabilities, task) -> np.ndarray:
    """Local. Logits whose :func:`class_probabilities` are ``probabilities`` (clipped away from 0
    and 1), so an average of several models' probabilities is scored as any model's logits."""
    p = np.clip(np.asarray(probabilities, dtype=np.float64), 1e-12, 1.0 - 1e-12)
    return np.log(p) - np.log1p(-p) if task == "multilabel" else np.log(p)


def _node_losses_sum(logits, labels, task) -> float:
    """Local. The summed loss of the rows: cross-entropy per node, or binary cross-entropy with
    logits per (node, label) entry for a multi-label task."""
    if task == "multilabel":
        z, y = np.asarray(logits, dtype=np.float64), labels > 0
        return float((np.maximum(z, 0) - z * y + np.log1p(np.exp(-np.abs(z)))).sum())
    return float(-_log_softmax(logits)[np.arange(labels.shape[0]), labels].sum())


def _ranking_columns(logits, labels, task):
    """Local. ``(scores, positive)`` [n, k]: the columns ROC-AUC averages over (one for binary)."""
    if task == "binary":
        z = np.asarray(logits, dtype=np.float64)
        return (z[:, 1] - z[:, 0])[:, None], (labels == 1)[:, None]
    if task == "multilabel":
        return np.asarray(logits, dtype=np.float64), labels > 0
    return _log_softmax(logits), labels[:, None] == np.arange(logits.shape[1])[None, :]


def roc_auc(scores, positive, comm) -> np.ndarray:
    """Collective over comm. Exact ROC-AUC of every column of ``scores`` against ``positive``.

    Parameters
    ----------
    scores : ndarray [n, k]
        This rank's rows; higher means more likely positive. Ties count one half, as in the
        Mann-Whitney statistic.
    positive : bool ndarray [n, k]
    comm : MPI communicator

    Returns
    -------
    ndarray [k] of float64
        NaN for a column without positive or without negative rows on every rank.
    """
    k = scores.shape[1]
    step = max(1, _AUC_CHUNK_SCORES // max(1, comm.allreduce(scores.shape[0], op=mpi().MAX)))
    sums = np.zeros((3, k), dtype=np.int64)
    for lo in range(0, k, step):  # the same column chunks on every rank
        sums[:, lo:lo + step] = _auc_sums(scores[:, lo:lo + step], positive[:, lo:lo + step], comm)
    twice_wins, positives, negatives = sums
    pairs = positives * negatives
    return np.where(pairs > 0, twice_wins / np.maximum(2 * pairs, 1), np.nan)


def _auc_sums(scores, positive, comm) -> np.ndarray:
    """Collective over comm. ``[3, k]`` over all ranks, per column: twice the Mann-Whitney wins
    (positive above negative: 2, tie: 1), positives, negatives."""
    MPI = mpi()
    n, k = scores.shape
    column = np.broadcast_to(np.arange(k, dtype=np.int32), (n, k)).reshape(-1)
    value, is_pos = scores.reshape(-1), positive.reshape(-1)
    if comm.size > 1:
        bounds = range_bounds(scores, comm)
        owner = np.empty((n, k), dtype=np.int64)
        for c in range(k):  # equal scores go to one rank, so every tie is counted where it sits
            owner[:, c] = np.searchsorted(bounds[c], scores[:, c], side="right")
        column, value, is_pos = exchange_by_owner(comm, owner.reshape(-1), column, value, is_pos)
    order = np.lexsort((value, column))
    column, value, is_pos = column[order], value[order], is_pos[order]
    starts = np.ones(column.shape[0], dtype=bool)  # runs of one (column, score)
    starts[1:] = (column[1:] != column[:-1]) | (value[1:] != value[:-1])
    run = np.cumsum(starts) - 1
    runs = int(starts.sum())
    run_pos = np.bincount(run[is_pos], minlength=runs).astype(np.int64)
    run_neg = np.bincount(run[~is_pos], minlength=runs).astype(np.int64)
    run_column = column[starts]
    neg_here = np.bincount(run_column, weights=run_neg, minlength=k).astype(np.int64)
    pos_here = np.bincount(run_column, weights=run_pos, minlength=k).astype(np.int64)
    # negatives below each run inside its column, on this rank
    below = np.cumsum(run_neg) - run_neg - (np.cumsum(neg_here) - neg_here)[run_column]
    twice_wins = np.zeros(k, dtype=np.int64)
    np.add.at(twice_wins, run_column, run_pos * (2 * below + run_neg))
    neg_lower_ranks = np.zeros(k, dtype=np.int64)
    if comm.size > 1:
        comm.Exscan(neg_here, neg_lower_ranks, op=MPI.SUM)
        if comm.rank == 0:  # Exscan leaves rank 0's buffer undefined
            neg_lower_ranks[:] = 0
    sums = np.stack([twice_wins + 2 * pos_here * neg_lower_ranks, pos_here, neg_here])
    comm.Allreduce(MPI.IN_PLACE, sums, op=MPI.SUM)
    return sums


def range_bounds(scores, comm) -> np.ndarray:
    """Collective over comm. ``[k, size - 1]``: per column, the scores that cut all ranks' scores
    into ``size`` ranges of about equal count (from weighted quantiles of every rank's scores)."""
    n, k = scores.shape
    local = (np.quantile(scores, np.linspace(0, 1, _SPLITTER_SAMPLES), axis=0) if n
             else np.zeros((_SPLITTER_SAMPLES, k)))
    everyone = np.empty((comm.size, _SPLITTER_SAMPLES, k), dtype=np.float64)
    comm.Allgather(np.ascontiguousarray(local, dtype=np.float64), everyone)
    weight = np.repeat(allgather_int(n, comm).astype(np.float64), _SPLITTER_SAMPLES)
    samples = everyone.reshape(-1, k)
    targets = np.arange(1, comm.size) / comm.size * weight.sum()
    bounds = np.empty((k, comm.size - 1))
    for c in range(k):
        order = np.argsort(samples[:, c], kind="stable")
        cumulative = np.cumsum(weight[order])
        picks = np.minimum(np.searchsorted(cumulative, targets), order.shape[0] - 1)
        bounds[c] = samples[order[picks], c]
    return bounds


def split_metrics(logits, labels, task, metric, comm) -> dict:
    """Collective over comm. ``acc``, ``loss`` and ``metric`` (its record key) of one split over
    all ranks, from this rank's rows of it.

    ``loss`` is the mean cross-entropy per node (multi-label: binary cross-entropy per entry),
    unweighted. Every value is None when the split is empty on every rank.
    """
    MPI = mpi()
    logits = np.asarray(logits)
    entries = labels.size if task == "multilabel" else labels.shape[0]
    counts = _confusion_counts(logits, labels, task)
    if task == "multilabel":
        correct = entries - counts[1].sum() - counts[2].sum()
    else:
        correct = counts[0].sum()
    # float64 holds every count exactly (below 2**53), so one Allreduce carries them with the loss
    sums = np.concatenate([[_node_losses_sum(logits, labels, task) if entries else 0.0, entries, correct],
                           counts.reshape(-1)]).astype(np.float64)
    comm.Allreduce(MPI.IN_PLACE, sums, op=MPI.SUM)
    keys = ["acc", "loss"] + ([metric_key(metric)] if metric != "acc" else [])
    if sums[1] == 0:
        return dict.fromkeys(keys)
    result = {"acc": float(sums[2] / sums[1]), "loss": float(sums[0] / sums[1])}
    if metric in ("f1-micro", "f1-macro"):
        micro, macro = _f1_scores(sums[3:].reshape(3, -1))
        result[metric_key(metric)] = micro if metric == "f1-micro" else macro
    elif metric == "roc-auc":
        areas = roc_auc(*_ranking_columns(logits, labels, task), comm)
        result["roc_auc"] = float(np.nanmean(areas)) if np.isfinite(areas).any() else None
    return result


def class_weights(labels, task, num_classes, comm) -> np.ndarray:
    """Collective over comm. ``balanced`` loss weights from the training labels of every rank.

    Parameters
    ----------
    labels : ndarray
        This rank's training nodes' labels ([n] or [n, C]); every training node on exactly one rank.
    task : str
    num_classes : int
    comm : MPI communicator

    Returns
    -------
    ndarray [num_classes] of float32
        Single-label: class c weighs n / (K n_c) over n training nodes of K present classes
        (so the mean weight of a training node is 1); 1 for a class without training nodes.
        Multi-label: each label's positive term weighs negatives / positives (1 without positives).
    """
    MPI = mpi()
    if task == "multilabel":
        counts = np.concatenate([[labels.shape[0]], (labels > 0).sum(0)]).astype(np.int64)
        comm.Allreduce(MPI.IN_PLACE, counts, op=MPI.SUM)
        positives = counts[1:]
        weights = np.where(positives > 0, (counts[0] - positives) / np.maximum(positives, 1), 1.0)
        return weights.astype(np.float32)
    counts = np.bincount(labels, minlength=num_classes)[:num_classes].astype(np.int64)
    comm.Allreduce(MPI.IN_PLACE, counts, op=MPI.SUM)
    present = counts > 0
    weights = np.where(present, counts.sum() / (max(int(present.sum()), 1) * np.maximum(counts, 1)), 1.0)
    return weights.astype(np.float32)


class TrainingLoss:
    """Local. A task's training loss, optionally class-weighted (see :func:`class_weights`).

    Single-label: cross-entropy, each node's term times its class's weight, divided by the
    batch's node count (not by the weights' sum), so the mean over ranks of equal batches is
    the whole batch's loss, as without weights. Multi-label: binary cross-entropy with logits,
    the weights scaling each label's positive term, averaged over (node, label) entries.
    """

    def __init__(self, task, weight=None):
        import torch  # deferred: the flag parser imports this module for METRICS, without torch

        self.task = task
        self.weight = None if weight is None else torch.as_tensor(weight, dtype=torch.float32)

    def __call__(self, logits, labels):
        """Local. ``(loss, correct, seen)`` of a batch: the loss tensor to back-propagate, and the
        entries predicted right (a tensor: read it after backward, so a GPU step is not waited for
        before its backward is queued) out of ``seen`` (nodes; multi-label: node-label entries)."""
        from torch.nn import functional as F  # deferred: as in __init__

        seen = labels.numel()
        if not seen:
            return logits.sum() * 0.0, 0.0, 0  # a padding step: no seeds on this rank
        if self.task == "multilabel":
            loss = F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype), pos_weight=self.weight)
            return loss, ((logits > 0) == (labels > 0)).sum(), seen
        labels = labels.long()
        if self.weight is None:
            loss = F.cross_entropy(logits, labels)
        else:
            loss = (F.cross_entropy(logits, labels, reduction="none") * self.weight[labels]).mean()
        return loss, (logits.argmax(1) == labels).sum(), seen

    def batch(self, logits, batch):
        """Local. :meth:`__call__` on a loaded batch's labels. A batch whose sampler weighs its
        nodes (``extra["loss_weight"]``, GraphSAINT's normalisation) gets the weighted sum of the
        per-node losses instead of their mean."""
        node_weight = batch.extra.get("loss_weight")
        if node_weight is None:
            return self(logits, batch.label)
        return self.weighted(logits, batch.label, node_weight)

    def weighted(self, logits, labels, node_weight):
        """Local. ``(loss, correct, seen)`` with the loss ``sum_v node_weight[v] * loss_v`` (a
        multi-label node's loss the mean over its labels), class weights applied as in :meth:`__call__`."""
        from torch.nn import functional as F  # deferred: as in __init__

        seen = labels.numel()
        if not seen:
            return logits.sum() * 0.0, 0.0, 0
        if self.task == "multilabel":
            per_node = F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype), pos_weight=self.weight,
                                                          reduction="none").mean(1)
            return (per_node * node_weight).sum(), ((logits > 0) == (labels > 0)).sum(), seen
        labels = labels.long()
        per_node = F.cross_entropy(logits, labels, reduction="none")
        if self.weight is not None:
            per_node = per_node * self.weight[labels]
        return (per_node * node_weight).sum(), (logits.argmax(1) == labels).sum(), seen
