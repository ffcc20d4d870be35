"""GNN models on blocks: a stack of convolutions with activation, normalisation and dropout.

Every model takes ``(blocks, x)`` with ``x`` the features of the first block's sources and
returns one row per destination of the last block; ``layer_forward`` runs one layer alone (for
layer-wise inference). A model declares what its blocks must carry: ``needs_degrees`` asks the
sampler for graph in-degrees (GCN's symmetric normalisation).

``precision`` ('fp32' or 'bf16', :func:`set_precision`) is the arithmetic of the layers: with
'bf16' the GEMMs run in bfloat16 under ``torch.autocast`` (the weights stay float32, cast per
use), activations, dropout and aggregations stay in bfloat16 (the aggregations accumulate in
float32: :mod:`hpcgnn.nn.aggregate`), and the output rows are float32, so losses and every
reduction after the model are float32. The autocast is the device's of the model's parameters
(CUDA autocast on a GPU); the row bucketing of :mod:`hpcgnn.nn.gemm` is for CPU autocast alone.

``kernels`` ('compiled' or 'torch', :func:`~hpcgnn.nn.kernels.set_kernels`) picks the kernels of
the aggregations, attention and dropout on the CPU (:mod:`hpcgnn.nn.kernels`); a model on a GPU
computes by torch whatever it says, and its blocks are moved to the GPU when they arrive on the
CPU (:func:`~hpcgnn.nn.block_tensors.as_block_tensors`).
"""
from __future__ import annotations

import contextlib

import torch
from torch import nn
from torch.nn import functional as F

from hpcgnn.nn import kernels as kernel_choice
from hpcgnn.nn.block_tensors import BlockTensors, as_block_tensors
from hpcgnn.nn.conv import GATConv, GraphConv, SAGEConv
from hpcgnn.nn.dropout import Dropout

PRECISIONS = ("fp32", "bf16")


def model_device(model) -> torch.device:
    """Local. The device ``model``'s parameters (else buffers) live on; the CPU for a model with neither
    (a link scorer without weights)."""
    for tensor in model.parameters():
        return tensor.device
    for tensor in model.buffers():
        return tensor.device
    return torch.device("cpu")


class LayerStack(nn.Module):
    """Layers applied block by block with activation, normalisation and dropout between them."""

    #: the sampler must read graph in-degrees of the input nodes (``MiniBatch.input_degree``)
    needs_degrees = False
    #: keep each hidden layer's activations of the last forward pass, before dropout (``hidden``)
    record_hidden = False
    #: the layers' arithmetic (see the module docstring)
    precision = "fp32"
    #: the kernels of the layers on the CPU (see the module docstring)
    kernels = "compiled"

    def _device(self) -> torch.device:
        return model_device(self)

    @contextlib.contextmanager
    def _autocast(self):
        """The layers' arithmetic and kernels: autocast on the parameters' device under 'bf16'."""
        device = self._device().type
        with torch.autocast(device, dtype=torch.bfloat16, enabled=self.precision == "bf16"), \
                kernel_choice.using(self.kernels):
            yield

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
        with self._autocast():
            return self._forward(blocks, x, input_degree).float()

    def _forward(self, blocks, x, input_degree):
        device = self._device()
        # blocks that arrive on the host move here; their matrices follow on first use
        blocks = as_block_tensors(blocks, input_degree, device=None if device.type == "cpu" else device, matrices=())
        h = self.input_dropout(x)
        self.hidden, expected = [], None
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            if block.with_expected:
                h = torch.cat([h, expected])
            if block.extra_rows is not None:
                h = torch.cat([h, block.extra_rows])
            h = layer(block, h)
            if i < len(self.layers) - 1:
                if self.norms is not None:
                    h = self.norms[i](h)
                gat = isinstance(layer, GATConv)
                if self.record_hidden or blocks[i + 1].with_expected:
                    expected = (F.elu if gat else F.relu)(h)  # the activation's mean under dropout
                    if self.record_hidden:
                        self.hidden.append(expected.detach().float())
                h = self.dropout(F.elu(h)) if gat else self.relu_dropout(h)
        return h

    def layer_forward(self, i, block, h):
        """Local. Layer ``i`` alone, with what follows it (for layer-wise inference); float32 rows."""
        device = self._device()
        if device.type != "cpu":
            if isinstance(block, BlockTensors):
                block = block.to(device)
            else:
                block = BlockTensors(block, device=device, matrices=())
        with self._autocast():
            h = self.layers[i](block, h)
            if i < len(self.layers) - 1:
                if self.norms is not None:
                    h = self.norms[i](h)
                h = F.relu(h) if not isinstance(self.layers[i], GATConv) else F.elu(h)
            return h.float()


def set_precision(model, precision):
    """Local. Set the arithmetic of ``model``'s layer stacks ('fp32' or 'bf16'; see the module
    docstring), a link model's encoder included."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r} ({', '.join(PRECISIONS)})")
    for module in model.modules():
        if isinstance(module, LayerStack):
            module.precision = precision


class SAGE(LayerStack):
    """GraphSAGE: ``num_layers`` SAGEConv layers (aggregator 'mean' or 'gcn')."""

    def __init__(self, in_dim, hidden, out_dim, num_layers=2, aggregator="mean", dropout=0.5, norm=None,
                 input_dropout=0.0):
        dims = [in_dim] + [hidden] * (num_layers - 1) + [out_dim]
        super().__init__([SAGEConv(a, b, aggregator) for a, b in zip(dims, dims[1:])], dims[1:-1], dropout, norm,
                         input_dropout)


class GCN(LayerStack):
    """GCN: ``num_layers`` GraphConv layers with symmetric normalisation and self loops."""

    needs_degrees = True

    def __init__(self, in_dim, hidden, out_dim, num_layers=2, dropout=0.5, norm=None, input_dropout=0.0):
        dims = [in_dim] + [hidden] * (num_layers - 1) + [out_dim]
        super().__init__([GraphConv(a, b) for a, b in zip(dims, dims[1:])], dims[1:-1], dropout, norm, input_dropout)


class GAT(LayerStack):
    """GAT: hidden layers concatenate ``heads`` heads; the output layer averages one head per class."""

    def __init__(self, in_dim, hidden, out_dim, num_layers=2, heads=4, dropout=0.5, attn_dropout=0.0, norm=None,
                 input_dropout=0.0):
        layers, dim = [], in_dim
        for _ in range(num_layers - 1):
            layers.append(GATConv(dim, hidden, heads, attn_dropout=attn_dropout))
            dim = hidden * heads
        layers.append(GATConv(dim, out_dim, 1, attn_dropout=attn_dropout))
        super().__init__(layers, [hidden * heads] * (num_layers - 1), dropout, norm, input_dropout)
