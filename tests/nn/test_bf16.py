"""``--precision bf16``: the compiled aggregation (both builds) and the bfloat16 dropout kernels
against float64 and float32 references, the layers and models in bfloat16 against float32, and
bfloat16 training."""
import numpy as np
import pytest
import torch

from hpcgnn import nn as hnn
from hpcgnn.nn.aggregate import CSR, spmm
from hpcgnn.sampling import Block

BUILDS = ["fast", "portable"]


@pytest.fixture(params=BUILDS)
def build(request, monkeypatch):
    """Each kernel build: the AVX-512 one where the CPU has AVX512-BF16, and the portable one forced."""
    from hpcgnn import _spmm

    if request.param == "fast" and not _spmm.has_avx512bf16():
        pytest.skip("this CPU has no AVX512-BF16")
    monkeypatch.setenv("HPCGNN_PORTABLE_KERNELS", "1" if request.param == "portable" else "0")
    return request.param


def random_matrix(rng, rows, cols, weighted):
    degrees = rng.integers(0, 9, rows)
    degrees[::7] = 0  # rows without entries
    indptr = np.concatenate([[0], np.cumsum(degrees)]).astype(np.int64)
    col = rng.integers(0, cols, indptr[-1]).astype(np.int64)  # repeated columns included
    weight = rng.random(indptr[-1]).astype(np.float32) if weighted else None
    dense = np.zeros((rows, cols))
    np.add.at(dense, (np.repeat(np.arange(rows), degrees), col), 1.0 if weight is None else weight)
    return CSR(indptr, col, weight, cols), torch.from_numpy(dense)


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 1e-2)], ids=["fp32", "bf16"])
@pytest.mark.parametrize("weighted", [False, True], ids=["ones", "weights"])
def test_spmm_and_its_gradient_equal_the_dense_product(build, dtype, tol, weighted):
    rng = np.random.default_rng(5)
    for rows, cols, dim in ((30, 50, 7), (200, 120, 64), (3, 4, 1)):
        matrix, dense = random_matrix(rng, rows, cols, weighted)
        h = torch.randn(cols, dim, generator=torch.Generator().manual_seed(dim)).to(dtype).requires_grad_()
        out = spmm(matrix, h)
        assert out.dtype == dtype
        expected = dense @ h.detach().double()  # exact on the rounded inputs: only the output rounds
        assert torch.allclose(out.double(), expected, rtol=tol, atol=tol * expected.abs().max())
        upstream = torch.randn(rows, dim).to(dtype)
        out.backward(upstream)
        expected_grad = dense.t() @ upstream.double()
        assert torch.allclose(h.grad.double(), expected_grad, rtol=tol, atol=tol * expected_grad.abs().max())


def test_bf16_aggregation_accumulates_in_float32(build):
    # 4096 ones: a bfloat16 running sum sticks at 256 (256 + 1 rounds back to 256)
    matrix = CSR(np.array([0, 4096]), np.zeros(4096, dtype=np.int64), None, 1)
    out = spmm(matrix, torch.ones(1, 3, dtype=torch.bfloat16))
    assert out.float().tolist() == [[4096.0] * 3]


def test_bf16_dropout_kernels_round_the_float32_results():
    from hpcgnn import _dense

    rng = np.random.default_rng(1)
    x = torch.from_numpy(rng.standard_normal(10_003).astype(np.float32)).bfloat16()
    as16 = lambda t: t.view(torch.int16).numpy().view(np.uint16)  # noqa: E731
    wide = x.float().numpy()
    for name in ("dropout", "relu_dropout"):
        for threshold in (0, 32768, 65535):
            want, got = np.empty_like(wide), torch.empty_like(x)
            getattr(_dense, name)(wide, want, 77, threshold, np.float32(1.3))
            getattr(_dense, name)(as16(x), as16(got), 77, threshold, np.float32(1.3))
            assert torch.equal(got, torch.from_numpy(want).bfloat16()), (name, threshold)
    grad = torch.from_numpy(rng.standard_normal(10_003).astype(np.float32)).bfloat16()
    want, got = np.empty_like(wide), torch.empty_like(x)
    _dense.where_positive(grad.float().numpy(), wide, want, np.float32(2.0))
    _dense.where_positive(as16(grad), as16(x), as16(got), np.float32(2.0))
    assert torch.equal(got, torch.from_numpy(want).bfloat16())


def random_blocks(rng, sizes=(300, 60, 12), degree=5):
    blocks = []
    for num_src, num_dst in zip(sizes, sizes[1:]):
        indptr = np.arange(0, num_dst * degree + 1, degree, dtype=np.int64)
        src = rng.integers(0, num_src, num_dst * degree).astype(np.int64)
        blocks.append(Block(num_src, num_dst, indptr, src, np.arange(src.shape[0], dtype=np.int64)))
    return blocks


def relative(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


@pytest.mark.parametrize("model", ["sage", "gcn", "gat", "sage-gcn"])
def test_bf16_models_agree_with_float32(build, model):
    torch.manual_seed(0)
    rng = np.random.default_rng(2)
    make = {"sage": lambda: hnn.SAGE(32, 48, 6, dropout=0.0), "gcn": lambda: hnn.GCN(32, 48, 6, dropout=0.0),
            "gat": lambda: hnn.GAT(32, 12, 6, heads=2, dropout=0.0),
            "sage-gcn": lambda: hnn.SAGE(32, 48, 6, aggregator="gcn", dropout=0.0)}[model]
    net, blocks = make(), random_blocks(rng)
    x, upstream = torch.randn(300, 32), torch.randn(12, 6)
    degree = torch.full((300,), 5.0) if net.needs_degrees else None
    results = {}
    for precision in ("fp32", "bf16"):
        hnn.set_precision(net, precision)
        net.zero_grad()
        out = net(blocks, x, degree)
        assert out.dtype == torch.float32  # losses are taken in float32
        (out * upstream).sum().backward()
        results[precision] = [out.detach()] + [p.grad.clone() for p in net.parameters()]
        layer = net.layer_forward(0, hnn.BlockTensors(blocks[0], degree), x)
        results[precision].append(layer.detach())
    out32, *rest32 = results["fp32"]
    out16, *rest16 = results["bf16"]
    assert relative(out16, out32) < 2e-2
    assert all(relative(g16, g32) < 1e-1 for g16, g32 in zip(rest16, rest32) if g32.norm() > 0)
    assert not torch.equal(out16, out32)  # the bfloat16 arithmetic did run


@pytest.mark.mpi(sizes=(2,))
def test_bf16_training_learns(nranks, comm, shared_tmp):
    from hpcgnn.testing.datasets import make_dataset
    from hpcgnn.testing.training import assert_learns
    from hpcgnn.training.config import parse_args

    path, _ = make_dataset(comm, shared_tmp, nranks, num_nodes=800, p_inside=0.9)
    args = parse_args(["--data", path, "--precision", "bf16", "--hidden", "32", "--fanouts", "5,5", "--epochs", "8",
                       "--batch-size", "50", "--lr", "0.01", "--eval-every", "8", "--no-progress", "--prefetch", "0"])
    assert_learns(comm, args, 0.55)  # chance: 0.25


def test_bf16_gemm_rows_are_bucketed():
    from hpcgnn.nn.gemm import bucket_rows, linear

    sizes = [bucket_rows(n) for n in range(1, 70_000)]
    assert all(n <= b <= max(n, n * 1.125) for n, b in zip(range(1, 70_000), sizes))
    assert len(set(sizes[4096:8191])) == 8  # 8 shapes for the octave [4096, 8192)
    x, w, b = torch.randn(1000, 24), torch.randn(16, 24), torch.randn(16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = linear(x, w, b)
        plain = torch.nn.functional.linear(x, w, b)
    assert out.shape == (1000, 16) and torch.allclose(out.float(), plain.float(), rtol=1e-2, atol=1e-2)
    assert torch.equal(linear(x, w, b), torch.nn.functional.linear(x, w, b))  # float32: unchanged


@pytest.mark.parametrize("dtype", [np.float32, np.uint16], ids=["fp32", "bf16"])
def test_spmm_threads_split_rows_without_changing_a_bit(dtype):
    from hpcgnn import _spmm

    rng = np.random.default_rng(9)
    matrix, _ = random_matrix(rng, 500, 300, weighted=True)
    h = rng.standard_normal(300 * 16).astype(np.float32)
    h = (h.view(np.uint32) >> 16).astype(np.uint16) if dtype == np.uint16 else h  # bfloat16 bits
    outs = []
    for threads in (1, 3, 600):  # more threads than rows: one row each at most
        out = np.empty(500 * 16, dtype=dtype)
        _spmm.spmm(matrix.indptr, matrix.col, matrix.weight, h, out, 16, True, threads)
        outs.append(out)
    assert all(np.array_equal(outs[0], other) for other in outs[1:])


def even_dataset(comm, shared_tmp, parts):
    """Collective over comm. A clustered graph dealt out in contiguous blocks of ids (the same
    node and edge ids at any part count) with the same training-node count in every block."""
    import os

    from hpcgnn.prep import partition
    from hpcgnn.testing.graphs import clustered_graph

    path = os.path.join(shared_tmp, f"even{parts}")
    if comm.rank == 0 and not os.path.exists(path):
        graph = clustered_graph(num_nodes=400, avg_degree=8, p_inside=0.9)
        kind = np.arange(400) % 4
        graph.ndata.update(train_mask=kind == 0, val_mask=kind == 1, test_mask=kind >= 2)
        original = partition.assign_parts
        partition.assign_parts = lambda g, csc, p, *a, **k: (np.arange(g.num_nodes) * p // g.num_nodes,
                                                             {"method": "contiguous"})
        try:
            partition.partition_graph(graph, path, parts, "random")
        finally:
            partition.assign_parts = original
    comm.barrier()
    return path


@pytest.mark.mpi(sizes=(4,))
@pytest.mark.parametrize("precision, rtol", [("bf16", 2e-2)])  # fp32: test_train's one-batch test
def test_training_on_n_ranks_equals_one_rank(nranks, comm, shared_tmp, precision, rtol):
    """Full neighbourhoods, one full batch a step, the same training-node count on every rank: the
    mean of the ranks' gradients is the one-process gradient, so N ranks train the one-process
    model (bf16: within its rounding, as sums run in another order)."""
    from hpcgnn.training.config import parse_args
    from hpcgnn.training.loop import run

    def train(path, group):
        model, history = run(parse_args(["--data", path, "--precision", precision, "--fanouts", "all,all",
                                         "--batch-size", "100000", "--dropout", "0", "--hidden", "16",
                                         "--epochs", "4", "--lr", "0.01", "--weight-decay", "0.05",
                                         "--eval-every", "0", "--no-progress",
                                         "--prefetch", "0"]), group)
        return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy(), [h["loss"] for h in history]

    # weight decay: Adam alone is nearly blind to the gradient's scale, which the mean must get right
    params, losses = train(even_dataset(comm, shared_tmp, nranks), comm)
    single = even_dataset(comm, shared_tmp, 1)
    alone = comm.Split(0 if comm.rank == 0 else 1, 0)
    reference = train(single, alone) if comm.rank == 0 else None
    alone.Free()
    ref_params, ref_losses = comm.bcast(reference, root=0)
    assert np.allclose(losses, ref_losses, rtol=rtol)
    scale = np.abs(ref_params).max()
    assert np.abs(params - ref_params).max() <= rtol * scale
    assert losses[-1] < losses[0]
