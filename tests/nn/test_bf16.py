"""``--precision bf16``: the compiled aggregation (both builds) and the bfloat16 dropout kernels
against float64 and float32 references, the layers and models in bfloat16 against float32, and
bfloat16 training."""
import numpy as np
import pytest
import torch

from hpcgnn import nn as hnn
from hpcgnn.nn.aggregate import CSR, spmm
from hpcgnn.sampling import Block
from hpcgnn.testing.reference import random_sparse_rows

BUILDS = ["fast", "portable"]


def relative(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


@pytest.fixture(params=BUILDS)
def build(request, monkeypatch):
    """Each kernel build: the AVX-512 one where the CPU has AVX-512, and the portable one forced."""
    from hpcgnn import _spmm

    if request.param == "fast" and not _spmm.has_avx512():
        pytest.skip("this CPU has no AVX-512")
    monkeypatch.setenv("HPCGNN_PORTABLE_KERNELS", "1" if request.param == "portable" else "0")
    return request.param


def random_matrix(rng, rows, cols, weighted):
    indptr, col, weight, dense = random_sparse_rows(rng, rows, cols, weighted)
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


def attention_reference(score_src, score_dst, z, rows, cols, heads):
    """GAT's softmax and weighted sum by gather, scatter and a per-edge message tensor."""
    logit = torch.nn.functional.leaky_relu(score_src[cols] + score_dst[rows], 0.2)
    peak = torch.full_like(score_dst, -torch.inf).scatter_reduce(0, rows[:, None].expand_as(logit), logit, "amax")
    weight = torch.exp(logit - peak[rows])
    alpha = weight / torch.zeros_like(score_dst).index_add_(0, rows, weight)[rows]
    message = z.view(z.shape[0], heads, -1)[cols] * alpha[..., None]
    out = torch.zeros(score_dst.shape[0], *message.shape[1:], dtype=z.dtype).index_add_(0, rows, message)
    return out.reshape(score_dst.shape[0], -1)


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)], ids=["fp32", "bf16"])
def test_attention_kernels_and_gradients_equal_float64(build, dtype, tol):
    from hpcgnn.nn.attention import edge_softmax, head_spmm

    rng = np.random.default_rng(8)
    for num_dst, num_src, heads, dim in ((40, 70, 3, 8), (5, 9, 1, 1), (120, 300, 4, 16)):
        degrees = rng.integers(1, 12, num_dst)  # every row has an entry (its self loop, in GAT)
        indptr = np.concatenate([[0], np.cumsum(degrees)]).astype(np.int64)
        col = rng.integers(0, num_src, indptr[-1]).astype(np.int64)  # repeated columns included
        matrix = CSR(indptr, col, None, num_src)
        generator = torch.Generator().manual_seed(dim)
        inputs = [torch.randn(num_src, heads, generator=generator), torch.randn(num_dst, heads, generator=generator),
                  torch.randn(num_src, heads * dim, generator=generator).to(dtype)]
        exact = [t.detach().double().requires_grad_() for t in inputs]
        mine = [t.detach().requires_grad_() for t in inputs]
        rows, cols = torch.from_numpy(np.repeat(np.arange(num_dst), degrees)), torch.from_numpy(col)
        expected = attention_reference(*exact, rows, cols, heads)
        out = head_spmm(matrix, mine[2], edge_softmax(matrix, mine[0], mine[1], 0.2))
        assert out.dtype == dtype
        assert torch.allclose(out.double(), expected.detach(), rtol=tol, atol=tol * expected.abs().max().item())
        upstream = torch.randn(expected.shape, generator=generator).to(dtype)
        expected.backward(upstream.double())
        out.backward(upstream)
        for got, want in zip(mine, exact):
            assert relative(got.grad, want.grad) < tol, (num_dst, heads, dim)


def test_bf16_attention_accumulates_in_float32(build):
    from hpcgnn.nn.attention import head_spmm

    matrix = CSR(np.array([0, 4096]), np.zeros(4096, dtype=np.int64), None, 1)
    out = head_spmm(matrix, torch.ones(1, 6, dtype=torch.bfloat16), torch.ones(4096, 2))
    assert out.float().tolist() == [[4096.0] * 6]


def test_bf16_dropout_kernels_round_the_float32_results(build):
    from hpcgnn import _dense

    fast = build == "fast"
    rng = np.random.default_rng(1)
    x = torch.from_numpy(rng.standard_normal(10_003).astype(np.float32)).bfloat16()
    as16 = lambda t: t.view(torch.int16).numpy().view(np.uint16)  # noqa: E731
    wide = x.float().numpy()
    for name in ("dropout", "relu_dropout"):
        for threshold in (0, 32768, 65535):
            want, got = np.empty_like(wide), torch.empty_like(x)
            getattr(_dense, name)(wide, want, 77, threshold, np.float32(1.3), fast=fast)
            getattr(_dense, name)(as16(x), as16(got), 77, threshold, np.float32(1.3), fast=fast)
            assert torch.equal(got, torch.from_numpy(want).bfloat16()), (name, threshold)
    grad = torch.from_numpy(rng.standard_normal(10_003).astype(np.float32)).bfloat16()
    want, got = np.empty_like(wide), torch.empty_like(x)
    _dense.where_positive(grad.float().numpy(), wide, want, np.float32(2.0), fast=fast)
    _dense.where_positive(as16(grad), as16(x), as16(got), np.float32(2.0), fast=fast)
    assert torch.equal(got, torch.from_numpy(want).bfloat16())


def test_the_fast_flag_picks_the_avx512_build_where_the_cpu_has_it():
    from hpcgnn import _spmm

    assert _spmm.build(True) == ("avx512" if _spmm.has_avx512() else "portable")
    assert _spmm.build(False) == "portable"


def test_dropout_kernel_builds_give_the_same_bits():
    """The AVX-512 and portable builds of every dropout kernel, on values that round, overflow
    and are not numbers: the build a node picks must not change a run."""
    from hpcgnn import _dense, _spmm

    if not _spmm.has_avx512():
        pytest.skip("this CPU has no AVX-512")
    rng = np.random.default_rng(3)
    bits = rng.integers(0, 2**32, 40_003, dtype=np.uint64).astype(np.uint32)  # random float32 patterns
    narrow = (bits >> 16).astype(np.uint16)
    # +-inf, NaN, -0, the smallest denormal, the largest finite, in each width
    bits[:6] = [0x7F800000, 0xFF800000, 0x7FC00001, 0x80000000, 0x00000001, 0x7F7FFFFF]
    narrow[:6] = [0x7F80, 0xFF80, 0x7FC1, 0x8000, 0x0001, 0x7F7F]
    wide = bits.view(np.float32)
    for x in (wide, narrow):
        for name in ("dropout", "relu_dropout"):
            for threshold in (0, 12345, 65535):
                outs = [np.empty_like(x) for _ in range(2)]
                for out, fast in zip(outs, (True, False)):
                    getattr(_dense, name)(x, out, 9, threshold, np.float32(1.7), fast=fast)
                np.testing.assert_array_equal(outs[0].view(np.uint8), outs[1].view(np.uint8), err_msg=name)
        grads = [np.empty_like(x) for _ in range(2)]
        for grad_in, fast in zip(grads, (True, False)):
            _dense.where_positive(x[::-1].copy(), x, grad_in, np.float32(1.7), fast=fast)
        np.testing.assert_array_equal(grads[0].view(np.uint8), grads[1].view(np.uint8))


def random_blocks(rng, sizes=(300, 60, 12), degree=5):
    blocks = []
    for num_src, num_dst in zip(sizes, sizes[1:]):
        indptr = np.arange(0, num_dst * degree + 1, degree, dtype=np.int64)
        src = rng.integers(0, num_src, num_dst * degree).astype(np.int64)
        blocks.append(Block(num_src, num_dst, indptr, src, np.arange(src.shape[0], dtype=np.int64)))
    return blocks


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
    from hpcgnn.training.config import parse_train_config

    path, _ = make_dataset(comm, shared_tmp, nranks, num_nodes=800, p_inside=0.9)
    args = parse_train_config(["--data", path, "--precision", "bf16", "--hidden", "32", "--fanouts", "5,5",
                       "--epochs", "8",
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


def test_bf16_padded_gemm_equals_f_pad_to_the_bit():
    from hpcgnn.nn.gemm import bucket_rows, linear, pad_rows

    torch.manual_seed(3)
    x = torch.randn(70, 24, requires_grad=True)
    w, b = torch.randn(16, 24, requires_grad=True), torch.randn(16, requires_grad=True)
    padded = bucket_rows(70)
    assert padded > 70
    with torch.autocast("cpu", dtype=torch.bfloat16):
        filler = torch.full((padded, 24), 7.0, dtype=torch.bfloat16)
        del filler  # a freed block the padded copy may reuse, not zeroed
        copy = pad_rows(x, padded)
        assert copy.dtype == torch.bfloat16 and torch.equal(copy[70:], torch.zeros(padded - 70, 24, dtype=copy.dtype))
        assert torch.equal(copy[:70], x.detach().to(torch.bfloat16))
    results = []
    for pad in (lambda t: pad_rows(t, padded), lambda t: torch.nn.functional.pad(t, (0, 0, 0, padded - 70))):
        for t in (x, w, b):
            t.grad = None
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = torch.nn.functional.linear(pad(x), w, b)[:70]
        (out.float() * torch.linspace(-1, 1, 16)).sum().backward()
        results.append([out.detach(), x.grad, w.grad, b.grad])
    assert results[0][1].dtype == torch.float32
    assert all(torch.equal(ours, theirs) for ours, theirs in zip(*results))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(linear(x, w, b), results[1][0])


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


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_attention_threads_split_rows_without_changing_a_bit(dtype):
    from hpcgnn.nn.attention import edge_softmax, head_spmm

    rng = np.random.default_rng(10)
    degrees = rng.integers(1, 9, 400)
    matrix = CSR(np.concatenate([[0], np.cumsum(degrees)]), rng.integers(0, 250, degrees.sum()), None, 250)
    generator = torch.Generator().manual_seed(3)
    inputs = [torch.randn(250, 2, generator=generator), torch.randn(400, 2, generator=generator),
              torch.randn(250, 2 * 16, generator=generator).to(dtype)]
    upstream = torch.randn(400, 32, generator=generator).to(dtype)
    saved = torch.get_num_threads()
    results = []
    try:
        for threads in (1, 3, 900):  # more threads than rows: one row each at most
            torch.set_num_threads(threads)
            leaves = [t.detach().requires_grad_() for t in inputs]
            out = head_spmm(matrix, leaves[2], edge_softmax(matrix, leaves[0], leaves[1]))
            out.backward(upstream)
            results.append([out] + [t.grad for t in leaves])
    finally:
        torch.set_num_threads(saved)
    assert all(torch.equal(a, b) for other in results[1:] for a, b in zip(results[0], other))


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
    from hpcgnn.training.config import parse_train_config
    from hpcgnn.training.loop import run

    def train(path, group):
        model, history = run(parse_train_config(["--data", path, "--precision", precision, "--fanouts", "all,all",
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


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_aggregation_and_attention_builds_give_the_same_bits(dtype, monkeypatch):
    """Forward and backward of the CSR product and of GAT's attention in the AVX-512 and the
    portable build (no fused multiply-add in either: setup.py)."""
    from hpcgnn import _spmm
    from hpcgnn.nn.attention import edge_softmax, head_spmm

    if not _spmm.has_avx512():
        pytest.skip("this CPU has no AVX-512")
    rng = np.random.default_rng(12)
    matrix, _ = random_matrix(rng, 300, 200, weighted=True)
    generator = torch.Generator().manual_seed(4)
    h = torch.randn(200, 48, generator=generator).to(dtype)
    scores = [torch.randn(200, 2, generator=generator), torch.randn(300, 2, generator=generator)]
    upstream = torch.randn(300, 48, generator=generator).to(dtype)
    results = []
    for switch in ("0", "1"):
        monkeypatch.setenv("HPCGNN_PORTABLE_KERNELS", switch)
        leaves = [t.detach().requires_grad_() for t in (h, *scores)]
        out = spmm(matrix, leaves[0]) + head_spmm(matrix, leaves[0], edge_softmax(matrix, leaves[1], leaves[2]))
        out.backward(upstream)
        results.append([out] + [t.grad for t in leaves])
    bits = lambda t: t.view(torch.int16 if t.dtype == torch.bfloat16 else torch.int32)  # noqa: E731
    for fast, portable in zip(*results):
        assert torch.equal(bits(fast), bits(portable))


def test_precision_note_names_the_kernel_build_and_missing_bf16_units(monkeypatch):
    from hpcgnn import _spmm
    from hpcgnn.nn.aggregate import precision_note

    assert precision_note("fp32") == "fp32"
    monkeypatch.setenv("HPCGNN_PORTABLE_KERNELS", "1")
    note = precision_note("bf16")
    assert "portable kernels" in note
    assert ("no bfloat16 units" in note) == (not _spmm.has_avx512bf16())
    monkeypatch.setenv("HPCGNN_PORTABLE_KERNELS", "0")
    assert ("AVX-512 kernels" in precision_note("bf16")) == _spmm.has_avx512()
