"""Distributed metrics against straightforward one-process references, and the training loss of
each task."""
import numpy as np
import pytest

from hpcgnn.runtime.errors import InputError
from hpcgnn.tasks.metrics import (
    TrainingLoss,
    choose_metric,
    class_weights,
    roc_auc,
    split_metrics,
    task_of,
)


def reference_auc(scores, positive):
    """Every (positive, negative) pair: 1 when the positive scores higher, 1/2 on a tie."""
    pos, neg = scores[positive], scores[~positive]
    if not pos.size or not neg.size:
        return np.nan
    return ((pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()) / (pos.size * neg.size)


def reference_f1(predicted, actual):
    """``(micro, macro)`` from boolean [n, C] predictions and truths, class by class."""
    per_class, tp_all, fp_all, fn_all = [], 0, 0, 0
    for c in range(actual.shape[1]):
        tp = int((predicted[:, c] & actual[:, c]).sum())
        fp = int((predicted[:, c] & ~actual[:, c]).sum())
        fn = int((~predicted[:, c] & actual[:, c]).sum())
        tp_all, fp_all, fn_all = tp_all + tp, fp_all + fp, fn_all + fn
        if tp + fp + fn:
            per_class.append(2 * tp / (2 * tp + fp + fn))
    return 2 * tp_all / (2 * tp_all + fp_all + fn_all), float(np.mean(per_class))


def softmax(z):
    e = np.exp(z - z.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def reference_metrics(logits, labels, task):
    """acc, loss, f1-micro, f1-macro and roc-auc of the whole split, in one process."""
    num_classes = logits.shape[1]
    if task == "multilabel":
        actual, predicted = labels == 1, logits > 0
        prob = 1 / (1 + np.exp(-logits))
        loss = -np.mean(np.where(actual, np.log(prob), np.log(1 - prob)))
        acc = float((predicted == actual).mean())
        scores = logits
    else:
        actual = labels[:, None] == np.arange(num_classes)
        predicted = logits.argmax(1)[:, None] == np.arange(num_classes)
        prob = softmax(logits)
        loss = -np.mean(np.log(prob[np.arange(len(labels)), labels]))
        acc = float((logits.argmax(1) == labels).mean())
        scores = prob
    micro, macro = reference_f1(predicted, actual)
    if task == "binary":
        auc = reference_auc(prob[:, 1], labels == 1)
    else:
        auc = np.nanmean([reference_auc(scores[:, c], actual[:, c]) for c in range(num_classes)])
    return {"acc": acc, "loss": loss, "f1_micro": micro, "f1_macro": macro, "roc_auc": auc}


def cases():
    """(name, task, logits, labels): imbalanced binary, multi-class with a class no node has,
    multi-label with a label no node has and one every node has."""
    rng = np.random.default_rng(7)
    n = 301
    binary_labels = (rng.random(n) < 0.07).astype(np.int64)
    binary = rng.standard_normal((n, 2)).astype(np.float32)
    binary[:, 1] += 1.5 * binary_labels
    multiclass_labels = rng.choice([0, 1, 2, 4], n, p=[0.5, 0.3, 0.15, 0.05])  # class 3: no node
    multiclass = rng.standard_normal((n, 5)).astype(np.float32)
    multiclass[np.arange(n), multiclass_labels] += 1.0
    multiclass[:, 3] -= 10.0  # never predicted either: class 3 has no F1 and no ROC curve
    multilabel_labels = (rng.random((n, 6)) < [0.3, 0.05, 0.5, 0.1, 0.0, 1.0]).astype(np.int64)
    multilabel = (rng.standard_normal((n, 6)) + 1.2 * (2 * multilabel_labels - 1)).astype(np.float32)
    return [("binary", "binary", binary, binary_labels), ("multiclass", "multiclass", multiclass, multiclass_labels),
            ("multilabel", "multilabel", multilabel, multilabel_labels)]


def my_rows(n, comm):
    """Uneven contiguous shares: rank 0 gets about a third."""
    cuts = [0] + [n // 3 + (n - n // 3) * (r - 1) // (comm.size - 1) for r in range(1, comm.size)] + [n]
    return slice(cuts[comm.rank], cuts[comm.rank + 1])


@pytest.mark.mpi(sizes=(1, 2))
def test_metrics_over_ranks_equal_one_process_references(nranks, comm):
    for name, task, logits, labels in cases():
        want = reference_metrics(logits.astype(np.float64), labels, task)
        mine = my_rows(len(labels), comm)
        for metric in ("f1-micro", "f1-macro", "roc-auc") + (("acc",) if task != "multilabel" else ()):
            got = split_metrics(logits[mine], labels[mine], task, metric, comm)
            key = metric.replace("-", "_")
            assert got[key] == pytest.approx(want[key], abs=1e-12), (name, metric)
            assert got["acc"] == pytest.approx(want["acc"], abs=1e-12), name
            assert got["loss"] == pytest.approx(want["loss"], rel=1e-9), name
    # a split with no node on any rank
    empty = split_metrics(np.zeros((0, 3), np.float32), np.zeros(0, np.int64), "multiclass", "roc-auc", comm)
    assert empty == {"acc": None, "loss": None, "roc_auc": None}


@pytest.mark.mpi(sizes=(1, 2))
def test_roc_auc_is_exact_with_ties_and_skewed_ranks(nranks, comm):
    rng = np.random.default_rng(3)
    n, k = 2000, 3
    scores = np.round(rng.standard_normal((n, k)), 1)  # about 60 distinct values: ties everywhere
    positive = rng.random((n, k)) < [0.5, 0.02, 0.0]  # the last column has no positive: no area
    scores[:, 0] += positive[:, 0]
    # rank 0 holds the 1900 lowest-scored rows of column 0: its value ranges are far from even
    order = np.argsort(scores[:, 0], kind="stable")
    mine = order[:1900] if comm.rank == 0 else order[1900:]
    if comm.size == 1:
        mine = order
    got = roc_auc(scores[mine], positive[mine], comm)
    want = [reference_auc(scores[:, c], positive[:, c]) for c in range(k)]
    assert got[:2] == pytest.approx(want[:2], abs=1e-15) and np.isnan(got[2]) and np.isnan(want[2])


@pytest.mark.mpi(sizes=(1, 2))
def test_balanced_class_weights_count_every_rank(nranks, comm):
    labels = np.array([0] * 60 + [1] * 30 + [3] * 10)  # class 2: no training node
    mine = my_rows(len(labels), comm)
    weights = class_weights(labels[mine], "multiclass", 4, comm)
    # n / (K n_c) with n = 100 nodes of K = 3 present classes
    assert weights == pytest.approx([100 / (3 * 60), 100 / (3 * 30), 1.0, 100 / (3 * 10)])
    assert np.mean(weights[labels]) == pytest.approx(1.0)
    multilabel = np.zeros((100, 3), dtype=np.int64)
    multilabel[:20, 0] = 1
    multilabel[:, 1] = 1
    assert class_weights(multilabel[mine], "multilabel", 3, comm) == pytest.approx([80 / 20, 0.0, 1.0])


def test_the_weighted_loss_scales_each_node_by_its_class_weight():
    import torch
    from torch.nn import functional as F

    torch.manual_seed(0)
    logits = torch.randn(8, 3)
    labels = torch.tensor([0, 0, 0, 0, 0, 1, 2, 2])
    weight = np.array([0.5, 2.0, 3.0], dtype=np.float32)
    loss, correct, seen = TrainingLoss("multiclass", weight)(logits, labels)
    per_node = F.cross_entropy(logits, labels, reduction="none")
    assert float(loss) == pytest.approx(float((per_node * torch.from_numpy(weight)[labels]).sum() / 8), rel=1e-6)
    assert float(TrainingLoss("multiclass")(logits, labels)[0]) == pytest.approx(float(per_node.mean()), rel=1e-6)
    assert (correct, seen) == (float((logits.argmax(1) == labels).sum()), 8)
    targets = torch.tensor([[1, 0], [0, 0], [1, 1]])
    scores = torch.randn(3, 2)
    loss, correct, seen = TrainingLoss("multilabel", np.array([4.0, 1.0]))(scores, targets)
    pos_weight = torch.tensor([4.0, 1.0])
    by_hand = -(pos_weight * targets * F.logsigmoid(scores) + (1 - targets) * F.logsigmoid(-scores)).mean()
    assert float(loss) == pytest.approx(float(by_hand), rel=1e-6) and seen == 6
    assert correct == float(((scores > 0) == (targets > 0)).sum())


def test_the_task_decides_the_default_metric_and_what_applies():
    assert task_of((10,), 5) == "multiclass" and task_of((10,), 2) == "binary" and task_of((10, 3), 3) == "multilabel"
    assert [choose_metric(None, t) for t in ("multiclass", "binary", "multilabel")] == ["acc", "roc-auc", "f1-micro"]
    assert choose_metric("f1-macro", "binary") == "f1-macro"
    with pytest.raises(InputError, match="--metric.*multi-label.*value acc"):
        choose_metric("acc", "multilabel", "meta.json")


def imbalanced_binary_graph():
    """One node in eight is positive (cluster 0 of 8); a weak feature hint, sharpened by neighbours."""
    from hpcgnn.testing.graphs import clustered_graph

    graph = clustered_graph(num_nodes=500, num_clusters=8, avg_degree=8, edge_field=False)
    graph.ndata["label"] = (graph.ndata["label"] == 0).astype(np.int64)
    graph.ndata["feat"][:, 0] += 0.7 * graph.ndata["label"]
    return graph


def test_a_binary_run_reports_roc_auc_and_balanced_weights_predict_the_minority_more(tmp_path):
    import json

    from hpcgnn import DistGraph
    from hpcgnn.prep.partition import partition_graph
    from hpcgnn.runtime.comm import world
    from hpcgnn.tasks.inference import layerwise_inference
    from hpcgnn.training.config import parse_train_config
    from hpcgnn.training.loop import run

    partition_graph(imbalanced_binary_graph(), tmp_path / "d", 1, "metis")
    predicted_positive = {}
    for weighting in ("none", "balanced"):
        metrics = tmp_path / f"{weighting}.jsonl"
        model, history = run(parse_train_config(["--data", str(tmp_path / "d"), "--hidden", "16", "--fanouts", "5,5",
                                         "--batch-size", "50", "--epochs", "4", "--lr", "0.01", "--no-progress",
                                         "--prefetch", "0", "--eval-every", "2", "--class-weight", weighting,
                                         "--metrics-file", str(metrics), "--feature-scale", "none"]), world())
        with DistGraph(str(tmp_path / "d"), world()) as graph:
            logits = layerwise_inference(model, graph).numpy()
            test = graph.ndata["test_mask"].local.astype(bool)
            labels = graph.ndata["label"].local.copy()  # the window is freed with the graph
        predicted_positive[weighting] = float((logits.argmax(1) == 1).mean())
        want = reference_auc(softmax(logits[test].astype(np.float64))[:, 1], labels[test] == 1)
        assert history[-1]["test_roc_auc"] == pytest.approx(want, abs=1e-12)
        final = [json.loads(line) for line in open(metrics)][-1]
        assert final["metric"] == "roc-auc" and final["test_roc_auc"] == history[-1]["test_roc_auc"]
        best = max((r for r in history if r.get("val_roc_auc") is not None), key=lambda r: r["val_roc_auc"])
        assert (final["best_val_roc_auc"], final["test_roc_auc_at_best_val"], final["best_roc_auc_epoch"]) == (
            best["val_roc_auc"], best["test_roc_auc"], best["epoch"])
        assert {"test_acc_at_best_val", "best_val_loss"} <= set(final)  # the accuracy and loss selections stay
    # unweighted, the model nearly always says "negative" (accuracy near the majority share);
    # inverse-frequency weights make the minority's errors count as much as the majority's
    assert predicted_positive["balanced"] > predicted_positive["none"] + 0.05, predicted_positive


def test_model_selection_on_the_chosen_metric():
    from hpcgnn.training.reporting import metric_selection

    history = [
        {"epoch": 1, "val_acc": 0.90, "test_acc": 0.90, "val_roc_auc": 0.70, "test_roc_auc": 0.65},
        {"epoch": 2, "val_acc": 0.85, "test_acc": 0.86, "val_roc_auc": 0.92, "test_roc_auc": 0.88},
        {"epoch": 3},  # not evaluated
        {"epoch": 4, "val_acc": 0.88, "test_acc": 0.87, "val_roc_auc": 0.80, "test_roc_auc": 0.90},
    ]
    assert metric_selection(history, "roc-auc") == {
        "metric": "roc-auc", "test_roc_auc": 0.90, "val_roc_auc": 0.80,  # the last evaluation
        "best_val_roc_auc": 0.92, "test_roc_auc_at_best_val": 0.88, "best_roc_auc_epoch": 2}
    assert metric_selection(history, "acc") == {"metric": "acc"}  # selection() has the accuracy keys
    history[1]["val_roc_auc"] = None  # e.g. a validation split of one class: no ROC curve
    assert metric_selection(history, "roc-auc")["best_roc_auc_epoch"] == 4
