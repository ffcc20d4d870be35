"""Multi-label node classification (label [N, C] of 0/1) from the graph to the evaluated checkpoint."""
import os

import numpy as np
import pytest

from hpcgnn.runtime.errors import InputError
from hpcgnn.testing.graphs import clustered_graph
from tests.training.test_metrics import reference_f1

#: label j of a node: cluster j (j < 4), clusters 0-1, clusters 1-3
CLUSTER_LABELS = np.array([[1, 0, 0, 0, 1, 0],
                           [0, 1, 0, 0, 1, 1],
                           [0, 0, 1, 0, 0, 1],
                           [0, 0, 0, 1, 0, 1]])


def multilabel_graph(num_nodes=400):
    graph = clustered_graph(num_nodes=num_nodes, num_clusters=4, avg_degree=8, edge_field=False)
    cluster = graph.ndata["label"]
    graph.ndata["label"] = CLUSTER_LABELS[cluster].astype(np.int64)
    graph.ndata["feat"][:, :4] += np.eye(4, dtype=np.float32)[cluster]  # a weak hint; neighbours sharpen it
    return graph


def test_validate_accepts_0_1_label_matrices_only():
    graph = multilabel_graph(200)
    assert graph.validate() is graph
    outside = ~(graph.ndata["train_mask"] | graph.ndata["val_mask"] | graph.ndata["test_mask"])
    graph.ndata["train_mask"] &= ~outside
    graph.ndata["label"][np.flatnonzero(outside)[:3]] = -1  # unlabelled rows outside every split
    graph.validate()
    graph.ndata["label"][np.flatnonzero(graph.ndata["train_mask"])[0], 2] = 2
    with pytest.raises(InputError, match="field 'label'.*must be 0 or 1.*value 2"):
        graph.validate()
    graph.ndata["label"] = np.zeros((200, 0), dtype=np.int64)
    with pytest.raises(InputError, match="at least one column"):
        graph.validate()


def test_a_random_split_draws_whole_labelled_rows():
    from hpcgnn.prep.transform import apply_split

    graph = multilabel_graph(200)
    graph.ndata["label"][:10] = -1
    split = apply_split(graph, "0.5,0.25,0.25", seed=0)
    masks = [split.ndata[m] for m in ("train_mask", "val_mask", "test_mask")]
    assert sum(int(m.sum()) for m in masks) == 190 and not any(m[:10].any() for m in masks)
    with pytest.raises(InputError, match="--split.*per-class"):
        apply_split(graph, "per-class:5,5")


@pytest.mark.mpi(sizes=(2,))
def test_multilabel_training_beats_trivial_predictors_and_evaluates_from_its_checkpoint(nranks, comm, shared_tmp):
    from hpcgnn import DistGraph
    from hpcgnn.prep.partition import partition_graph
    from hpcgnn.tasks.inference import layerwise_inference
    from hpcgnn.training.config import parse_evaluate_config, parse_train_config
    from hpcgnn.training.evaluate import evaluate_checkpoint
    from hpcgnn.training.loop import run

    graph = multilabel_graph()
    path, checkpoints = os.path.join(shared_tmp, "multilabel"), os.path.join(shared_tmp, "ck")
    if comm.rank == 0:
        partition_graph(graph, path, nranks, "metis")
    comm.barrier()
    args = parse_train_config(["--data", path, "--hidden", "16", "--fanouts", "5,5", "--batch-size", "40",
                       "--epochs", "6",
                       "--lr", "0.02", "--dropout", "0", "--no-progress", "--prefetch", "0", "--eval-every", "3",
                       "--checkpoint-dir", checkpoints, "--metric", "f1-macro", "--feature-scale", "none"])
    model, history = run(args, comm)
    last = history[-1]
    assert {"test_f1_macro", "val_f1_macro", "test_acc", "test_loss"} <= set(last)

    with DistGraph(path, comm) as dist:  # the 2-D labels came through partitioning, by original id
        start, end = dist.local_nodes
        assert np.array_equal(dist.ndata["label"].local, graph.ndata["label"][dist.orig_id])
        logits = layerwise_inference(model, dist).numpy()
        test = dist.ndata["test_mask"].local.astype(bool)
        rows = comm.allgather((logits[test], dist.ndata["label"].local[test]))
    scores, labels = (np.concatenate(part) for part in zip(*rows))
    actual = labels == 1
    micro, macro = reference_f1(scores > 0, actual)
    assert last["test_f1_macro"] == pytest.approx(macro, abs=1e-12)
    assert last["test_acc"] == pytest.approx(float(((scores > 0) == actual).mean()), abs=1e-12)
    train_labels = graph.ndata["label"][graph.ndata["train_mask"]]
    trivial = max(reference_f1(np.ones_like(actual), actual)[0],  # every label everywhere
                  reference_f1(np.broadcast_to(train_labels.mean(0) > 0.5, actual.shape), actual)[0])  # majority
    assert micro > trivial + 0.2, (micro, trivial)

    evaluate_args = ["--data", path, "--checkpoint", checkpoints, "--latest"]  # the last model, as above
    reported = evaluate_checkpoint(parse_evaluate_config(evaluate_args), comm)
    assert reported["test_f1_macro"] == pytest.approx(macro, abs=1e-12)  # the metric the checkpoint recorded
    reported = evaluate_checkpoint(parse_evaluate_config(evaluate_args + ["--metric", "f1-micro"]), comm)
    assert reported["test_f1_micro"] == pytest.approx(micro, abs=1e-12) and "test_f1_macro" not in reported
    reported = evaluate_checkpoint(parse_evaluate_config(evaluate_args + ["--metric", "roc-auc"]), comm)
    assert 0.9 < reported["test_roc_auc"] <= 1.0
    with pytest.raises(InputError, match="--metric.*multi-label.*value acc"):
        evaluate_checkpoint(parse_evaluate_config(evaluate_args + ["--metric", "acc"]), comm)
