"""Checkpoints are data: a crafted file cannot run code, ``latest`` cannot point elsewhere, a
checkpoint of another model or dataset is refused before any work, and a resumed run
continues from the saved epoch instead of starting over."""
import json
import os
import re

import numpy as np
import pytest
import torch

from hpcgnn.runtime.errors import InputError
from hpcgnn.testing.commands import run_command
from hpcgnn.testing.datasets import make_dataset


def small_args(path, *extra):
    from hpcgnn.training.config import parse_train_config

    return parse_train_config(["--data", path, "--hidden", "8", "--fanouts", "3,3", "--batch-size", "50",
                       "--no-progress",
                       "--prefetch", "0", "--eval-every", "0", *extra])


def flat_params(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()


def assert_one_line_error(proc, *needles):
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.endswith("\n"), proc.stderr
    for needle in needles:
        assert str(needle) in proc.stderr, (needle, proc.stderr)


def one_part_dataset(tmp_path, name="d", **graph_args):
    from hpcgnn.prep.partition import partition_graph
    from hpcgnn.testing.graphs import clustered_graph

    path = tmp_path / name
    partition_graph(clustered_graph(num_nodes=300, **graph_args), path, 1, "metis")
    return str(path)


class RunsCode:
    """Unpickling this runs code: it writes ``marker``, as a crafted checkpoint could do anything."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('ran')",)


def plain_state(**changes):
    state = {"model": {}, "optimizer": {}, "config": {"model": "sage"}, "epoch": 1, "rng": [], "history": []}
    state.update(changes)
    return state


def test_a_checkpoint_whose_unpickling_runs_code_is_refused(tmp_path):
    import threading

    from hpcgnn.runtime import watchdog
    from hpcgnn.runtime.comm import world
    from hpcgnn.training.checkpoint import load_checkpoint
    from hpcgnn.training.loop import run

    marker = tmp_path / "code-ran"
    crafted = tmp_path / "ck"
    crafted.mkdir()
    torch.save(plain_state(model=RunsCode(marker)), crafted / "epoch-0001.pt")
    (crafted / "latest").write_text("epoch-0001.pt\n")
    for path in (crafted / "epoch-0001.pt", crafted):
        with pytest.raises(InputError) as exc:
            load_checkpoint(str(path))
        assert not marker.exists(), "loading the checkpoint ran its code"
        message = str(exc.value)
        assert "\n" not in message and "refused" in message and "exec" in message, message
        assert "epoch-0001.pt" in message and "weights_only" not in message, message
    # the same through both commands that read checkpoints
    data = one_part_dataset(tmp_path)
    with pytest.raises(InputError, match="refused"):
        run(small_args(data, "--epochs", "2", "--checkpoint-dir", str(crafted), "--resume"), world())
    assert_one_line_error(run_command("hpcgnn.evaluate", "--data", data, "--checkpoint", crafted / "epoch-0001.pt"),
                          "epoch-0001.pt", "refused")
    assert not marker.exists()
    # the refused command left no watchdog behind: one would end this process when its clock ran out
    assert watchdog._active is None
    assert not [t for t in threading.enumerate() if t.name == "hpcgnn-watchdog"]


def test_a_truncated_or_garbage_checkpoint_is_a_one_line_error(tmp_path):
    from hpcgnn.training.checkpoint import load_checkpoint

    torch.save(plain_state(), tmp_path / "good.pt")
    (tmp_path / "truncated.pt").write_bytes((tmp_path / "good.pt").read_bytes()[:200])
    (tmp_path / "garbage.pt").write_bytes(b"not a checkpoint" * 20)
    torch.save([1, 2, 3], tmp_path / "list.pt")
    torch.save(plain_state(epoch="../../x"), tmp_path / "mistyped.pt")
    for name in ("truncated.pt", "garbage.pt", "list.pt", "mistyped.pt"):
        with pytest.raises(InputError) as exc:
            load_checkpoint(str(tmp_path / name))
        assert "\n" not in str(exc.value) and name in str(exc.value), str(exc.value)
    assert load_checkpoint(str(tmp_path / "good.pt"))["epoch"] == 1


def test_latest_must_name_a_checkpoint_file_of_its_own_directory(tmp_path):
    from hpcgnn.training.checkpoint import load_checkpoint

    directory, outside = tmp_path / "ck", tmp_path / "elsewhere"
    directory.mkdir()
    outside.mkdir()
    torch.save(plain_state(epoch=7), outside / "epoch-0007.pt")
    torch.save(plain_state(epoch=3), directory / "epoch-0003.pt")
    os.symlink(outside / "epoch-0007.pt", directory / "epoch-0007.pt")
    (directory / "sub").mkdir()
    torch.save(plain_state(epoch=3), directory / "sub" / "epoch-0003.pt")
    for target in ("../elsewhere/epoch-0007.pt", str(outside / "epoch-0007.pt"), "epoch-0007.pt",
                   "sub/epoch-0003.pt", "..", "epoch-0003.pt\nepoch-0007.pt"):
        (directory / "latest").write_text(target + "\n")
        with pytest.raises(InputError) as exc:
            load_checkpoint(str(directory))
        message = str(exc.value)
        assert "\n" not in message and str(directory / "latest") in message, message
        assert target.split("\n")[0][:60] in message, message  # long values are shortened
    (directory / "latest").write_text("epoch-0003.pt\n")
    assert load_checkpoint(str(directory))["epoch"] == 3
    (directory / "latest").write_text("../elsewhere/epoch-0007.pt\n")
    assert_one_line_error(run_command("hpcgnn.evaluate", "--data", tmp_path, "--checkpoint", directory),
                          directory / "latest", "../elsewhere/epoch-0007.pt")


@pytest.mark.mpi(sizes=(2,))
def test_a_checkpoint_of_another_model_or_dataset_is_refused_before_any_work(nranks, comm, shared_tmp, monkeypatch):
    from hpcgnn.training.config import parse_evaluate_config
    from hpcgnn.training.evaluate import evaluate_checkpoint
    from hpcgnn.training.loop import run

    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    path, _ = make_dataset(comm, shared_tmp, nranks, name="base", num_nodes=300)
    more_classes, _ = make_dataset(comm, shared_tmp, nranks, name="classes", num_nodes=300, num_clusters=5)
    wider, _ = make_dataset(comm, shared_tmp, nranks, name="wider", num_nodes=300, feat_dim=5)
    bigger, _ = make_dataset(comm, shared_tmp, nranks, name="bigger", num_nodes=320)
    ck = os.path.join(shared_tmp, "ck")
    run(small_args(path, "--epochs", "1", "--checkpoint-dir", ck, "--checkpoint-every", "1"), comm)
    metrics = os.path.join(shared_tmp, "m.jsonl")
    for data, extra, needles in (
            (path, ["--hidden", "16"], ["hidden 8 in the checkpoint, 16 here"]),
            (path, ["--model", "gcn"], ["model 'sage' in the checkpoint, 'gcn' here"]),
            (path, ["--norm", "layer", "--layers", "3", "--fanouts", "3,3,3"],
             ["layers 2 in the checkpoint, 3 here", "norm 'none' in the checkpoint, 'layer' here"]),
            (more_classes, [], ["num_classes 4 in the checkpoint, 5 here"]),
            (wider, [], ["feat_dim 8 in the checkpoint, 5 here"]),
            (bigger, [], ["num_nodes 300 in the checkpoint, 320 here"])):
        args = small_args(data, "--epochs", "3", "--checkpoint-dir", ck, "--checkpoint-every", "1", "--resume",
                          "--metrics-file", metrics, *extra)
        with pytest.raises(InputError) as exc:  # on every rank: each reads the same file
            run(args, comm)
        message = str(exc.value)
        assert "\n" not in message and "epoch-0001.pt" in message, message
        assert all(n in message for n in needles), (needles, message)
        assert "dropout" not in message and "lr " not in message  # only what changes the parameters
        comm.Barrier()
        # refused before training: no epoch ran, nothing logged, nothing written, the lock released
        assert not os.path.exists(metrics)
        assert sorted(os.listdir(ck)) == ["best", "epoch-0001.pt", "latest"]
        comm.Barrier()
    out = os.path.join(shared_tmp, "emb")
    for data, needle in ((more_classes, "num_classes 4 in the checkpoint, 5 here"),
                         (wider, "feat_dim 8 in the checkpoint, 5 here")):
        args = parse_evaluate_config(["--data", data, "--checkpoint", ck, "--save-embeddings", out])
        with pytest.raises(InputError, match=needle):
            evaluate_checkpoint(args, comm)
        assert not os.path.exists(out)
    # what may change on resuming still may: the dropout rate, the learning rate, the epoch count
    _, history = run(small_args(path, "--epochs", "2", "--checkpoint-dir", ck, "--checkpoint-every", "1",
                                "--resume", "--dropout", "0.2", "--lr", "0.01"), comm)
    assert [r["epoch"] for r in history] == [1, 2]


def test_a_mismatch_is_one_line_from_the_entry_points(tmp_path):
    from hpcgnn.runtime.comm import world
    from hpcgnn.training.loop import run

    data = one_part_dataset(tmp_path)
    other = one_part_dataset(tmp_path, "other", num_clusters=3)
    ck = tmp_path / "ck"
    run(small_args(data, "--epochs", "1", "--checkpoint-dir", str(ck), "--checkpoint-every", "1"), world())
    assert_one_line_error(run_command("hpcgnn.evaluate", "--data", other, "--checkpoint", ck),
                          "epoch-0001.pt", "num_classes 4 in the checkpoint, 3 here")
    assert_one_line_error(run_command("hpcgnn.train", "--data", data, "--checkpoint-dir", ck, "--resume",
                                          "--epochs", "2", "--hidden", "9", "--fanouts", "3,3", "--no-progress"),
                          "epoch-0001.pt", "hidden 8 in the checkpoint, 9 here")


@pytest.mark.mpi(sizes=(2,))
def test_a_resumed_run_trains_only_the_epochs_after_the_checkpoint(nranks, comm, shared_tmp, monkeypatch):
    """A --resume that started over would train epochs 1..4 again: the log, the loader's epochs
    and the per-epoch losses all show which epochs ran."""
    from hpcgnn.training import loop

    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    path, _ = make_dataset(comm, shared_tmp, nranks, num_nodes=300)
    full_log, cut_log = os.path.join(shared_tmp, "full.jsonl"), os.path.join(shared_tmp, "cut.jsonl")
    ck = os.path.join(shared_tmp, "ck")
    full_model, _ = loop.run(small_args(path, "--epochs", "4", "--metrics-file", full_log), comm)
    loop.run(small_args(path, "--epochs", "2", "--checkpoint-dir", ck, "--checkpoint-every", "1",
                        "--metrics-file", cut_log), comm)

    ran = []
    original = loop.train_epoch

    def recording(session, epoch, show_progress=False):
        ran.append((epoch, session.loader.epoch))
        return original(session, epoch, show_progress)

    monkeypatch.setattr(loop, "train_epoch", recording)
    model, history = loop.run(small_args(path, "--epochs", "4", "--checkpoint-dir", ck, "--checkpoint-every", "1",
                                         "--metrics-file", cut_log, "--resume"), comm)
    assert ran == [(2, 2), (3, 3)]  # 0-based: epochs 3 and 4, and the loader's order for them
    assert [r["epoch"] for r in history] == [1, 2, 3, 4]
    assert np.array_equal(flat_params(model), flat_params(full_model))
    if comm.rank == 0:
        full = [json.loads(line) for line in open(full_log)][1:]  # after the header
        cut = [json.loads(line) for line in open(cut_log)]
        kinds = [r["epoch"] if "epoch" in r else "final" if r.get("final") else f"header {r['first_epoch']}"
                 for r in cut]
        assert kinds == ["header 1", 1, 2, "final", "header 3", 3, 4, "final"]
        assert [r["loss"] for r in cut if r.get("epoch") in (3, 4)] == [r["loss"] for r in full[2:4]]
        assert cut[-1]["epochs"] == 4


def test_a_fifo_where_a_checkpoint_is_expected_is_refused_not_waited_on(tmp_path):
    """A FIFO as the checkpoint, as ``latest`` or as an embedding shard blocked the open forever."""
    import signal

    from hpcgnn.runtime.errors import InputError
    from hpcgnn.store.embedding import load_arrays
    from hpcgnn.training.checkpoint import latest_checkpoint, load_checkpoint

    fifo = tmp_path / "epoch-0001.pt"
    os.mkfifo(fifo)
    os.mkfifo(tmp_path / "latest")
    os.mkfifo(tmp_path / "shard.emb.npz")
    previous = signal.signal(signal.SIGALRM, lambda *_: pytest.fail("blocked on a FIFO"))
    signal.alarm(20)
    try:
        for call, needle in ((lambda: load_checkpoint(str(fifo)), "field '--checkpoint': not a regular file (a FIFO)"),
                             (lambda: latest_checkpoint(str(tmp_path)), "field 'latest': not a regular file (a FIFO)"),
                             (lambda: load_arrays(str(tmp_path / "shard.emb.npz")), "not a regular file (a FIFO)")):
            with pytest.raises(InputError, match=re.escape(needle)):
                call()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
