"""hpcgnn: distributed graph neural network training as one MPI program.

Importing the package never initialises MPI; modules that need it import ``mpi4py.MPI``
themselves and take ``comm`` explicitly.
"""

__version__ = "0.1.0"

from hpcgnn.dist_graph import DistGraph, node_split  # noqa: E402
from hpcgnn.dist_tensor import DistTensor  # noqa: E402
from hpcgnn.embedding import DistEmbedding, SparseAdagrad, SparseAdam  # noqa: E402
from hpcgnn.errors import InputError  # noqa: E402
from hpcgnn.graph import Graph  # noqa: E402
from hpcgnn.loader import NodeDataLoader  # noqa: E402
from hpcgnn.sampler import MiniBatch, NeighborSampler  # noqa: E402

__all__ = ["DistEmbedding", "DistGraph", "DistTensor", "Graph", "InputError", "MiniBatch", "NeighborSampler",
           "NodeDataLoader", "SparseAdagrad", "SparseAdam", "node_split", "__version__"]
