"""--refit-folds: the folds are stratified, disjoint, cover the labelled nodes and do not depend on
the rank count; the epoch count is the centre of the counts within one standard error of the best
mean validation value over the folds; the last run trains that many epochs on every labelled node;
its test figures are those of the average of the fold models' and its own class probabilities."""
import json
import os

import numpy as np
import pytest

from hpcgnn.training.refit import choose_epochs


def history(values, key="val_acc"):
    return [{"epoch": i + 1, key: v} for i, v in enumerate(values)]


def test_a_clear_peak_of_the_mean_over_the_folds_wins():
    # fold 1 peaks at epoch 1, fold 2 at epoch 3; the mean is best at epoch 2 and the folds agree there
    folds = [history([0.9, 0.8, 0.1]), history([0.1, 0.8, 0.7])]
    epochs, curve, _, error = choose_epochs(folds, "val_acc")
    assert error == 0.0  # the folds agree at epoch 2
    assert epochs == 2
    assert curve == [[1, pytest.approx(0.5)], [2, pytest.approx(0.8)], [3, pytest.approx(0.4)]]


def test_the_centre_of_the_counts_within_one_standard_error_of_the_best_wins():
    # best mean 0.9 at epoch 4, the folds' standard error there 0.1: epochs 3 to 8 are within it
    # (0.8 and above), epochs 1, 2 and 9 are not; the median of 3..8 is 5 (the lower of 5 and 6)
    fold_a = history([0.2, 0.5, 0.8, 1.0, 0.9, 0.9, 0.8, 0.9, 0.5])
    fold_b = history([0.2, 0.5, 0.8, 0.8, 0.8, 0.8, 0.8, 0.7, 0.5])
    assert choose_epochs([fold_a, fold_b], "val_acc")[0] == 5
    # the loss is minimised, and its spread counts the same way: 0.4 +- 0.1 at epoch 2 admits 1 to 3
    losses = [history([0.5, 0.3, 0.5, 0.9], "val_loss"), history([0.5, 0.5, 0.5, 0.9], "val_loss")]
    assert choose_epochs(losses, "val_loss")[0] == 2
    # one fold: no spread, so the median of the equal best values
    assert choose_epochs([history([0.5, 0.7, 0.6, 0.7, 0.7])], "val_acc")[0] == 4


def test_the_loss_curve_is_returned_beside_the_selected_value():
    both = [dict(r, val_loss=loss) for r, loss in zip(history([0.5, 0.7]), [1.0, 0.6])]
    assert choose_epochs([both], "val_acc")[2] == [[1, 1.0], [2, 0.6]]
    assert choose_epochs([history([0.5, 0.7])], "val_acc")[2] == []


def test_only_epochs_every_fold_evaluated_count():
    short = [{"epoch": 1, "val_acc": 0.1}, {"epoch": 2}, {"epoch": 3, "val_acc": 0.5}]  # epoch 2 not evaluated
    long = history([0.1, 0.99, 0.5, 0.99])  # epoch 4: past where the other fold stopped early
    epochs, curve, _, _ = choose_epochs([short, long], "val_acc")
    assert (epochs, [e for e, _ in curve]) == (3, [1, 3])
    with pytest.raises(ValueError, match="no epoch has val_acc in every fold"):
        choose_epochs([history([0.5]), [{"epoch": 1}]], "val_acc")


@pytest.mark.mpi(sizes=(2, 4))
def test_folds_are_stratified_disjoint_and_the_same_at_every_rank_count(nranks, comm, shared_tmp):
    from hpcgnn.graph import DistGraph, fold_of_nodes
    from hpcgnn.testing.datasets import make_dataset, partition_once

    path, graph = make_dataset(comm, shared_tmp, nranks, num_nodes=203, num_clusters=3)
    single = partition_once(comm, shared_tmp, graph, 1, "single")
    folds = 4

    def folds_by_orig_id(dataset, sub):
        dist = DistGraph(dataset, sub)
        pool = dist.ndata["train_mask"].local.astype(bool) | dist.ndata["val_mask"].local.astype(bool)
        fold = fold_of_nodes(dist, pool, folds, seed=7)
        rows = sub.gather((dist.orig_id.copy(), fold, dist.ndata["label"].local.copy(), pool))
        dist.close()
        return rows

    rows = folds_by_orig_id(path, comm)
    alone = comm.Split(0 if comm.rank == 0 else 1, comm.rank)
    reference = folds_by_orig_id(single, alone) if comm.rank == 0 else None
    alone.Free()
    if comm.rank == 0:
        orig, fold, label, pool = (np.concatenate(parts) for parts in zip(*rows))
        assert np.array_equal(fold >= 0, pool) and set(np.unique(fold[pool])) == set(range(folds))
        for c in np.unique(label[pool]):  # every fold holds each class's share, to within one node
            sizes = np.bincount(fold[pool & (label == c)], minlength=folds)
            assert sizes.max() - sizes.min() <= 1, (c, sizes)
        ref_orig, ref_fold = reference[0][0], reference[0][1]  # one rank, one part
        assert np.array_equal(fold[np.argsort(orig)], ref_fold[np.argsort(ref_orig)])


@pytest.mark.mpi(sizes=(2,))
def test_the_last_run_trains_the_chosen_epochs_on_every_labelled_node(nranks, comm, shared_tmp):
    from hpcgnn.testing.datasets import make_dataset
    from hpcgnn.training.config import parse_train_config
    from hpcgnn.training.loop import run
    from hpcgnn.training.reporting import FINAL_FIELDS, explain

    path, graph = make_dataset(comm, shared_tmp, nranks, num_nodes=300, p_inside=0.9)
    labelled = int(np.count_nonzero(graph.ndata["train_mask"] | graph.ndata["val_mask"]))
    metrics = os.path.join(shared_tmp, "refit.jsonl")
    flags = ["--data", path, "--hidden", "16", "--fanouts", "3,3", "--batch-size", "1000", "--no-progress",
             "--prefetch", "0", "--eval-every", "1", "--lr", "0.05", "--epochs", "20", "--refit-folds", "3",
             "--metrics-file", metrics]
    _, last = run(parse_train_config(flags), comm)
    if comm.rank == 0:
        with open(metrics) as fh:
            records = [json.loads(line) for line in fh]
        header, final = records[0], records[-1]
        refit = final["refit"]
        chosen, curve = refit["epochs"], refit["mean_curve"]
        assert header["config"]["evaluation"]["refit_folds"] == 3 and refit["folds"] == 3
        assert [e for e, _ in curve] == list(range(1, 21))
        best = max(value for _, value in curve)
        near = [e for e, value in curve if value >= best - refit["standard_error"]]
        assert chosen == near[(len(near) - 1) // 2]  # the median of the counts within one standard error
        assert len(refit["mean_loss_curve"]) == len(curve)
        assert len(last) == chosen == final["epochs"] and len(records) == chosen + 2
        assert [r["train_seen"] for r in last] == [labelled] * chosen  # training and validation nodes train
        assert all(r["val_acc"] is None for r in last) and last[-1]["test_acc"] > 0.5
        assert explain("refit", FINAL_FIELDS)


class LastTestRows:
    """The test's own reading of a run: the logits and labels of this rank's test nodes at the
    run's last evaluation (the loop hands every evaluation's rows to a run's votes)."""

    def check(self, session):
        """Nothing to refuse."""

    def keep(self, epoch, rows, session):
        mask = session.graph.ndata["test_mask"].local.astype(bool)
        self.logits = np.asarray(rows, dtype=np.float64)[mask]
        self.labels = np.asarray(session.graph.ndata["label"].local)[mask]

    def final(self, session, record):
        return record


def softmax(logits):
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.mark.mpi(sizes=(1, 2))
def test_the_ensemble_scores_the_mean_probabilities_of_the_fold_models_and_the_last_run(nranks, comm, shared_tmp):
    from dataclasses import replace

    from hpcgnn.testing.datasets import make_dataset
    from hpcgnn.training.config import parse_train_config
    from hpcgnn.training.loop import _train, run
    from hpcgnn.training.refit import fold_config

    path, _ = make_dataset(comm, shared_tmp, nranks, name="ensemble", num_nodes=300, p_inside=0.6)
    metrics = os.path.join(shared_tmp, "ensemble.jsonl")
    flags = ["--data", path, "--hidden", "8", "--fanouts", "3,3", "--batch-size", "1000", "--no-progress",
             "--prefetch", "0", "--eval-every", "1", "--lr", "0.05", "--epochs", "8", "--refit-folds", "3"]
    run(parse_train_config([*flags, "--metrics-file", metrics]), comm)
    comm.Barrier()
    with open(metrics) as fh:
        final = [json.loads(line) for line in fh][-1]
    chosen = final["refit"]["epochs"]
    config = parse_train_config(flags)
    config = replace(config, optimizer=replace(config.optimizer, epochs=chosen))
    probabilities = []
    for fold in range(3):  # each fold's model after the chosen count: a run of that many epochs
        reading = LastTestRows()
        _train(fold_config(config), comm, fold=fold, votes=reading)
        probabilities.append(softmax(reading.logits))
    reading = LastTestRows()
    _train(config, comm, fold=None, votes=reading)  # the last run
    alone = softmax(reading.logits)
    mean = (sum(probabilities) + alone) / 4
    rows = np.arange(len(reading.labels))
    sums = comm.allreduce(np.array([(mean.argmax(1) == reading.labels).sum(), -np.log(mean[rows, reading.labels]).sum(),
                                    (alone.argmax(1) == reading.labels).sum(), len(rows),
                                    -np.log(alone[rows, reading.labels]).sum()], dtype=np.float64))
    assert final["test_acc"] == pytest.approx(sums[0] / sums[3], abs=1e-12)
    assert final["test_loss"] == pytest.approx(sums[1] / sums[3], rel=1e-5)  # the folds' are kept in float32
    assert final["refit"]["last_run"]["test_acc"] == pytest.approx(sums[2] / sums[3], abs=1e-12)
    assert final["refit"]["last_run"]["test_loss"] == pytest.approx(sums[4] / sums[3], rel=1e-9)
    assert final["refit"]["averaged_models"] == 4 and final["refit"]["predict"] == "ensemble"


@pytest.mark.mpi(sizes=(1,))
def test_the_folds_predictions_are_refused_before_the_first_epoch(nranks, comm, shared_tmp, monkeypatch):
    from hpcgnn.runtime.errors import InputError
    from hpcgnn.testing.datasets import make_dataset
    from hpcgnn.training import loop, refit
    from hpcgnn.training.config import parse_train_config

    path, _ = make_dataset(comm, shared_tmp, nranks, name="refused", num_nodes=300)
    monkeypatch.setattr(refit, "VOTES_LIMIT_BYTES", 64)
    trained = []
    monkeypatch.setattr(loop, "train_epochs", lambda *args, **kwargs: trained.append(args))
    flags = ["--data", path, "--hidden", "8", "--fanouts", "3,3", "--no-progress", "--prefetch", "0",
             "--epochs", "4", "--refit-folds", "2"]
    with pytest.raises(InputError, match="--refit-predict last"):
        loop.run(parse_train_config(flags), comm)
    assert trained == []


@pytest.mark.parametrize("extra, message", [
    (["--task", "link"], "--task link trains on no node mask"),
    (["--resume", "--checkpoint-dir", "ck"], "train without --resume"),
    (["--refit-folds", "1"], None),
])
def test_refusals_name_the_flag(tmp_path, extra, message):
    from hpcgnn.runtime.errors import InputError
    from hpcgnn.training.config import parse_train_config

    argv = ["--data", str(tmp_path), "--refit-folds", "3", *extra]
    with pytest.raises((InputError, SystemExit)) as caught:
        parse_train_config(argv)
    if message is not None:  # a fold count below 2 is argparse's refusal of the flag
        assert isinstance(caught.value, InputError) and "--refit-folds" in str(caught.value)
        assert message in str(caught.value)


@pytest.mark.parametrize("kind", ["multiclass", "multilabel"])
def test_averaged_probabilities_are_scored_through_logits_that_give_them_back(kind):
    from hpcgnn.tasks.metrics import class_probabilities, logits_of

    logits = np.random.default_rng(0).normal(size=(6, 3)) * 4
    probabilities = class_probabilities(logits, kind)
    if kind == "multiclass":
        assert np.allclose(probabilities.sum(1), 1.0)
    assert np.all((probabilities > 0) & (probabilities < 1))
    assert np.allclose(class_probabilities(logits_of(probabilities, kind), kind), probabilities)


def test_the_folds_predictions_are_refused_before_they_outgrow_the_limit(monkeypatch):
    from types import SimpleNamespace

    from hpcgnn.runtime.errors import InputError
    from hpcgnn.training import refit

    monkeypatch.setattr(refit, "VOTES_LIMIT_BYTES", 1 << 20)
    test_mask = SimpleNamespace(local=np.ones(1000, dtype=np.int8))
    session = SimpleNamespace(graph=SimpleNamespace(ndata={"test_mask": test_mask}),
                              facts=SimpleNamespace(kind="multiclass", num_classes=4), comm=SimpleNamespace(rank=0))
    refit.FoldVotes(epochs=60).check(session)  # 16 kB an epoch: 0.9 MiB in all
    with pytest.raises(InputError) as caught:
        refit.FoldVotes(epochs=70).check(session)
    assert "--refit-predict" in str(caught.value) and "--refit-predict last" in str(caught.value)
