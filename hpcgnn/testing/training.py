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
