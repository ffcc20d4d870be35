"""What the training step must get exactly right, and the run-time errors it must refuse."""
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from hpcgnn.testing.datasets import make_dataset
from tests.conftest import mpiexec_path


def args_for(path, *extra):
    from hpcgnn.training.config import parse_train_config

    return parse_train_config(["--data", path, "--hidden", "16", "--fanouts", "3,4", "--batch-size", "40",
                       "--no-progress",
                       "--prefetch", "0", "--dropout", "0", "--eval-every", "0", *extra])


@pytest.mark.mpi(sizes=(2,))
def test_the_step_applies_the_mean_of_the_ranks_gradients_and_batch_norm_agrees(nranks, comm, shared_tmp):
    """The gradient of a step is the mean over ranks of each rank's own batch gradient (not the sum,
    which Adam's scale invariance would otherwise hide); batch norm's running statistics end the
    same on every rank (one launch, one dataset)."""
    from hpcgnn.training.loop import run, train_step
    from hpcgnn.training.session import open_session

    path, _ = make_dataset(comm, shared_tmp, nranks, num_nodes=600)
    session = open_session(args_for(path), comm)
    batch = next(iter(session.loader))
    session.grads.zero()
    logits = session.model(batch.blocks, batch.feat, batch.input_degree)
    torch.nn.functional.cross_entropy(logits, batch.label.long()).backward()
    own = session.grads.buffer.numpy().copy()
    assert np.abs(own).sum() > 0
    expected = np.mean(comm.allgather(own), axis=0)
    train_step(session, batch)
    assert np.allclose(session.grads.buffer.numpy(), expected, rtol=1e-5, atol=1e-7)
    session.close()

    model, _ = run(args_for(path, "--norm", "batch", "--epochs", "2"), comm)
    stats = torch.cat([b.detach().reshape(-1).double() for b in model.buffers() if b.is_floating_point()]).numpy()
    assert stats.size > 0
    everyone = comm.allgather(stats)
    assert all(np.array_equal(stats, other) for other in everyone)
    assert not np.allclose(stats, np.concatenate([np.zeros(16), np.ones(16)]))  # they did learn something


def test_model_selection_fields_of_the_final_record():
    from hpcgnn.training.reporting import selection

    history = [
        {"epoch": 1, "val_acc": 0.50, "val_loss": 1.20, "test_acc": 0.40},
        {"epoch": 2, "val_acc": 0.70, "val_loss": 0.90, "test_acc": 0.65},
        {"epoch": 3, "val_acc": 0.68, "val_loss": 0.80, "test_acc": 0.66},
        {"epoch": 4},  # not evaluated
        {"epoch": 5, "val_acc": 0.60, "val_loss": 1.00, "test_acc": 0.61},
    ]
    chosen = selection(history)
    assert chosen["test_acc"] == 0.61 and chosen["val_acc"] == 0.60  # the last evaluation
    assert chosen["best_val_acc"] == 0.70
    assert chosen["test_acc_at_best_val"] == 0.65 and chosen["best_epoch"] == 2
    assert chosen["best_val_loss"] == 0.80
    assert chosen["test_acc_at_best_val_loss"] == 0.66 and chosen["best_loss_epoch"] == 3
    assert selection([{"epoch": 1}]) == {}


def run_train(data, *extra):
    return subprocess.run([mpiexec_path(), "-n", "2", sys.executable, "-m", "hpcgnn.train", "--data", str(data),
                           "--epochs", "2", "--hidden", "8", "--fanouts", "3,3", "--no-progress", *extra],
                          capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))


def error_lines(stderr):
    return [line for line in stderr.splitlines() if line.startswith("hpcgnn train: error:")]


def test_non_finite_features_are_refused_at_start(tmp_path):
    """ReLU maps NaN to 0, so NaN features never reach the training loss: they must be caught at load."""
    from hpcgnn.prep.partition import partition_graph
    from hpcgnn.testing.graphs import clustered_graph

    graph = clustered_graph(num_nodes=600)
    graph.ndata["feat"][::7] = np.nan  # stored as written: no checksum can object to it
    partition_graph(graph, tmp_path / "d", 2, "metis")
    proc = run_train(tmp_path / "d")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = error_lines(proc.stderr)
    assert 1 <= len(lines) <= 2, proc.stderr
    assert ".h5: field 'feat': non-finite value" in lines[0], lines[0]


def test_a_diverging_loss_stops_training_naming_epoch_and_step(tmp_path):
    from hpcgnn.prep.partition import partition_graph
    from hpcgnn.testing.graphs import clustered_graph

    partition_graph(clustered_graph(num_nodes=600), tmp_path / "d", 2, "metis")
    proc = run_train(tmp_path / "d", "--lr", "1e38", "--batch-size", "30")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = error_lines(proc.stderr)
    assert 1 <= len(lines) <= 2, proc.stderr
    assert "training loss is nan at epoch 1 step" in lines[0] or "training loss is inf" in lines[0], lines[0]


def test_no_training_nodes_is_one_line(tmp_path):
    from hpcgnn.prep.partition import partition_graph
    from hpcgnn.testing.graphs import clustered_graph

    graph = clustered_graph(num_nodes=300)
    graph.ndata["train_mask"][:] = False
    partition_graph(graph, tmp_path / "d", 2, "metis")
    proc = run_train(tmp_path / "d")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = error_lines(proc.stderr)
    assert 1 <= len(lines) <= 2 and all("no training nodes" in line and "train_mask" in line for line in lines), \
        proc.stderr


def plain_checkpoint(**changes):
    """A checkpoint in the saved layout (plain data: what ``torch.load(weights_only=True)`` reads)."""
    state = {"model": {"layers.0.weight": torch.ones(4, 3), "layers.0.bias": torch.zeros(4)},
             "optimizer": {"state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.zeros(4, 3)}},
                           "param_groups": [{"lr": 0.01, "params": [0, 1]}]},
             "config": {"model": "sage"}, "epoch": 2, "rng": [], "history": []}
    state.update(changes)
    return state


@pytest.mark.parametrize("where, field", [("model", "model.layers.0.weight"),
                                          ("optimizer", "optimizer.state.0.exp_avg")])
def test_a_checkpoint_with_non_finite_weights_is_refused_naming_the_tensor(tmp_path, where, field):
    from hpcgnn.runtime.errors import InputError
    from hpcgnn.training.checkpoint import load_checkpoint

    torch.save(plain_checkpoint(), tmp_path / "good.pt")
    assert load_checkpoint(str(tmp_path / "good.pt"))["epoch"] == 2
    state = plain_checkpoint()
    tensor = state["model"]["layers.0.weight"] if where == "model" else state["optimizer"]["state"][0]["exp_avg"]
    tensor[1, 2] = float("nan") if where == "model" else float("inf")
    torch.save(state, tmp_path / "bad.pt")
    with pytest.raises(InputError) as refused:
        load_checkpoint(str(tmp_path / "bad.pt"))
    text = str(refused.value)
    assert text.startswith(f"{tmp_path / 'bad.pt'}: field '{field}': non-finite values") and "\n" not in text, text


def test_evaluating_a_checkpoint_with_nan_weights_is_one_line(tmp_path, capsys):
    from hpcgnn.evaluate import main

    state = plain_checkpoint()
    state["model"]["layers.0.bias"][0] = float("nan")
    torch.save(state, tmp_path / "nan.pt")
    with pytest.raises(SystemExit) as stop:
        main(["--data", str(tmp_path), "--checkpoint", str(tmp_path / "nan.pt")])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nan.pt: field 'model.layers.0.bias': non-finite values" in err, err


def train_alone(capsys, data, *extra):
    """``hpcgnn train`` as one process (a one-part dataset), the way a new user first runs it, here
    in the test's process: ``(exit status, stderr)``."""
    from hpcgnn.train import main

    with pytest.raises(SystemExit) as stop:
        main(["--data", str(data), "--epochs", "1", "--hidden", "8", "--fanouts", "3,3", "--no-progress", *extra])
    return stop.value.code, capsys.readouterr().err


@pytest.mark.parametrize("dropped, remedy", [
    (("feat",), "dataset has no node features: train with --embed-dim D"),
    (("label", "train_mask", "val_mask", "test_mask"), "dataset has no node labels to classify: for link "
                                                       "prediction train with --task link"),
])
def test_a_missing_node_field_names_the_flag_that_does_without_it(tmp_path, capsys, dropped, remedy):
    from hpcgnn.prep.partition import partition_graph
    from hpcgnn.testing.graphs import clustered_graph

    graph = clustered_graph(num_nodes=200)
    for field in dropped:
        del graph.ndata[field]
    partition_graph(graph, tmp_path / "d", 1, "random")
    status, err = train_alone(capsys, tmp_path / "d")
    assert status == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and remedy in lines[0] and "meta.json: field 'node_fields'" in lines[0], err


def test_link_prediction_on_a_labelled_graph_needs_no_node_split(tmp_path, capsys):
    """Labels without masks: a node task needs --split, an --edge-split dataset for link prediction does not."""
    from hpcgnn.cli.partition import main as partition_main
    from hpcgnn.prep.read.npz import write_npz
    from hpcgnn.testing.graphs import clustered_graph

    graph = clustered_graph(num_nodes=200)
    for mask in ("train_mask", "val_mask", "test_mask"):
        del graph.ndata[mask]
    write_npz(graph, str(tmp_path / "g.npz"))
    argv = [str(tmp_path / "g.npz"), "--parts", "2", "--symmetrize"]
    with pytest.raises(SystemExit):
        partition_main([*argv, "--out", str(tmp_path / "node")])
    err = capsys.readouterr().err
    assert "--split 0.6,0.2,0.2" in err and "--edge-split" in err and err.count("\n") == 1, err
    assert partition_main([*argv, "--out", str(tmp_path / "link"), "--edge-split", "0.8,0.1,0.1"]) == 0
