"""Distributed link-prediction metrics against brute-force one-process references, with ties,
empty ranks, uneven and value-sorted slices, and K = 1."""
import math

import numpy as np
import pytest

from hpcgnn.tasks.link_metrics import LINK_METRICS, link_metrics


def reference_auc(pos, neg):
    """Every (positive, negative) pair over all columns: 1 when the positive is higher, 1/2 on a tie."""
    flat = neg.reshape(-1)
    if not flat.size:
        return None
    return ((pos[:, None] > flat[None, :]).sum() + 0.5 * (pos[:, None] == flat[None, :]).sum()) / (pos.size * flat.size)


def reference_ap(pos, first):
    """The definition, one positive at a time: positives at or above it over items at or above it."""
    items = [(float(s), True) for s in pos] + [(float(s), False) for s in first]
    total = 0.0
    for s in pos:
        at_or_above = [is_pos for value, is_pos in items if value >= s]
        total += sum(at_or_above) / len(at_or_above)
    return total / len(pos)


def reference_ap_steps(pos, first):
    """scikit-learn's formula: over distinct thresholds from the top, the recall gained there
    times the precision at that threshold (an independent route to the same number)."""
    values = np.concatenate([pos, first])
    labels = np.concatenate([np.ones(len(pos)), np.zeros(len(first))])
    ap, recall_before = 0.0, 0.0
    for t in np.unique(values)[::-1]:
        chosen = values >= t
        recall = labels[chosen].sum() / len(pos)
        ap += (recall - recall_before) * labels[chosen].sum() / chosen.sum()
        recall_before = recall
    return ap


def reference_mrr(pos, neg):
    total = 0.0
    for p, row in zip(pos, neg):
        optimistic = sum(1 for s in row if s > p)
        pessimistic = sum(1 for s in row if s >= p)
        total += 1.0 / (1 + (optimistic + pessimistic) / 2)
    return total / len(pos)


def reference_hits(pos, neg, k):
    pool = sorted(neg.reshape(-1).tolist(), reverse=True)
    if len(pool) < k:
        return 1.0
    return sum(1 for p in pos if p > pool[k - 1]) / len(pos)


def reference_loss(pos, neg):
    # log(1 + e^-x) for label 1, log(1 + e^x) for label 0, through logaddexp rather than softplus
    terms = [np.logaddexp(0.0, -p) for p in pos] + [np.logaddexp(0.0, s) for s in neg.reshape(-1)]
    return math.fsum(terms) / len(terms)


def reference(pos, neg, hits):
    want = {"auc": reference_auc(pos, neg),
            "ap": reference_ap(pos, neg[:, 0] if neg.shape[1] else np.zeros(0)),
            "mrr": reference_mrr(pos, neg),
            "loss": reference_loss(pos, neg)}
    want.update({f"hits@{k}": reference_hits(pos, neg, k) for k in hits})
    return want


def cases():
    """(name, pos [n], neg [n, K], hits), every one from a fixed seed."""
    rng = np.random.default_rng(20240611)
    out = []
    # ties everywhere: pos equal to some of its own negatives and to other rows' first negatives
    out.append(("hand", np.array([2.0, 1.0, 1.0, 0.0, 3.0, 1.0]),
                np.array([[1.0, 2.0, 5.0], [3.0, 1.0, 1.0], [0.0, 0.0, 0.0],
                          [0.0, -1.0, 0.0], [3.0, 3.0, 2.0], [1.0, 1.0, 1.0]]), (1, 2, 3, 4, 9, 17, 18, 19)))
    n = 300
    out.append(("continuous", rng.normal(1.0, 1.0, n), rng.normal(0.0, 1.0, (n, 5)), (10, 50, 100)))
    # half steps: a few dozen distinct values, hits bars that positives tie with
    out.append(("half-steps", np.round(2 * rng.normal(0.5, 1.0, 400)) / 2,
                np.round(2 * rng.normal(0.0, 1.0, (400, 4))) / 2, (10, 50, 100)))
    out.append(("K=1", np.round(rng.normal(0.3, 1.0, 257), 1), np.round(rng.normal(0.0, 1.0, (257, 1)), 1),
                (1, 10, 50, 100)))
    # 14 negatives: hits@50 and hits@100 have no bar
    out.append(("few negatives", rng.normal(0.5, 1.0, 7), rng.normal(0.0, 1.0, (7, 2)), (10, 50, 100)))
    # logits whose exp overflows: the loss must stay finite and exact
    out.append(("extreme logits", rng.choice([-800.0, -30.0, 0.0, 40.0, 750.0], 50),
                rng.choice([-900.0, -1.0, 0.0, 1.0, 710.0], (50, 3)), (10, 50, 100)))
    return out


def layouts(n, pos, size, seed):
    """Per layout, every rank's rows: uneven contiguous slices of a random order (some ranks
    empty), and slices of the positives sorted by score (rank 0 holds the lowest), which makes
    the value ranges of the redistribution far from the rows' spread."""
    shares = {1: [[1]], 2: [[3, 1], [0, 1]], 4: [[0, 5, 1, 2], [6, 0, 0, 1]]}[size]
    orders = [np.random.default_rng(seed).permutation(n), np.argsort(pos, kind="stable")]
    for order in orders:
        for weights in shares:
            cuts = np.round(np.cumsum([0] + weights) / sum(weights) * n).astype(int)
            rows = [order[cuts[r]:cuts[r + 1]] for r in range(size)]
            assert np.array_equal(np.sort(np.concatenate(rows)), np.arange(n))
            yield rows


def assert_same_on_every_rank(got, comm):
    for other in comm.allgather(got):
        assert other == got


@pytest.mark.mpi(sizes=(1, 2, 4))
def test_link_metrics_over_ranks_equal_brute_force_and_hand_computed_references(nranks, comm):
    """Random cases against brute-force references under several row layouts, then hand-computed
    values with ties and empty splits (one launch per rank count)."""
    for seed, (name, pos, neg, hits) in enumerate(cases()):
        want = reference(pos, neg, hits)
        for layout, rows in enumerate(layouts(len(pos), pos, comm.size, seed)):
            mine = rows[comm.rank]
            got = link_metrics(pos[mine], neg[mine], comm, hits=hits)
            assert list(got) == ["auc", "ap", "mrr", *(f"hits@{k}" for k in hits), "loss"]
            for key, value in want.items():
                assert got[key] == pytest.approx(value, abs=1e-12, rel=1e-12), (name, layout, key)
            assert_same_on_every_rank(got, comm)
    hand_computed_values_with_ties_and_empty_splits(comm)


def hand_computed_values_with_ties_and_empty_splits(comm):
    """Collective over comm. Three positives dealt round-robin over the ranks (rank 3 of 4 gets none)."""
    # positives 2, 1, 1; first negatives 1, 3, 0. Balanced set from the top: 3- 2+ 1+ 1+ 1- 0-.
    # precision(2) = 1/2; precision(1) = 3/5 for both ones (the tied negative counts as above).
    pos = np.array([2.0, 1.0, 1.0])
    neg = np.array([[1.0, 2.0, 5.0], [3.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    mine = [r for r in range(3) if r % comm.size == comm.rank]  # rank 3 of 4: no row
    got = link_metrics(pos[mine], neg[mine], comm, hits=(1, 3, 4, 9, 10))
    # pairs: 2 beats six, ties one; each 1 beats three, ties three
    assert got["auc"] == pytest.approx((6.5 + 2 * 4.5) / 27, abs=1e-15)
    assert got["ap"] == pytest.approx((1 / 2 + 3 / 5 + 3 / 5) / 3, abs=1e-15)
    # ranks: 1 + (1 + 2) / 2, 1 + (1 + 3) / 2, 1 + (0 + 0) / 2
    assert got["mrr"] == pytest.approx((1 / 2.5 + 1 / 3 + 1) / 3, abs=1e-15)
    # the pool from the top: 5 3 2 1 1 1 0 0 0; a positive equal to the bar misses
    assert [got[f"hits@{k}"] for k in (1, 3, 4, 9, 10)] == pytest.approx([0.0, 0.0, 1 / 3, 1.0, 1.0], abs=1e-15)
    assert reference_ap(pos, neg[:, 0]) == pytest.approx(reference_ap_steps(pos, neg[:, 0]), abs=1e-15)

    # no negatives at all: no ROC curve; every positive is first in its row and the pool
    lonely = link_metrics(pos[mine], np.zeros((len(mine), 0)), comm, hits=(1,))
    assert lonely["auc"] is None and lonely["ap"] == lonely["mrr"] == lonely["hits@1"] == 1.0
    assert lonely["loss"] == pytest.approx(reference_loss(pos, np.zeros((3, 0))), abs=1e-15)

    empty = link_metrics(np.zeros(0), np.zeros((0, 4)), comm)
    assert empty == dict.fromkeys(["auc", "ap", "mrr", "hits@10", "hits@50", "hits@100", "loss"])


def test_the_ap_reference_agrees_with_the_threshold_formula_on_ties():
    for name, pos, neg, _ in cases():
        assert reference_ap(pos, neg[:, 0]) == pytest.approx(reference_ap_steps(pos, neg[:, 0]), abs=1e-12), name


def test_default_keys_and_shape_errors():
    from hpcgnn.runtime.comm import world

    comm = world()
    if comm.size != 1:
        pytest.skip("one process")
    got = link_metrics(np.array([1.0, 0.0]), np.array([[0.5], [0.5]]), comm)
    assert tuple(k for k in got if k != "loss") == LINK_METRICS
    with pytest.raises(ValueError, match="one row per positive|neg must be"):
        link_metrics(np.zeros(3), np.zeros((2, 4)), comm)
    with pytest.raises(ValueError, match="at least 1"):
        link_metrics(np.zeros(3), np.zeros((3, 4)), comm, hits=(0,))
