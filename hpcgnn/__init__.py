"""hpcgnn: distributed graph neural network training as one MPI program.

The package is laid out in the order data flows, and imports point one way only (a layer
never imports a later one)::

    runtime -> format -> prep -> store -> graph -> sampling -> loading -> nn -> tasks -> training -> cli

``format`` (the dataset on disk) is what the offline tools of ``prep`` and the runtime share:
nothing from ``store`` to ``training`` imports ``prep``. ``cli`` holds one module per command.

Importing ``hpcgnn`` loads nothing else: the names below are imported on first access, so
``import hpcgnn`` neither initialises MPI nor imports torch.
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "DistEmbedding": "hpcgnn.store.embedding",
    "DistGraph": "hpcgnn.graph.dist_graph",
    "DistTensor": "hpcgnn.store.dist_tensor",
    "EdgeDataLoader": "hpcgnn.loading.edge_loader",
    "Graph": "hpcgnn.prep.graph",
    "InputError": "hpcgnn.runtime.errors",
    "MiniBatch": "hpcgnn.sampling.block",
    "NeighborSampler": "hpcgnn.sampling.neighbor",
    "NodeDataLoader": "hpcgnn.loading.node_loader",
    "PartitionBook": "hpcgnn.store.partition_book",
    "SparseAdagrad": "hpcgnn.store.sparse_optim",
    "SparseAdam": "hpcgnn.store.sparse_optim",
    "edge_split": "hpcgnn.graph.split",
    "node_split": "hpcgnn.graph.split",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'hpcgnn' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
