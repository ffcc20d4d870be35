"""The device path (``--device``, ``--kernels torch``, the device stage, checkpoints across devices).

What needs no GPU runs everywhere: the torch kernels against the compiled ones over a training run,
the device stage's staging on the CPU (``HPCGNN_DEVICE_STAGE=1``), a checkpoint whose tensors were
saved on a GPU resuming on the CPU, and the one-line refusals. Tests that need a GPU skip cleanly
without one.
"""
import io
import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import torch

from hpcgnn.testing.datasets import make_dataset
from tests.conftest import mpiexec_path

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")


def args(path, *extra):
    from hpcgnn.training.config import parse_train_config

    return parse_train_config(["--data", path, "--hidden", "16", "--fanouts", "3,4", "--batch-size", "40",
                               "--epochs", "2", "--eval-every", "0", "--lr", "0.01", "--no-progress",
                               "--prefetch", "1", *extra])


def losses(history):
    return [h["loss"] for h in history]


@pytest.mark.mpi(sizes=(1, 2, 4))
def test_torch_kernels_match_the_compiled_kernels_over_a_run(nranks, comm, shared_tmp):
    from hpcgnn.training.loop import run

    path, _ = make_dataset(comm, shared_tmp, nranks, num_nodes=400)
    _, compiled = run(args(path, "--kernels", "compiled"), comm)
    _, torch_path = run(args(path, "--kernels", "torch"), comm)
    assert np.allclose(losses(torch_path), losses(compiled), rtol=1e-4, atol=1e-6), (losses(torch_path),
                                                                                    losses(compiled))
    assert abs(torch_path[-1]["test_acc"] - compiled[-1]["test_acc"]) <= 0.02


@pytest.mark.mpi(sizes=(2,))
@pytest.mark.parametrize("extra", [[], ["--embed-dim", "3", "--overlap"]], ids=["features", "embedding+overlap"])
def test_the_device_stage_leaves_the_losses_unchanged(nranks, comm, shared_tmp, extra, monkeypatch):
    """The staging a GPU run does (pinned buffers, block tensors built ahead, batches handed over a
    step late) run on the CPU: the same losses, bit for bit, as batches handed over as made."""
    from hpcgnn.loading.device_stage import STAGE_ENV
    from hpcgnn.training.loop import run

    path, _ = make_dataset(comm, shared_tmp, nranks, num_nodes=400)
    _, plain = run(args(path, "--kernels", "torch", *extra), comm)
    monkeypatch.setenv(STAGE_ENV, "1")
    _, staged = run(args(path, "--kernels", "torch", *extra), comm)
    assert losses(staged) == losses(plain)
    assert staged[-1]["test_acc"] == plain[-1]["test_acc"]
    assert all(h["phases_s"]["copy"][1] > 0 for h in staged)  # the stage did run
    assert all(h["phases_s"]["copy"][1] == 0 for h in plain)


@pytest.mark.mpi(sizes=(2, 4))
@pytest.mark.parametrize("budget,force_rma", [("100", "0"), ("100", "1"), ("0.002", "0")],
                         ids=["node-rows", "own-part-only", "cut-by-budget"])
def test_rows_kept_on_the_device_leave_the_losses_unchanged(nranks, comm, shared_tmp, budget, force_rma,
                                                            monkeypatch):
    """Batches gathered from the rows kept on the device (every node row; only the rank's own part
    when every rank is its own node; a budget that cuts a part) give the same losses, bit for bit,
    as batches gathered on the host, and the gather left to the host shrinks."""
    import json

    from hpcgnn.loading.device_stage import STAGE_ENV
    from hpcgnn.training.loop import run

    path, _ = make_dataset(comm, shared_tmp, nranks, num_nodes=400)
    monkeypatch.setenv(STAGE_ENV, "1")
    monkeypatch.setenv("HPCGNN_FORCE_RMA", force_rma)
    runs = {}
    for mb in ("0", budget):
        metrics = os.path.join(shared_tmp, f"rows_{mb}.jsonl")
        _, history = run(args(path, "--kernels", "torch", "--device-rows-mb", mb, "--metrics-file", metrics), comm)
        with open(metrics) as fh:
            header = json.loads(fh.readline())
        runs[mb] = history, header["settings"]["device_rows"], header["dataset"]["num_nodes"]
    (host, none_kept, _), (kept_run, kept, num_nodes) = runs["0"], runs[budget]
    assert none_kept == 0
    assert losses(kept_run) == losses(host)
    assert kept_run[-1]["test_acc"] == host[-1]["test_acc"]
    if budget == "0.002":  # 65 rows of the 8 float32 features: less than a part at 4 ranks
        assert 0 < kept < num_nodes / nranks
    elif force_rma == "1" and nranks > 1:
        assert 0 < kept < num_nodes
    else:
        assert kept == num_nodes


def test_resident_ranges_take_the_own_part_first_then_the_node_in_order():
    from hpcgnn.loading.device_rows import resident_ranges
    from hpcgnn.store.partition_book import PartitionBook

    book = PartitionBook([0, 10, 30, 35, 50])  # parts of 10, 20, 5 and 15 rows
    every = np.arange(4)
    assert resident_ranges(book, 1, every, 4, 10**6) == [(0, 50)]  # all, merged into one range
    assert resident_ranges(book, 2, every, 4, 4 * 25) == [(0, 20), (30, 35)]  # parts 2, 0, 1 cut
    assert resident_ranges(book, 2, every, 4, 4 * 4) == [(30, 34)]  # the own part, cut
    assert resident_ranges(book, 3, np.array([3]), 4, 10**6) == [(35, 50)]  # alone on its node
    assert resident_ranges(book, 0, every, 4, 0) == []


@pytest.mark.parametrize("encoding", [None, "bfloat16"])
def test_resident_rows_assemble_a_batch_as_the_host_gather_does(encoding):
    """Rows kept in several ranges, repeated and missing ids: the assembled batch equals the rows
    gathered directly, and only the missing ids are gathered on the host."""
    from hpcgnn.loading.device_rows import ResidentRows
    from hpcgnn.store import float_rows

    rng = np.random.default_rng(0)
    values = rng.standard_normal((60, 3)).astype(np.float32)
    stored = values.view(np.uint32) >> 16 if encoding else values

    class Field:
        shape, encoding = (60, 3), None

        def gather(self, gids):
            return stored[np.asarray(gids)].astype(np.uint16) if encoding else stored[np.asarray(gids)]

    field = Field()
    field.encoding = encoding
    kept = ResidentRows(field, [(5, 12), (20, 31), (40, 41)], torch.device("cpu"))
    assert kept.rows == 7 + 11 + 1
    asked = []

    def host(gids):
        asked.append(np.asarray(gids))
        return float_rows(field.gather(gids), encoding)

    for gids in (np.array([5, 30, 40, 6, 6, 21]), np.array([0, 25, 59, 11, 41, 40, 12, 5, 19])):
        rows = kept.split(gids, host)
        got = kept.assemble(rows, lambda t: t.clone())
        assert torch.equal(got, float_rows(field.gather(gids), encoding))
    assert len(asked) == 1 and asked[0].tolist() == [0, 59, 41, 12, 19]


def test_the_stage_hands_over_each_batch_once_in_order(monkeypatch):
    """One step ahead: batch i is handed over after batch i + 1 was sent, none lost or repeated,
    and its arrays are copies (the loader's own batch is left as it was)."""
    from hpcgnn.loading.device_stage import DeviceStage
    from hpcgnn.sampling.block import Block, MiniBatch

    def batch(i):
        block = Block(3, 2, np.array([0, 1, 3]), np.array([2, 0, 1]), np.arange(3), dst_degree=np.array([1, 2]))
        return MiniBatch(np.array([i, i + 1]), np.arange(3), [block], feat=torch.full((3, 4), float(i)),
                         label=torch.tensor([i, i]), extra={"loss_weight": torch.ones(2) * i})

    made = [batch(i) for i in range(5)]
    from hpcgnn.nn import as_block_tensors

    stage = DeviceStage("cpu", as_block_tensors, active=True)
    seen = []
    for got, original in zip(stage(iter(made)), made):
        assert got is not original and got.feat is not original.feat
        assert torch.equal(got.feat, original.feat) and torch.equal(got.label, original.label)
        assert torch.equal(got.extra["loss_weight"], original.extra["loss_weight"])
        assert torch.equal(got.blocks[0].src, torch.tensor([2, 0, 1]))
        seen.append(int(got.label[0]))
    assert seen == list(range(5))
    assert isinstance(made[0].blocks[0], Block)  # the loader's batch untouched
    assert DeviceStage("cpu", as_block_tensors, active=False)(made) is made  # on the CPU: the identity


def _storages_on(path, location):
    """Rewrite the torch checkpoint ``path`` as if its tensors had been saved from ``location``
    (``cuda:0``): each storage's recorded device is what torch.load restores to."""
    with zipfile.ZipFile(path) as zf:
        entries = [(info, zf.read(info)) for info in zf.infolist()]
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zf:
        for info, data in entries:
            if info.filename.endswith("/data.pkl"):
                # the location string, as pickle protocol 2 writes it (BINUNICODE: 4-byte length)
                moved = data.replace(b"X\x03\x00\x00\x00cpu", b"X" + len(location).to_bytes(4, "little") +
                                     location.encode())
                assert moved != data
                data = moved
            zf.writestr(info, data)
    with open(path, "wb") as fh:
        fh.write(out.getvalue())


@no_gpu
@pytest.mark.mpi(sizes=(2,))
def test_a_checkpoint_saved_on_a_gpu_resumes_on_the_cpu(nranks, comm, shared_tmp):
    """A GPU run's checkpoint records its tensors' device; resuming on a machine without one maps
    them to the CPU, and the resumed run continues the uninterrupted one's losses."""
    from hpcgnn.training.loop import run

    path, _ = make_dataset(comm, shared_tmp, nranks, num_nodes=400)
    full_dir, cut_dir = os.path.join(shared_tmp, "full"), os.path.join(shared_tmp, "cut")
    flags = ["--epochs", "4", "--checkpoint-every", "1"]
    _, full = run(args(path, *flags, "--checkpoint-dir", full_dir), comm)
    run(args(path, "--epochs", "2", "--checkpoint-dir", cut_dir), comm)
    if comm.rank == 0:
        written = os.path.join(cut_dir, "epoch-0002.pt")
        _storages_on(written, "cuda:0")
        with pytest.raises(RuntimeError, match="CUDA"):  # what the file now says: tensors of a GPU
            torch.load(written, weights_only=True)
    comm.barrier()
    _, resumed = run(args(path, *flags, "--checkpoint-dir", cut_dir, "--resume"), comm)
    assert losses(resumed) == losses(full)


def test_checkpoint_state_goes_to_host_memory():
    from hpcgnn.training.checkpoint import on_host

    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    state = model.state_dict()
    moved = on_host({"model": state, "nested": [torch.ones(2), (torch.zeros(1), 3)], "n": 1})
    assert moved["model"]._metadata == state._metadata  # module versions, which loading reads
    assert all(t.device.type == "cpu" for t in moved["model"].values())
    assert moved["nested"][1][1] == 3 and moved["n"] == 1


def run_command(prog, data, *extra, ranks=2):
    return subprocess.run([mpiexec_path(), "-n", str(ranks), sys.executable, "-m", f"hpcgnn.{prog}", "--data",
                           str(data), *extra], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))


@no_gpu
def test_cuda_without_a_gpu_is_one_line_naming_ranks_and_hosts(tmp_path):
    from hpcgnn.prep.partition import partition_graph
    from hpcgnn.testing.graphs import clustered_graph

    partition_graph(clustered_graph(num_nodes=200), tmp_path / "d", 2, "metis")
    proc = run_command("train", tmp_path / "d", "--epochs", "1", "--hidden", "8", "--fanouts", "3,3",
                       "--no-progress", "--device", "cuda")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "error" in line]
    assert len(lines) == 1, proc.stderr
    host = os.uname().nodename
    assert lines[0].startswith("hpcgnn train: error: field '--device': no CUDA GPU visible to rank 0 on host "
                               f"{host}, rank 1 on host {host}"), lines[0]
    assert lines[0].endswith("(value cuda)"), lines[0]


def test_compiled_kernels_on_a_gpu_are_refused_in_one_line(tmp_path):
    from hpcgnn.runtime.errors import InputError
    from hpcgnn.training.config import parse_train_config

    with pytest.raises(InputError, match=r"field '--kernels': the compiled kernels run on the CPU only.*"
                                         r"\(value compiled\)"):
        parse_train_config(["--data", str(tmp_path), "--device", "cuda", "--kernels", "compiled"])
    assert parse_train_config(["--data", str(tmp_path), "--device", "cuda"]).model.kernels == "torch"
    assert parse_train_config(["--data", str(tmp_path)]).model.kernels == "compiled"
    with pytest.raises(InputError, match="field '--sampler': does not run on --device cuda"):
        parse_train_config(["--data", str(tmp_path), "--device", "cuda", "--sampler", "vr"])


def test_auto_is_cuda_only_where_torch_sees_a_gpu(tmp_path):
    from hpcgnn.training.config import parse_train_config

    config = parse_train_config(["--data", str(tmp_path), "--device", "auto"])
    assert config.runtime.device == ("cuda" if torch.cuda.is_available() else "cpu")


# -- on a GPU -----------------------------------------------------------------------------------------


@needs_gpu
@pytest.mark.mpi(sizes=(1, 2))
def test_a_gpu_run_matches_the_torch_kernels_on_the_cpu(nranks, comm, shared_tmp):
    from hpcgnn.training.loop import run

    path, _ = make_dataset(comm, shared_tmp, nranks, num_nodes=400)
    _, cpu = run(args(path, "--kernels", "torch", "--dropout", "0"), comm)
    _, gpu = run(args(path, "--device", "cuda", "--dropout", "0"), comm)
    assert np.allclose(losses(gpu), losses(cpu), rtol=1e-3, atol=1e-5), (losses(gpu), losses(cpu))
    assert gpu[-1]["gpu_memory_peak_MiB"] > 0


@needs_gpu
@pytest.mark.mpi(sizes=(2,))
def test_a_gpu_checkpoint_resumes_on_the_cpu_and_back(nranks, comm, shared_tmp):
    from hpcgnn.training.loop import run

    path, _ = make_dataset(comm, shared_tmp, nranks, num_nodes=400)
    common = ["--dropout", "0", "--checkpoint-every", "1", "--kernels", "torch"]
    gpu_dir, cpu_dir = os.path.join(shared_tmp, "gpu"), os.path.join(shared_tmp, "cpu")
    _, full = run(args(path, "--epochs", "4", *common, "--checkpoint-dir", os.path.join(shared_tmp, "f")), comm)
    run(args(path, "--epochs", "2", *common, "--device", "cuda", "--checkpoint-dir", gpu_dir), comm)
    _, on_cpu = run(args(path, "--epochs", "4", *common, "--checkpoint-dir", gpu_dir, "--resume"), comm)
    run(args(path, "--epochs", "2", *common, "--checkpoint-dir", cpu_dir), comm)
    _, on_gpu = run(args(path, "--epochs", "4", *common, "--device", "cuda", "--checkpoint-dir", cpu_dir,
                         "--resume"), comm)
    assert np.allclose(losses(on_cpu), losses(full), rtol=1e-3, atol=1e-5)
    assert np.allclose(losses(on_gpu), losses(full), rtol=1e-3, atol=1e-5)


@needs_gpu
@pytest.mark.mpi(sizes=(2,))
@pytest.mark.parametrize("scheme", [[], ["--overlap", "--bucket-mb", "0.001"], ["--grad-compress", "bf16"]],
                         ids=["blocking", "overlap", "bf16"])
def test_gradients_reduced_through_host_memory_agree_on_every_rank(nranks, comm, shared_tmp, scheme):
    from hpcgnn.training.loop import run

    path, _ = make_dataset(comm, shared_tmp, nranks, num_nodes=400)
    model, history = run(args(path, "--device", "cuda", *scheme), comm)
    params = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).cpu().numpy()
    assert all(np.array_equal(params, other) for other in comm.allgather(params))
    assert history[-1]["loss"] < history[0]["loss"] * 1.5
