"""GNN layers and models on the sampler's blocks, in plain PyTorch, and the model registry.

:mod:`.dropout` (fused, mask-free dropout), :mod:`.block` (a block as torch tensors and sparse
matrices), :mod:`.conv` (SAGE, GCN, GAT layers), :mod:`.models` (layer stacks),
:mod:`.registry` (``build_model`` by name).
"""
from hpcgnn.nn.block import BlockTensors, as_block_tensors
from hpcgnn.nn.conv import GATConv, GraphConv, SAGEConv
from hpcgnn.nn.dropout import Dropout, seed_dropout
from hpcgnn.nn.models import GAT, GCN, SAGE, LayerStack
from hpcgnn.nn.registry import MODELS, build_model, register

__all__ = ["GAT", "GCN", "MODELS", "SAGE", "BlockTensors", "Dropout", "GATConv", "GraphConv", "LayerStack",
           "SAGEConv", "as_block_tensors", "build_model", "register", "seed_dropout"]
