"""Link-prediction metrics of an evaluation split, computed where the edges are.

Each rank holds the evaluation edges it owns: ``pos`` [n], the score (a logit) of each
positive edge, and ``neg`` [n, K], the scores of that positive's K fixed negatives (the same
source and a corrupted destination, or uniform pairs, as the dataset was partitioned). ``n``
may differ between ranks and be 0 on some.

Metrics (record keys ``{split}_{name}``, e.g. ``val_auc``, ``test_hits@10``):

* ``auc``: ROC-AUC of every positive against every one of the n K negatives; a tie counts one
  half (the Mann-Whitney statistic). Computed by :func:`hpcgnn.tasks.metrics.roc_auc`.
* ``ap``: average precision of the positives against the *first* negative of each positive
  only: one negative per positive, the balanced set of the GAE protocol, so the figure does not
  drift with K. It is the mean over positives i of precision(s_i) = #{positives scoring
  >= s_i} / #{items scoring >= s_i}: every item tied with s_i counts as ranked above it, which
  is what scikit-learn's ``average_precision_score`` gives with ties (its precision at each
  distinct threshold, weighted by the recall gained there).
* ``mrr``: the mean over positives of 1 / rank among the positive's own K negatives, rank =
  1 + (#negatives above + #negatives at or above) / 2: OGB's mean of the optimistic and the
  pessimistic rank, so a tie is neither rewarded nor punished fully.
* ``hits@k``: OGB's pool protocol: the k-th highest score among *all* negatives of the split
  (every rank, every column) is the bar; hits@k is the fraction of positives scoring strictly
  above it, and 1 when the split has fewer than k negatives.
* ``loss``: mean binary cross-entropy with logits over every positive (label 1) and negative
  (label 0) score, in the softplus form that never overflows.

Why each is exact on any number of ranks, without gathering the scores on one rank:

* ``mrr`` and ``loss`` are sums of per-edge terms, each computed where its positive and its
  negatives live: one Allreduce.
* ``hits@k``: the global top k negatives are among the union of every rank's local top k, so
  each rank contributes at most max(k) scores (one Allgatherv), and every rank picks the same
  bar from the same gathered scores.
* ``auc`` and ``ap`` depend on how every score compares with every other. Both redistribute
  their scores by value range (``roc_auc`` all n (K + 1) of them, ``ap`` the balanced set),
  the range bounds from quantiles of every rank's scores: rank r then holds the r-th lowest
  range, every copy of one value on one rank, so a tie is resolved where it sits. For ``ap``
  a rank then counts, at each of its values, the positives and the items at or above it in
  its range, and adds those of the higher ranges: the sum of the higher ranks' totals (a
  reverse exclusive scan, from one Allgather of two counts per rank). Each score moves once,
  as in a distributed sort.

Counts are exact integers whatever the rank count; only the final float sums (of precisions,
reciprocal ranks and losses) are added in an order that depends on it, within rounding.
"""
from __future__ import annotations

import numpy as np

from hpcgnn.runtime.collectives import exchange_by_owner
from hpcgnn.runtime.comm import mpi
from hpcgnn.tasks.metrics import LINK_METRICS, range_bounds, roc_auc  # noqa: F401 (LINK_METRICS: re-exported)

#: the K of every hits@K :func:`link_metrics` reports by default (LINK_METRICS names them)
_DEFAULT_HITS = (10, 50, 100)


def link_metrics(pos, neg, comm, hits=_DEFAULT_HITS) -> dict:
    """Collective over comm. One split's link metrics over all ranks, from this rank's rows.

    Parameters
    ----------
    pos : ndarray [n]
        Scores (logits) of this rank's positive edges; higher means more likely an edge.
    neg : ndarray [n, K]
        Row i: the scores of positive i's K negatives. K is the same on every rank that has
        rows (a rank with n = 0 may pass any [0, K']).
    comm : MPI communicator
    hits : sequence of int
        The k of each ``hits@k`` (the same on every rank).

    Returns
    -------
    dict
        ``auc``, ``ap``, ``mrr``, ``hits@{k}`` for k in ``hits``, and ``loss``, as floats,
        identical on every rank (see the module docstring). Every value is None when the split
        has no positive on any rank; ``auc`` is also None when it has no negative (K = 0).

    Raises
    ------
    ValueError
        ``neg`` not one row per positive, or a k below 1 (before any communication).
    """
    MPI = mpi()
    pos, neg, hits = _checked(pos, neg, hits)
    keys = ["auc", "ap", "mrr", *(f"hits@{k}" for k in hits), "loss"]
    n, negatives = pos.shape[0], neg.size
    sizes = np.zeros((comm.size, 2), dtype=np.int64)
    comm.Allgather(np.array([n, negatives], dtype=np.int64), sizes)
    total_pos, total_neg = (int(x) for x in sizes.sum(0))
    if total_pos == 0:
        return dict.fromkeys(keys)

    bars = _hits_bars(neg.reshape(-1), sizes[:, 1], hits, comm)
    area = roc_auc(np.concatenate([pos, neg.reshape(-1)])[:, None],
                   np.concatenate([np.ones(n, bool), np.zeros(negatives, bool)])[:, None], comm)[0]

    # K = 0 leaves the positives alone in the balanced set: each has precision 1
    first = neg[:, 0] if neg.shape[1] else np.zeros(0)
    precision_sum = _precision_sum(np.concatenate([pos, first]),
                                   np.concatenate([np.ones(n, bool), np.zeros(first.shape[0], bool)]), comm)

    above = (neg > pos[:, None]).sum(1)
    at_or_above = (neg >= pos[:, None]).sum(1)
    reciprocal = 1.0 / (1.0 + 0.5 * (above + at_or_above))
    loss = _softplus(-pos).sum() + _softplus(neg).sum()
    hit_counts = [float((pos > bar).sum()) if bar is not None else 0.0 for bar in bars]
    sums = np.array([precision_sum, reciprocal.sum(), loss, *hit_counts], dtype=np.float64)
    comm.Allreduce(MPI.IN_PLACE, sums, op=MPI.SUM)

    result = {"auc": float(area) if np.isfinite(area) else None,
              "ap": float(sums[0] / total_pos),
              "mrr": float(sums[1] / total_pos)}
    for k, bar, count in zip(hits, bars, sums[3:]):
        result[f"hits@{k}"] = 1.0 if bar is None else float(count / total_pos)
    result["loss"] = float(sums[2] / (total_pos + total_neg))
    return {key: result[key] for key in keys}


def _checked(pos, neg, hits):
    """``(pos [n], neg [n, K], hits)`` as float64 arrays and a tuple of ints; ValueError if malformed."""
    pos = np.asarray(pos, dtype=np.float64).reshape(-1)
    neg = np.asarray(neg, dtype=np.float64)
    if neg.ndim != 2 or neg.shape[0] != pos.shape[0]:
        raise ValueError(f"neg must be [n, K] with n = {pos.shape[0]} positives; got shape {neg.shape}")
    hits = tuple(int(k) for k in hits)
    if any(k < 1 for k in hits):
        raise ValueError(f"every k of hits@k must be at least 1; got {hits}")
    return pos, neg, hits


def _softplus(x) -> np.ndarray:
    """Local. log(1 + e^x), without overflow for large x nor loss of precision for small."""
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


def _hits_bars(neg, neg_counts, hits, comm) -> list:
    """Collective over comm. Per k of ``hits``, the k-th highest of all ranks' negatives
    ``neg`` (flat), or None when there are fewer than k of them (``neg_counts`` per rank)."""
    if not hits:
        return []
    top = max(hits)
    # a rank's own top `top` scores: the global top `top` is among their union
    kept = np.minimum(neg_counts, top)
    local = np.partition(neg, neg.shape[0] - top)[neg.shape[0] - top:] if neg.shape[0] > top else neg
    pool = np.empty(int(kept.sum()), dtype=np.float64)
    comm.Allgatherv(np.ascontiguousarray(local), [pool, [int(c) for c in kept]])
    pool = np.sort(pool)[::-1]
    total = int(neg_counts.sum())
    return [float(pool[k - 1]) if k <= total else None for k in hits]


def _precision_sum(value, is_pos, comm) -> float:
    """Collective over comm. This rank's share of the sum, over every rank's positives i, of
    #{positives with value >= value_i} / #{items with value >= value_i}."""
    if comm.size > 1:
        bounds = range_bounds(value[:, None], comm)[0]
        # side="right" on the same bounds everywhere: every copy of a value lands on one rank
        owner = np.searchsorted(bounds, value, side="right")
        value, is_pos = exchange_by_owner(comm, owner, value, is_pos)
    order = np.argsort(-value, kind="stable")
    value, is_pos = value[order], is_pos[order]
    ends = np.ones(value.shape[0], dtype=bool)  # last item of each run of one value
    ends[:-1] = value[1:] != value[:-1]
    pos_at_or_above = np.cumsum(is_pos)[ends]
    items_at_or_above = np.flatnonzero(ends) + 1
    run_pos = np.diff(pos_at_or_above, prepend=0)
    # the ranges of higher ranks hold only higher values: add all their items
    here = np.zeros((comm.size, 2), dtype=np.int64)
    comm.Allgather(np.array([is_pos.sum(), value.shape[0]], dtype=np.int64), here)
    higher_pos, higher_items = (int(x) for x in here[comm.rank + 1:].sum(0))
    precision = (pos_at_or_above + higher_pos) / (items_at_or_above + higher_items)
    return float((run_pos * precision).sum())
