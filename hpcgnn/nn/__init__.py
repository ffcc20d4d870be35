"""GNN layers and models on the sampler's blocks, in plain PyTorch, and the model registry.

:mod:`.dropout` (fused, mask-free dropout), :mod:`.aggregate` (compiled bfloat16
aggregation), :mod:`.block_tensors` (a block as torch tensors and sparse matrices), :mod:`.conv`
(SAGE, GCN, GAT layers), :mod:`.models` (layer stacks, their arithmetic), :mod:`.registry`
(``build_model`` by name).
"""
from hpcgnn.nn.block_tensors import BlockTensors, as_block_tensors
from hpcgnn.nn.conv import GATConv, GraphConv, SAGEConv
from hpcgnn.nn.dropout import Dropout, seed_dropout
from hpcgnn.nn.models import GAT, GCN, PRECISIONS, SAGE, LayerStack, set_precision
from hpcgnn.nn.registry import MODELS, build_model, register

__all__ = ["GAT", "GCN", "MODELS", "PRECISIONS", "SAGE", "BlockTensors", "Dropout", "GATConv", "GraphConv",
           "LayerStack", "SAGEConv", "as_block_tensors", "build_model", "register", "seed_dropout", "set_precision"]
