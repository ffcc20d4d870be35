"""A job that may be started again (a requeued SLURM job) runs the same command every time:
``--resume`` starts at epoch 1 when there is nothing to resume, and a run given
``--checkpoint-dir`` checkpoints after its last epoch even without ``--checkpoint-every``."""
import json
import os

import numpy as np
import torch

from hpcgnn.prep.partition import partition_graph
from hpcgnn.testing.graphs import clustered_graph

FLAGS = ("--hidden", "8", "--fanouts", "3,3", "--batch-size", "50", "--no-progress", "--prefetch", "0",
         "--eval-every", "0")


def train(capsys, data, *extra):
    """``hpcgnn train`` in this process: its stdout lines, and the history of the run."""
    from hpcgnn.cli import train as command

    runs = []
    original = command.run

    def recording(config, comm):
        runs.append(original(config, comm))
        return runs[-1]

    command.run = recording
    try:
        assert command.main(["--data", data, *FLAGS, *extra]) == 0
    finally:
        command.run = original
    model, history = runs[0]
    return capsys.readouterr().out.splitlines(), model, history


def flat_params(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()


def test_the_same_command_starts_fresh_then_resumes(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    data = str(tmp_path / "d")
    partition_graph(clustered_graph(num_nodes=300), data, 1, "metis")
    ck = str(tmp_path / "ck")
    metrics = str(tmp_path / "m.jsonl")

    lines, _, history = train(capsys, data, "--epochs", "2", "--checkpoint-dir", ck, "--resume", "--metrics-file",
            metrics)
    assert f"nothing to resume in {ck}: starting at epoch 1" in lines
    assert [r["epoch"] for r in history] == [1, 2]
    # no --checkpoint-every: one checkpoint, after the last epoch (evaluated: also the selected model)
    assert sorted(os.listdir(ck)) == ["best", "epoch-0002.pt", "latest"]

    lines, model, history = train(capsys, data, "--epochs", "3", "--checkpoint-dir", ck, "--resume",
                                  "--metrics-file", metrics)
    assert f"resumed from epoch 2 ({ck})" in lines
    assert sum(line.startswith("epoch ") for line in lines) == 1  # epoch 3 only
    assert [r["epoch"] for r in history] == [1, 2, 3]
    assert open(os.path.join(ck, "latest")).read().strip() == "epoch-0003.pt"
    records = [json.loads(line) for line in open(metrics)]
    assert [r.get("epoch", "final" if r.get("final") else "header") for r in records] == \
        ["header", 1, 2, "final", "header", 3, "final"]

    _, straight, _ = train(capsys, data, "--epochs", "3")
    assert np.array_equal(flat_params(model), flat_params(straight))

    # started again after it finished: nothing left to train, the checkpoint stays as it was
    lines, _, history = train(capsys, data, "--epochs", "3", "--checkpoint-dir", ck, "--resume")
    assert f"resumed from epoch 3 ({ck})" in lines and not any(line.startswith("epoch ") for line in lines)
    assert sorted(os.listdir(ck)) == ["best", "epoch-0002.pt", "epoch-0003.pt", "latest"]
