"""A checkpoint written at one rank count resumes at another: the model and its optimizer as
saved, every node's embedding row and its optimizer state where the new ranks own them, the
epoch count and history carried on; evaluate scores it alike at either count; and row shards
reassembled at any split."""
import glob
import os

import numpy as np
import pytest

from hpcgnn.runtime.errors import InputError
from hpcgnn.store.reshard import reshard
from hpcgnn.testing.datasets import make_dataset


def _config(path, directory, epochs, *extra):
    from hpcgnn.training.config import parse_train_config

    return parse_train_config(["--data", path, "--epochs", str(epochs), "--embed-dim", "8", "--embed-lr", "0.05",
                               "--hidden", "8", "--fanouts", "3,3", "--batch-size", "40", "--eval-every", "0",
                               "--no-progress", "--prefetch", "0", "--checkpoint-dir", directory,
                               "--checkpoint-every", "1", *extra])


def _saved_rows(directory, epoch, suffix, key):
    """Every saved rank's rows of ``key`` in one array, in rank order (the whole table)."""
    files = sorted(glob.glob(os.path.join(directory, f"epoch-{epoch:04d}.rank-*{suffix}")))
    return np.concatenate([np.load(f)[key] for f in files])


def _resume_and_check(path, directory, comm, saved_ranks):
    """Collective over comm. Open a session, resume it from ``directory`` and check what it holds."""
    import torch

    from hpcgnn.training.checkpoint import latest_checkpoint, load_checkpoint, resume_session
    from hpcgnn.training.session import open_session

    session = open_session(_config(path, directory, 4, "--resume"), comm)
    try:
        epoch, history, ranks = resume_session(session, directory)
        assert (epoch, len(history), ranks) == (2, 2, saved_ranks)
        saved = load_checkpoint(latest_checkpoint(directory))
        for name, value in session.model.state_dict().items():
            assert torch.equal(value, saved["model"][name]), name
        table = session.embedding.weight
        assert np.array_equal(table.gather(np.arange(table.shape[0])), _saved_rows(directory, 2, ".emb.npz", "rows"))
        lo, hi = session.embedding.local_range
        state = session.embed_optimizer.state[0]
        for field in ("exp_avg", "exp_avg_sq", "step"):
            assert np.array_equal(state[field], _saved_rows(directory, 2, ".opt.npz", f"0.{field}")[lo:hi]), field
        assert state["step"].any()  # rows the saving run trained, now owned by other ranks
    finally:
        session.close()


@pytest.mark.mpi(sizes=(2, 4))
def test_a_checkpoint_resumes_at_half_and_at_twice_the_rank_count(nranks, comm, shared_tmp):
    from hpcgnn.training.loop import run

    path, _ = make_dataset(comm, shared_tmp, 4, num_nodes=400)
    half = comm.Split(int(comm.rank >= nranks // 2), comm.rank)  # the first half trains, the rest wait
    shrink, grow = os.path.join(shared_tmp, "shrink"), os.path.join(shared_tmp, "grow")
    run(_config(path, shrink, 2), comm)
    if comm.rank < nranks // 2:
        _resume_and_check(path, shrink, half, nranks)
        _, history = run(_config(path, shrink, 4, "--resume"), half)
        assert len(history) == 4 and np.isfinite([h["loss"] for h in history]).all()
        run(_config(path, grow, 2), half)
    comm.Barrier()
    _resume_and_check(path, grow, comm, nranks // 2)
    _, history = run(_config(path, grow, 4, "--resume"), comm)
    assert len(history) == 4 and history[-1]["epoch"] == 4
    # evaluate scores the checkpoint alike at the rank count that wrote it and at half of it
    from hpcgnn.training.config import parse_evaluate_config
    from hpcgnn.training.evaluate import evaluate_checkpoint

    options = parse_evaluate_config(["--data", path, "--checkpoint", grow, "--latest"])
    everyone = evaluate_checkpoint(options, comm)
    if comm.rank < nranks // 2:
        halved = evaluate_checkpoint(options, half)
        numbers = {k: v for k, v in everyone.items() if isinstance(v, float)}
        assert numbers and {k: halved[k] for k in numbers} == pytest.approx(numbers, rel=1e-6)
    comm.Barrier()


def _shards(ranges, width=3):
    """npz-like dicts of three shard kinds (an embedding's, a sparse optimizer's, VR-GCN's), one per
    range, the rows' values their global row ids."""
    out = []
    for lo, hi in ranges:
        rows = np.repeat(np.arange(lo, hi, dtype=np.float32)[:, None], width, axis=1)
        out.append({"name": np.str_("emb"), "shape": np.array([12, width]), "local_range": np.array([lo, hi]),
                    "rows": rows, "lr": np.float64(0.1), "0.shape": np.array([12, width]),
                    "0.local_range": np.array([lo, hi]), "0.step": np.arange(lo, hi),
                    "history0": rows * 2, "history0_shape": np.array([12, width]),
                    "history0_local_range": np.array([lo, hi])})
    return out


def test_row_shards_reassemble_at_any_split(tmp_path):
    saved = []
    for rank, shard in enumerate(_shards([(0, 3), (3, 7), (7, 12)])):
        saved.append(str(tmp_path / f"s{rank}.npz"))
        np.savez(saved[-1], **shard)
    for lo, hi in ((0, 12), (2, 8), (3, 7), (11, 12), (5, 5)):
        template = _shards([(lo, hi)])[0]
        for key in ("rows", "0.step", "history0"):
            template[key] = np.zeros_like(template[key])  # the new rank's own (untrained) rows
        got = reshard(template, saved)
        want = _shards([(lo, hi)])[0]
        for key in ("rows", "0.step", "history0", "local_range", "0.local_range", "history0_local_range"):
            assert np.array_equal(got[key], want[key]), (lo, hi, key)
        assert float(got["lr"]) == 0.1 and str(got["name"]) == "emb"
    os.remove(saved[1])
    np.savez(saved[1], **_shards([(4, 7)])[0])  # a gap: row 3 is in nobody's shard
    with pytest.raises(InputError, match=r"s1\.npz: field 'local_range': rows \[4, 7\) do not continue from row 3"):
        reshard(_shards([(0, 12)])[0], saved)


def test_a_rank_reads_the_ranges_of_few_saved_files(tmp_path, monkeypatch):
    """The first file (names, hyperparameters) and those holding its rows, found by bisection: not
    every saving rank's file, which at thousands of ranks would be millions of opens in all."""
    from hpcgnn.store import reshard as module

    saved = []
    for rank, shard in enumerate(_shards([(r, r + 1) for r in range(64)])):
        saved.append(str(tmp_path / f"s{rank}.npz"))
        np.savez(saved[-1], **shard)
    opened = []
    real = module._saved_ranges
    monkeypatch.setattr(module, "_saved_ranges", lambda path, prefixes: opened.append(path) or real(path, prefixes))
    got = reshard(_shards([(40, 43)])[0], saved)
    assert np.array_equal(got["rows"], _shards([(40, 43)])[0]["rows"])
    assert len(set(opened)) <= 1 + 3 * 6 + 3, len(set(opened))  # file 0, log2(64) probes per range kind, 3 holders
