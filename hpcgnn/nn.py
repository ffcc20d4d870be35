"""GNN layers and models that run on the sampler's blocks, in plain PyTorch.

A block (see :class:`hpcgnn.sampler.Block`) is a bipartite graph from ``num_src`` source
nodes to ``num_dst`` destination nodes, the destinations being the first ``num_dst``
sources. Every model takes ``(blocks, x)`` with ``x`` the features of the first block's
sources and returns one row per destination of the last block.
"""
from __future__ import annotations

import functools
import warnings

import numpy as np
import torch
from torch import nn
from torch.autograd.function import once_differentiable
from torch.nn import functional as F

from hpcgnn import _dense

#: random stream of dropout seeds (seeded per rank by the trainer, saved in checkpoints)
dropout_rng = np.random.default_rng(0)


def seed_dropout(seed):
    """Local. Restart the dropout stream from ``seed``."""
    global dropout_rng
    dropout_rng = np.random.default_rng(seed)


def _flat(t):
    return t.detach().contiguous().view(-1).numpy()


class _DropoutFunction(torch.autograd.Function):
    """Dropout whose mask is a hash of (seed, element): backward recomputes it, nothing stored."""

    @staticmethod
    def forward(ctx, h, seed, threshold, scale):
        out = torch.empty_like(h, memory_format=torch.contiguous_format)
        _dense.dropout(_flat(h), out.view(-1).numpy(), seed, threshold, scale)
        ctx.mask = (seed, threshold, scale)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        grad_in = torch.empty_like(grad, memory_format=torch.contiguous_format)
        _dense.dropout(_flat(grad), grad_in.view(-1).numpy(), *ctx.mask)
        return grad_in, None, None, None


class _ReLUDropoutFunction(torch.autograd.Function):
    """``dropout(relu(h))`` in one pass; backward needs only the output (positive iff it
    passed both), which the next layer keeps anyway."""

    @staticmethod
    def forward(ctx, h, seed, threshold, scale):
        out = torch.empty_like(h, memory_format=torch.contiguous_format)
        _dense.relu_dropout(_flat(h), out.view(-1).numpy(), seed, threshold, scale)
        ctx.save_for_backward(out)
        ctx.scale = scale
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        grad_in = torch.empty_like(out)
        _dense.where_positive(_flat(grad), out.view(-1).numpy(), grad_in.view(-1).numpy(), ctx.scale)
        return grad_in, None, None, None


class Dropout(nn.Module):
    """Inverted dropout with a counter-based mask (see :mod:`hpcgnn._dense`): one pass each
    way on one CPU thread, where torch's Bernoulli sampling dominated a training step.
    ``p`` is rounded to a multiple of 2**-16; each call takes one seed from ``dropout_rng``.
    With ``relu=True`` the module computes ``dropout(relu(h))`` in the same pass."""

    def __init__(self, p=0.5, relu=False):
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p, self.relu = p, relu
        self._threshold = int(round(p * 65536))
        if self._threshold == 65536:
            raise ValueError(f"dropout probability {p} rounds to 1 in steps of 2**-16")
        self._scale = 65536.0 / (65536 - self._threshold)

    def forward(self, h):
        if not self.training or self._threshold == 0:
            return F.relu(h) if self.relu else h
        if h.dtype != torch.float32:  # the kernels are float32-only
            return F.dropout(F.relu(h) if self.relu else h, self.p)
        seed = int(dropout_rng.integers(0, 2**63))
        function = _ReLUDropoutFunction if self.relu else _DropoutFunction
        return function.apply(h, seed, self._threshold, self._scale)


def dropout_mask_reference(seed, n, threshold):
    """Local. The keep-mask (bool, length ``n``) of the dropout kernels, in numpy."""
    with np.errstate(over="ignore"):
        q = np.arange((n + 3) // 4, dtype=np.uint64)
        z = np.uint64(seed) * np.uint64(0xD1B54A32D192ED03) + q + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    draws = ((z[:, None] >> (np.uint64(16) * np.arange(4, dtype=np.uint64))) & np.uint64(0xFFFF)).reshape(-1)[:n]
    return draws >= threshold


class BlockTensors:
    """Local. Torch views of a block: edge endpoints and degrees, built once per block."""

    def __init__(self, block, src_degree=None):
        self.num_src, self.num_dst = block.num_src, block.num_dst
        counts = torch.from_numpy(block.indptr).diff()
        self.src = torch.from_numpy(block.src_pos)
        self.in_degree = counts.to(torch.float32)
        # graph degrees for GCN's symmetric normalisation (block degrees when unknown)
        self.dst_graph_degree = (torch.from_numpy(block.dst_degree).to(torch.float32)
                                 if getattr(block, "dst_degree", None) is not None else self.in_degree)
        self._src_degree = src_degree
        self._block = block
        self._matrices = {}

    @functools.cached_property
    def dst(self):
        """Destination of every edge."""
        return torch.repeat_interleave(torch.arange(self.num_dst), self.in_degree.long())

    @functools.cached_property
    def src_graph_degree(self):
        if self._src_degree is not None:
            return torch.as_tensor(self._src_degree, dtype=torch.float32)
        return torch.bincount(self.src, minlength=self.num_src).to(torch.float32)

    def _matrix(self, kind):
        """The block's adjacency as a sparse CSR matrix, values 1 ('sum') or 1/in-degree ('mean')."""
        if kind not in self._matrices:
            if kind == "sum":
                values = torch.ones(self.src.shape[0])
            else:
                values = (1.0 / self.in_degree.clamp(min=1)).repeat_interleave(self.in_degree.long())
            with warnings.catch_warnings():  # torch flags sparse CSR as beta on every construction
                warnings.simplefilter("ignore", UserWarning)
                self._matrices[kind] = torch.sparse_csr_tensor(
                    torch.from_numpy(self._block.indptr), self.src, values, size=(self.num_dst, self.num_src))
        return self._matrices[kind]

    def sum_neighbours(self, h_src):
        """Sum of source rows over each destination's in-edges (a sparse-dense matmul: no
        per-edge message tensor is materialised)."""
        return self._matrix("sum") @ h_src

    def mean_neighbours(self, h_src):
        """Mean of source rows over each destination's in-edges (0 for no in-edges)."""
        return self._matrix("mean") @ h_src


def as_block_tensors(blocks, input_degree=None):
    """Local. BlockTensors for a list of blocks (input side first)."""
    result = []
    for i, block in enumerate(blocks):
        src_degree = input_degree if i == 0 else getattr(blocks[i - 1], "dst_degree", None)
        result.append(block if isinstance(block, BlockTensors) else BlockTensors(block, src_degree))
    return result


class SAGEConv(nn.Module):
    """GraphSAGE layer: ``W_self h_v + W_neigh mean(h_u)`` ('mean'), or
    ``W (h_v + sum h_u) / (deg + 1)`` ('gcn')."""

    def __init__(self, in_dim, out_dim, aggregator="mean"):
        super().__init__()
        if aggregator not in ("mean", "gcn"):
            raise ValueError(f"unknown SAGE aggregator {aggregator!r} (mean, gcn)")
        self.aggregator = aggregator
        self.fc_neigh = nn.Linear(in_dim, out_dim, bias=aggregator == "gcn")
        self.fc_self = nn.Linear(in_dim, out_dim) if aggregator == "mean" else None
        self.out_features = out_dim

    def forward(self, block: BlockTensors, h_src):
        h_dst = h_src[: block.num_dst]
        # the linear map commutes with the average: apply it on the narrower side
        shrink = self.fc_neigh.in_features > self.fc_neigh.out_features
        if self.aggregator == "mean":
            if shrink and self.out_features > 32:
                return self.fc_self(h_dst) + block.mean_neighbours(self.fc_neigh(h_src))
            if shrink:
                # narrow output (memory-bound GEMMs): one GEMM over all sources for both maps, so the
                # backward pass writes the wide input gradient once (not once per map plus a
                # zero-filled slice gradient); the self map's extra rows cost little at this width
                out_dim = self.out_features
                z = F.linear(h_src, torch.cat([self.fc_neigh.weight, self.fc_self.weight], dim=0))
                return block.mean_neighbours(z[:, :out_dim]) + z[: block.num_dst, out_dim:] + self.fc_self.bias
            # one GEMM over [h_dst, mean] instead of two with half the inner dimension
            weight = torch.cat([self.fc_self.weight, self.fc_neigh.weight], dim=1)
            return F.linear(torch.cat([h_dst, block.mean_neighbours(h_src)], dim=1), weight, self.fc_self.bias)
        scale = (block.in_degree + 1).unsqueeze(-1)
        if shrink:
            z = h_src @ self.fc_neigh.weight.t()
            return (block.sum_neighbours(z) + z[: block.num_dst]) / scale + self.fc_neigh.bias
        return self.fc_neigh((block.sum_neighbours(h_src) + h_dst) / scale)


class GraphConv(nn.Module):
    """Kipf-Welling GCN layer with self loops: ``D^-1/2 (A + I) D^-1/2 H W`` (graph degrees)."""

    def __init__(self, in_dim, out_dim):
        super().__init__()
        self.linear = nn.Linear(in_dim, out_dim)
        self.out_features = out_dim

    def forward(self, block: BlockTensors, h_src):
        norm_src = (block.src_graph_degree + 1).rsqrt()
        norm_dst = (block.dst_graph_degree + 1).rsqrt()
        h = h_src @ self.linear.weight.t()
        scaled = h * norm_src.unsqueeze(-1)
        total = block.sum_neighbours(scaled) + scaled[: block.num_dst]
        return total * norm_dst.unsqueeze(-1) + self.linear.bias


class GATConv(nn.Module):
    """Multi-head graph attention (Velickovic et al.), attention softmax over each node's
    sampled in-edges plus itself."""

    def __init__(self, in_dim, out_dim, heads=4, negative_slope=0.2, attn_dropout=0.0):
        super().__init__()
        self.heads, self.out_dim = heads, out_dim
        self.out_features = heads * out_dim
        self.linear = nn.Linear(in_dim, heads * out_dim, bias=False)
        self.attn_src = nn.Parameter(torch.empty(heads, out_dim))
        self.attn_dst = nn.Parameter(torch.empty(heads, out_dim))
        self.bias = nn.Parameter(torch.zeros(heads * out_dim))
        self.negative_slope = negative_slope
        self.attn_dropout = Dropout(attn_dropout)
        nn.init.xavier_uniform_(self.linear.weight, gain=nn.init.calculate_gain("relu"))
        nn.init.xavier_uniform_(self.attn_src, gain=nn.init.calculate_gain("relu"))
        nn.init.xavier_uniform_(self.attn_dst, gain=nn.init.calculate_gain("relu"))

    def forward(self, block: BlockTensors, h_src):
        z = self.linear(h_src).view(-1, self.heads, self.out_dim)
        score_src = (z * self.attn_src).sum(-1)                   # [num_src, heads]
        score_dst = (z[: block.num_dst] * self.attn_dst).sum(-1)  # [num_dst, heads]
        loops = torch.arange(block.num_dst)
        src = torch.cat([block.src, loops])
        dst = torch.cat([block.dst, loops])
        logits = F.leaky_relu(score_src[src] + score_dst[dst], self.negative_slope)
        peak = torch.full((block.num_dst, self.heads), float("-inf")).scatter_reduce(
            0, dst.unsqueeze(-1).expand_as(logits), logits, reduce="amax", include_self=True)
        weights = torch.exp(logits - peak[dst])
        total = torch.zeros(block.num_dst, self.heads).index_add_(0, dst, weights)
        alpha = self.attn_dropout(weights / total[dst])
        out = torch.zeros(block.num_dst, self.heads, self.out_dim).index_add_(
            0, dst, z[src] * alpha.unsqueeze(-1))
        return out.reshape(block.num_dst, -1) + self.bias


class _Stack(nn.Module):
    """Layers applied block by block with activation, normalisation and dropout between them."""

    def __init__(self, layers, hidden_dims, dropout, norm, input_dropout=0.0):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.dropout = Dropout(dropout)
        self.relu_dropout = Dropout(dropout, relu=True)
        self.input_dropout = Dropout(input_dropout)
        if norm not in (None, "none", "batch", "layer"):
            raise ValueError(f"unknown norm {norm!r} (none, batch, layer)")
        make = {"batch": nn.BatchNorm1d, "layer": nn.LayerNorm}.get(norm)
        self.norms = nn.ModuleList([make(d) for d in hidden_dims]) if make else None

    def forward(self, blocks, x, input_degree=None):
        blocks = as_block_tensors(blocks, input_degree)
        h = self.input_dropout(x)
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            h = layer(block, h)
            if i < len(self.layers) - 1:
                if self.norms is not None:
                    h = self.norms[i](h)
                h = self.dropout(F.elu(h)) if isinstance(layer, GATConv) else self.relu_dropout(h)
        return h

    def layer_forward(self, i, block, h):
        """Local. Layer ``i`` alone, with what follows it (for layer-wise inference)."""
        h = self.layers[i](block, h)
        if i < len(self.layers) - 1:
            if self.norms is not None:
                h = self.norms[i](h)
            h = F.relu(h) if not isinstance(self.layers[i], GATConv) else F.elu(h)
        return h


class SAGE(_Stack):
    """GraphSAGE: ``num_layers`` SAGEConv layers (aggregator 'mean' or 'gcn')."""

    def __init__(self, in_dim, hidden, out_dim, num_layers=2, aggregator="mean", dropout=0.5, norm=None,
                 input_dropout=0.0):
        dims = [in_dim] + [hidden] * (num_layers - 1) + [out_dim]
        super().__init__([SAGEConv(a, b, aggregator) for a, b in zip(dims, dims[1:])], dims[1:-1], dropout, norm,
                         input_dropout)


class GCN(_Stack):
    """GCN: ``num_layers`` GraphConv layers with symmetric normalisation and self loops."""

    def __init__(self, in_dim, hidden, out_dim, num_layers=2, dropout=0.5, norm=None, input_dropout=0.0):
        dims = [in_dim] + [hidden] * (num_layers - 1) + [out_dim]
        super().__init__([GraphConv(a, b) for a, b in zip(dims, dims[1:])], dims[1:-1], dropout, norm, input_dropout)


class GAT(_Stack):
    """GAT: hidden layers concatenate ``heads`` heads; the output layer averages one head per class."""

    def __init__(self, in_dim, hidden, out_dim, num_layers=2, heads=4, dropout=0.5, attn_dropout=0.0, norm=None,
                 input_dropout=0.0):
        layers, dim = [], in_dim
        for _ in range(num_layers - 1):
            layers.append(GATConv(dim, hidden, heads, attn_dropout=attn_dropout))
            dim = hidden * heads
        layers.append(GATConv(dim, out_dim, 1, attn_dropout=attn_dropout))
        super().__init__(layers, [hidden * heads] * (num_layers - 1), dropout, norm, input_dropout)


MODELS = {"sage": SAGE, "gcn": GCN, "gat": GAT}
