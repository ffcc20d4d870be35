"""Gradient reduction schemes: the overlapped bucketed Allreduce gives the blocking one's mean,
whatever order backward fills the buckets in and even when a parameter gets no gradient; the
compressions keep error feedback (over the steps nothing is lost) and say what they send."""
import numpy as np
import pytest
import torch

from hpcgnn.runtime.errors import InputError
from hpcgnn.training.config import parse_compression, parse_train_config
from hpcgnn.training.gradsync import FlatGradients, GradientSync, allreduce_bytes, build_sync


class Net(torch.nn.Module):
    """Three layers and a parameter no step uses (its bucket must still be reduced)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b, self.c = torch.nn.Linear(6, 32), torch.nn.Linear(32, 32), torch.nn.Linear(32, 3)
        self.unused = torch.nn.Parameter(torch.ones(5))

    def forward(self, x):
        return self.c(torch.relu(self.b(torch.relu(self.a(x)))))


def backward(model, sync, rank, step, last=True):
    """Local. One step's gradient of rank ``rank`` (different data on every rank and step)."""
    generator = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(16, 6, generator=generator) * (1 + rank)
    sync.arm(last)
    model(x).square().mean().backward()


def reduced(comm, steps, **flags):
    """Collective over comm. Every step's reduced gradient buffer, and each rank's own gradients."""
    model = Net()
    grads = FlatGradients(model)
    sync = build_sync(grads, comm, **flags)
    out, mine = [], []
    for step in range(steps):
        grads.zero()
        backward(model, sync, comm.rank, step)
        mine.append(grads.buffer.clone())
        sync.finish()
        out.append(grads.buffer.clone())
    state = sync.state()
    sync.close()
    return out, mine, state


def total(comm, tensor):
    """Collective over comm. The sum over ranks, in float64."""
    array = tensor.double().numpy().copy()
    from mpi4py import MPI
    comm.Allreduce(MPI.IN_PLACE, array, op=MPI.SUM)
    return array


@pytest.mark.mpi(sizes=(1, 2, 4))
def test_overlapped_buckets_give_the_blocking_mean(nranks, comm):
    blocking, mine, _ = reduced(comm, 3)
    for bucket_mb in (0.0005, 100.0):  # several buckets, one
        overlapped, _, _ = reduced(comm, 3, overlap=True, bucket_mb=bucket_mb)
        for step in range(3):
            assert np.allclose(overlapped[step].numpy(), blocking[step].numpy(), rtol=1e-6, atol=1e-7)
    for step in range(3):
        assert np.allclose(blocking[step].double().numpy(), total(comm, mine[step]) / nranks, rtol=1e-5, atol=1e-7)


@pytest.mark.mpi(sizes=(2,))
def test_overlap_starts_buckets_during_backward_and_in_bucket_order(nranks, comm):
    model = Net()
    grads = FlatGradients(model)
    sync = build_sync(grads, comm, overlap=True, bucket_mb=0.0005)
    assert len(sync.buckets) >= 3
    assert sync.buckets[0][0] == len(grads.params) - 1  # the last parameter's gradient comes first
    started = []
    original = sync._start_ready

    def spy(everything=False):
        original(everything)
        started.append((everything, len(sync.requests)))

    sync._start_ready = spy
    backward(model, sync, comm.rank, 0)
    during = max(count for everything, count in started if not everything)
    assert 0 < during < len(sync.buckets)  # some, not all: the unused parameter's bucket waits
    sync.finish()
    assert started[-1] == (True, len(sync.buckets))
    sync.close()


@pytest.mark.mpi(sizes=(4,))
def test_error_feedback_loses_nothing_over_the_steps(nranks, comm):
    """bf16 and top-k, in one launch."""
    steps = 6
    for compress in ("bf16", "topk:0.05"):
        out, mine, residual = reduced(comm, steps, compress=compress)
        sent = nranks * sum(o.double() for o in out).numpy()
        owed = total(comm, sum(m.double() for m in mine)) - total(comm, residual)
        scale = np.abs(owed).max()
        # top-k moves float32 values exactly; bf16 rounds each rank's terms and each sum once
        tolerance = 1e-5 if compress.startswith("topk") else 2 ** -8 * max(1, nranks - 1)
        assert np.abs(sent - owed).max() <= tolerance * scale * steps, compress
        assert np.abs(residual.numpy()).max() > 0, compress  # something really was held back


@pytest.mark.mpi(sizes=(2,))
def test_topk_sends_k_entries_per_rank_and_all_of_them_at_ratio_one(nranks, comm):
    out, mine, _ = reduced(comm, 1, compress="topk:0.05")
    n = mine[0].numel()
    k = int(np.ceil(0.05 * n))
    assert 0 < np.count_nonzero(out[0].numpy()) <= nranks * k
    everything, mine, residual = reduced(comm, 1, compress="topk:1")
    assert np.allclose(everything[0].double().numpy(), total(comm, mine[0]) / nranks, rtol=1e-6, atol=1e-8)
    assert not residual.any()


@pytest.mark.mpi(sizes=(4,))
def test_bf16_reduction_is_the_mean_within_bf16_rounding_rounded_once(nranks, comm):
    out, mine, _ = reduced(comm, 1, compress="bf16")
    exact = total(comm, mine[0]) / nranks
    magnitude = total(comm, mine[0].abs()) / nranks  # where the ranks' terms cancel, bf16 error is theirs
    error = np.abs(out[0].double().numpy() - exact)
    # each rank's terms rounded once (bf16 unit roundoff 2^-8 of each) and their float32 sum
    # rounded once more: not once per partial sum, whatever the rank count
    assert np.all(error <= 2 ** -8 * (magnitude + np.abs(exact)) * 1.01 + 1e-12)
    assert error.max() > 0  # it really was rounded

    model = torch.nn.Linear(3, 1, bias=False)
    grads = FlatGradients(model)
    sync = build_sync(grads, comm, compress="bf16")
    # 1 + 2^-8 rounds back to 1 in bfloat16: adding the three small terms one at a time loses
    # all of them, summing them in float32 and rounding once keeps them (to the even neighbour)
    grads.buffer.fill_(1.0 if comm.rank == 0 else 2.0 ** -8)
    sync.finish()
    assert torch.equal(grads.buffer, torch.full((3,), 1.015625 / nranks))
    sync.close()


def test_bytes_on_the_wire():
    model = Net()

    class Comm:
        size, rank = 4, 0

    n = FlatGradients(model).buffer.numel()
    assert GradientSync(FlatGradients(model), Comm()).bytes_per_step == allreduce_bytes(n, 4, 4) == 6 * n
    assert build_sync(FlatGradients(model), Comm(), compress="topk:0.5").bytes_per_step == 3 * int(np.ceil(n / 2)) * 8
    assert allreduce_bytes(n, 4, 1) == 0


@pytest.mark.parametrize("text", ["topk:0", "topk:1.5", "topk:x", "fp8", "topk"])
def test_bad_compression_is_one_line_error(text):
    with pytest.raises(InputError, match="--grad-compress"):
        parse_compression(text)


@pytest.mark.parametrize("flags, field", [(["--overlap", "--grad-compress", "bf16"], "--grad-compress"),
                                          (["--bucket-mb", "2"], "--bucket-mb"),
                                          (["--overlap", "--bucket-mb", "0"], "--bucket-mb")])
def test_flags_that_do_not_combine_are_refused(flags, field):
    with pytest.raises(InputError, match=field):
        parse_train_config(["--data", "x", *flags])


@pytest.mark.mpi(sizes=(2,))
def test_compressed_training_resumes_bit_exact(nranks, comm, shared_tmp):
    from hpcgnn.testing.datasets import make_dataset
    from hpcgnn.testing.training import assert_resume_bit_exact

    path, _ = make_dataset(comm, shared_tmp, nranks, name="compress_resume", num_nodes=300, avg_degree=6)

    def flags(epochs, directory, *extra):
        return parse_train_config(["--data", path, "--fanouts", "4,4", "--batch-size", "30", "--hidden", "16",
                           "--grad-compress", "topk:0.1", "--epochs", str(epochs), "--no-progress", "--prefetch", "0",
                           "--eval-every", "2", "--checkpoint-every", "1", "--checkpoint-dir", directory, *extra])

    assert_resume_bit_exact(comm, flags, shared_tmp, "compress")
