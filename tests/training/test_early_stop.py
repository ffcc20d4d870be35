"""Model selection on validation and early stopping: the selected epoch is the best validation
value of --select, a run ends PATIENCE epochs after it, every rank at the same epoch, and a
resumed run that already stopped trains no more."""
import json
import os

import pytest

from hpcgnn.training.early_stop import EarlyStopping, selected, selection_key


def records(values, key):
    return [{"epoch": i + 1, key: v, "test_acc": 0.5 + i / 100} for i, v in enumerate(values)]


def test_selection_keys():
    assert selection_key("metric", "acc") == "val_acc"
    assert selection_key("metric", "roc_auc") == "val_roc_auc"
    assert selection_key("loss", "roc_auc") == "val_loss"


def test_patience_counts_epochs_since_the_best_value():
    stopper = EarlyStopping("val_loss", patience=2)
    decisions = [stopper.update(r) for r in records([1.0, 0.8, 0.9, 0.85, 0.7], "val_loss")]
    assert decisions == [False, False, False, True, True]  # best at epoch 2; epoch 4 is 2 epochs later
    assert stopper.stopped and (stopper.best, stopper.best_epoch) == (0.7, 5)  # a stop is final
    higher = EarlyStopping("val_acc", patience=2)
    assert [higher.update(r) for r in records([0.5, 0.6, 0.6, 0.7, 0.7, 0.7], "val_acc")] == \
        [False, False, False, False, False, True]  # equal is no improvement; the first best counts


def test_epochs_without_evaluation_neither_stop_nor_select():
    stopper = EarlyStopping("val_acc", patience=1)
    history = [{"epoch": 1, "val_acc": 0.5}, {"epoch": 2}, {"epoch": 3, "val_acc": 0.4}]
    assert [stopper.update(r) for r in history] == [False, False, True]
    assert selected(history, "val_acc")["selected_epoch"] == 1
    assert EarlyStopping("val_acc", patience=0, history=history).stopped is False


def test_a_replayed_history_that_stopped_stays_stopped():
    history = records([1.0, 1.1, 1.2], "val_loss")
    assert EarlyStopping("val_loss", patience=2, history=history).stopped
    assert not EarlyStopping("val_loss", patience=3, history=history).stopped


def test_selected_reports_every_test_figure_of_the_best_epoch():
    history = records([0.9, 0.7, 0.8], "val_loss")
    history[1]["test_roc_auc"] = 0.93
    chosen = selected(history, "val_loss")
    assert chosen == {"selected_by": "val_loss", "selected_epoch": 2, "selected_val_loss": 0.7,
                      "selected_test_acc": 0.51, "selected_test_roc_auc": 0.93}
    assert selected([{"epoch": 1}], "val_loss") == {}


@pytest.mark.mpi(sizes=(2,))
def test_training_stops_together_and_reports_the_selected_epoch(nranks, comm, shared_tmp):
    from hpcgnn.testing.datasets import make_dataset
    from hpcgnn.training.config import parse_train_config
    from hpcgnn.training.loop import run
    from hpcgnn.training.reporting import FINAL_FIELDS, explain

    path, _ = make_dataset(comm, shared_tmp, nranks, num_nodes=300, p_inside=0.9)
    metrics = os.path.join(shared_tmp, "m.jsonl")
    ckpt = os.path.join(shared_tmp, "ckpt")
    flags = ["--data", path, "--hidden", "16", "--fanouts", "3,3", "--batch-size", "50", "--no-progress",
             "--prefetch", "0", "--eval-every", "1", "--lr", "0.05", "--epochs", "60", "--early-stop", "3",
             "--select", "loss", "--metrics-file", metrics, "--checkpoint-dir", ckpt]
    _, history = run(parse_train_config(flags), comm)
    losses = [r["val_loss"] for r in history]
    best = losses.index(min(losses))
    assert len(history) == best + 1 + 3 < 60, losses  # stopped 3 epochs after the best, well before 60
    assert comm.allgather(len(history)) == [len(history)] * comm.size
    if comm.rank == 0:
        with open(metrics) as fh:
            final = [json.loads(line) for line in fh][-1]
        assert final["stopped_early"] is True and final["epochs_trained"] == len(history) and final["epochs"] == 60
        assert final["selected_epoch"] == best + 1 and final["selected_by"] == "val_loss"
        assert final["selected_test_acc"] == history[best]["test_acc"]
        assert all(explain(k, FINAL_FIELDS) for k in final), [k for k in final if not explain(k, FINAL_FIELDS)]
        with open(os.path.join(ckpt, "latest")) as fh:
            assert fh.read().strip() == f"epoch-{len(history):04d}.pt"  # the stopped epoch is checkpointed
    comm.barrier()
    _, again = run(parse_train_config(flags + ["--resume"]), comm)  # a requeued job: nothing more to train
    assert len(again) == len(history)
