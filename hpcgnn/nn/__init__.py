"""GNN layers and models on the sampler's blocks, in plain PyTorch, and the model registry.

:mod:`.kernels` (compiled or torch kernels), :mod:`.dropout` (fused, mask-free dropout),
:mod:`.aggregate` (compiled bfloat16 aggregation, or torch's sparse product),
:mod:`.block_tensors` (a block as torch tensors and sparse matrices), :mod:`.conv` (SAGE, GCN,
GAT layers), :mod:`.models` (layer stacks, their arithmetic), :mod:`.relational`
(R-GCN and R-GAT layers on typed blocks), :mod:`.relational_models` (their stacks and the
per-node-type input layer), :mod:`.registry` (``build_model`` by name).
"""
from hpcgnn.nn.block_tensors import BlockTensors, as_block_tensors
from hpcgnn.nn.conv import GATConv, GraphConv, SAGEConv
from hpcgnn.nn.dropout import Dropout, seed_dropout
from hpcgnn.nn.kernels import KERNELS, set_kernels
from hpcgnn.nn.models import GAT, GCN, PRECISIONS, SAGE, LayerStack, set_precision
from hpcgnn.nn.registry import MODELS, RELATIONAL, build_model, register
from hpcgnn.nn.relational import RelationalAdjacency, RGATConv, RGCNConv
from hpcgnn.nn.relational_models import RGAT, RGCN, TypeProjection

__all__ = ["GAT", "GCN", "MODELS", "PRECISIONS", "RELATIONAL", "RGAT", "RGCN", "SAGE", "BlockTensors", "Dropout",
           "GATConv", "GraphConv", "KERNELS", "LayerStack", "RGATConv", "RGCNConv", "RelationalAdjacency", "SAGEConv",
           "TypeProjection", "as_block_tensors", "build_model", "register", "seed_dropout", "set_kernels",
           "set_precision"]
