"""Checks the training tests share: a run learns with equal steps on every rank, and a run cut in
two and resumed equals one uninterrupted run."""
from __future__ import annotations

import os


def assert_resume_bit_exact(comm, flags, shared_tmp, tag, epochs=4):
    """Collective over comm. Train ``epochs`` epochs in one run, and in two runs (half, then
    ``--resume`` from the first's checkpoints); assert the per-epoch losses and the final test
    accuracy are identical. ``flags(epochs, checkpoint_dir, *extra)`` builds the runs' args
    (checkpointing every epoch into ``checkpoint_dir``)."""
    from hpcgnn.training.loop import run  # deferred: torch and the trainer, only when a test runs

    full_dir, cut_dir = (os.path.join(shared_tmp, f"{tag}_{name}") for name in ("full", "cut"))
    _, full = run(flags(epochs, full_dir), comm)
    run(flags(epochs // 2, cut_dir), comm)
    _, resumed = run(flags(epochs, cut_dir, "--resume"), comm)
    assert [h["loss"] for h in resumed] == [h["loss"] for h in full]
    assert resumed[-1]["test_acc"] == full[-1]["test_acc"]


def assert_learns(comm, args, min_test_acc):
    """Collective over comm. Train as ``args`` say; assert every rank ran the same number of
    epochs, the loss fell and the final test accuracy exceeds ``min_test_acc``."""
    from hpcgnn.training.loop import run  # deferred: as above

    _, history = run(args, comm)
    assert len(set(comm.allgather(len(history)))) == 1
    assert history[0]["loss"] > history[-1]["loss"]
    assert history[-1]["test_acc"] > min_test_acc, history[-1]


def assert_exchange_mode(comm, shared_tmp, flag, neutral, value):
    """Collective over comm. A mode of the gradient exchange (``flag``: ``--staleness``,
    ``--average-every``) on a small generated dataset: ``flag neutral`` reproduces the synchronous
    run's losses bit for bit; ``flag value`` trains differently, says so in its epoch records (the
    flag's name as the key), learns, and resumes bit-exact."""
    from hpcgnn.testing.datasets import make_dataset  # deferred: as above
    from hpcgnn.training.config import parse_train_config  # deferred: as above
    from hpcgnn.training.loop import run  # deferred: as above

    key = flag.lstrip("-").replace("-", "_")
    path, _ = make_dataset(comm, shared_tmp, comm.size, name=key, num_nodes=300, avg_degree=6, p_inside=0.9)
    base = ["--data", path, "--fanouts", "4,4", "--batch-size", "10", "--hidden", "16", "--no-progress",
            "--prefetch", "0", "--lr", "0.02"]
    _, synchronous = run(parse_train_config([*base, "--epochs", "2"]), comm)
    _, same = run(parse_train_config([*base, "--epochs", "2", flag, str(neutral)]), comm)
    assert [r["loss"] for r in same] == [r["loss"] for r in synchronous] and key not in same[0]
    _, other = run(parse_train_config([*base, "--epochs", "2", flag, str(value)]), comm)
    assert other[0][key] == value and [r["loss"] for r in other] != [r["loss"] for r in synchronous]
    assert_learns(comm, parse_train_config([*base, "--epochs", "12", flag, str(value)]), 0.5)

    def flags(epochs, directory, *extra):
        return parse_train_config([*base, flag, str(value), "--epochs", str(epochs), "--eval-every", "2",
                                   "--checkpoint-every", "1", "--checkpoint-dir", directory, *extra])

    assert_resume_bit_exact(comm, flags, shared_tmp, key)


def one_process_reference(comm, single, flags):
    """Collective over comm. Rank 0 alone trains the one-part dataset ``single`` with ``flags``
    (``hpcgnn train`` arguments); every rank gets ``(flat parameters, per-epoch losses)``."""
    import numpy as np  # deferred: as above
    import torch  # deferred: as above

    from hpcgnn.training.config import parse_train_config  # deferred: as above
    from hpcgnn.training.loop import run  # deferred: as above

    reference = None
    alone = comm.Split(0 if comm.rank == 0 else 1, 0)
    if comm.rank == 0:
        model, history = run(parse_train_config(["--data", single, *flags]), alone)
        params = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()
        reference = (np.array(params), [h["loss"] for h in history])
    return comm.bcast(reference, root=0)
