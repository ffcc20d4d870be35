"""Layers and fused kernels against dense references (forward values and gradients)."""
import numpy as np
import pytest
import torch
from torch.nn import functional as F

from hpcgnn import nn as hnn
from hpcgnn.sampling import Block
from hpcgnn.testing.reference import dropout_mask


def random_block(rng, num_src=40, num_dst=12, max_degree=6):
    degrees = rng.integers(0, max_degree + 1, num_dst)
    degrees[0] = 0  # a destination without in-edges
    indptr = np.concatenate([[0], np.cumsum(degrees)]).astype(np.int64)
    src_pos = np.concatenate([rng.choice(num_src, d, replace=False) for d in degrees]).astype(np.int64)
    return Block(num_src, num_dst, indptr, src_pos, np.arange(src_pos.shape[0], dtype=np.int64))


def dense_adjacency(block):
    a = torch.zeros(block.num_dst, block.num_src, dtype=torch.float64)
    a[torch.from_numpy(block.dst_index()), torch.from_numpy(block.src_pos)] = 1.0
    return a


@pytest.mark.parametrize("fast", [True, False], ids=["avx512", "portable"])
def test_dropout_kernel_equals_reference_mask(fast):
    from hpcgnn import _dense, _spmm

    if fast and not _spmm.has_avx512():
        pytest.skip("this CPU has no AVX-512")

    rng = np.random.default_rng(0)
    for n in (0, 1, 5, 257, 10_003):
        x = rng.standard_normal(n).astype(np.float32)
        out = np.empty_like(x)
        for threshold in (0, 1, 32768, 65535, 65536):
            scale = np.float32(1.7)
            keep = dropout_mask(123, n, threshold)
            _dense.dropout(x, out, 123, threshold, scale, fast=fast)
            np.testing.assert_array_equal(out, np.where(keep, x * scale, np.float32(0)))
            _dense.relu_dropout(x, out, 123, threshold, scale, fast=fast)
            np.testing.assert_array_equal(out, np.where(keep & (x > 0), x * scale, np.float32(0)))
    with pytest.raises(ValueError, match="elements"):
        _dense.dropout(np.zeros(3, np.float32), np.zeros(4, np.float32), 1, 0, 1.0)


def test_dropout_keeps_the_right_fraction_and_streams_differ():
    hnn.seed_dropout(5)
    layer = hnn.Dropout(0.3)
    h = torch.ones(400, 250)
    first, second = layer(h), layer(h)
    for out in (first, second):
        kept = (out != 0).double().mean().item()
        assert abs(kept - 0.7) < 4 * np.sqrt(0.21 / h.numel()), kept
        assert torch.allclose(out[out != 0], torch.tensor(1 / (1 - 0.3)), rtol=1e-4)
    assert not torch.equal(first, second)
    layer.eval()
    assert layer(h) is h


@pytest.mark.parametrize("relu", [False, True])
def test_dropout_gradient_uses_the_forward_mask(relu):
    hnn.seed_dropout(11)
    layer = hnn.Dropout(0.5, relu=relu)
    h = torch.randn(37, 19, requires_grad=True)
    out = layer(h)
    upstream = torch.randn_like(out)
    (out * upstream).sum().backward()
    kept = out != 0
    if not relu:
        # where x is exactly 0 the mask is not visible in the output; randn never gives 0
        assert torch.equal(out, torch.where(kept, h.detach() * 2, torch.zeros(())))
    else:
        assert torch.equal(out, torch.where(kept, F.relu(h.detach()) * 2, torch.zeros(())))
        assert bool((h.detach()[kept] > 0).all())
    assert torch.allclose(h.grad, torch.where(kept, upstream * 2, torch.zeros(())))


def reference_layer(layer, block, h):
    """The layer's formula on dense float64 matrices."""
    a = dense_adjacency(block)
    deg = a.sum(1, keepdim=True)
    h = h.double()
    h_dst = h[: block.num_dst]
    p = {k: v.detach().double() for k, v in layer.named_parameters()}
    if isinstance(layer, hnn.SAGEConv) and layer.aggregator == "mean":
        mean = (a @ h) / deg.clamp(min=1)
        return h_dst @ p["fc_self.weight"].t() + p["fc_self.bias"] + mean @ p["fc_neigh.weight"].t()
    if isinstance(layer, hnn.SAGEConv):
        return ((a @ h + h_dst) / (deg + 1)) @ p["fc_neigh.weight"].t() + p["fc_neigh.bias"]
    if isinstance(layer, hnn.GraphConv):
        # block degrees stand in for graph degrees when the block carries none
        d_src = (a.sum(0) + 1).rsqrt().unsqueeze(1)
        d_dst = (deg + 1).rsqrt()
        z = (h @ p["linear.weight"].t()) * d_src
        return (a @ z + z[: block.num_dst]) * d_dst + p["linear.bias"]
    raise AssertionError(layer)


@pytest.mark.parametrize("make", [
    lambda: hnn.SAGEConv(8, 5, "mean"),    # the map shrinks: applied before aggregating, one narrow GEMM
    lambda: hnn.SAGEConv(48, 40, "mean"),  # shrinks to a wide output: two GEMMs
    lambda: hnn.SAGEConv(5, 8, "mean"),    # the map widens: aggregate first, one fused GEMM
    lambda: hnn.SAGEConv(8, 5, "gcn"),
    lambda: hnn.SAGEConv(5, 8, "gcn"),
    lambda: hnn.GraphConv(6, 4),
], ids=["sage-shrink", "sage-shrink-wide", "sage-widen", "sagegcn-shrink", "sagegcn-widen", "gcn"])
def test_layer_equals_dense_reference(make):
    torch.manual_seed(0)
    rng = np.random.default_rng(3)
    layer = make()
    block = random_block(rng)
    in_dim = layer.fc_neigh.in_features if isinstance(layer, hnn.SAGEConv) else layer.linear.in_features
    h = torch.randn(block.num_src, in_dim, requires_grad=True)
    out = layer(hnn.BlockTensors(block), h)
    expected = reference_layer(layer, block, h)
    assert torch.allclose(out.double(), expected, atol=1e-5)
    upstream = torch.randn_like(out)
    (out * upstream).sum().backward()
    h_ref = h.detach().double().requires_grad_()
    (reference_layer(layer, block, h_ref) * upstream.double()).sum().backward()
    assert torch.allclose(h.grad.double(), h_ref.grad, atol=1e-5)


def test_gat_attention_is_a_softmax_over_in_edges_and_self():
    torch.manual_seed(0)
    rng = np.random.default_rng(4)
    block = random_block(rng)
    layer = hnn.GATConv(6, 3, heads=2)
    h = torch.randn(block.num_src, 6)
    out = layer(hnn.BlockTensors(block), h)
    a = dense_adjacency(block).bool()
    a[torch.arange(block.num_dst), torch.arange(block.num_dst)] = True
    z = (h @ layer.linear.weight.t()).view(-1, 2, 3).double()
    for head in range(2):
        s_src = (z[:, head] * layer.attn_src[head].double()).sum(-1)
        s_dst = (z[: block.num_dst, head] * layer.attn_dst[head].double()).sum(-1)
        logits = F.leaky_relu(s_dst[:, None] + s_src[None, :], 0.2).masked_fill(~a, float("-inf"))
        expected = torch.softmax(logits, 1) @ z[:, head] + layer.bias.view(2, 3)[head].double()
        assert torch.allclose(out.view(-1, 2, 3)[:, head].double(), expected.detach(), atol=1e-5)
