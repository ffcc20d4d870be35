"""Rows by global id, spread over the ranks: the partition book (who owns an id), the window
layer (shared memory inside a node, one-sided RMA across nodes), ``DistTensor``,
``DistEmbedding`` and its sparse optimizers."""
from hpcgnn.store.dist_tensor import DistTensor, float_rows
from hpcgnn.store.embedding import DistEmbedding
from hpcgnn.store.partition_book import PartitionBook
from hpcgnn.store.sparse_optim import SparseAdagrad, SparseAdam
from hpcgnn.store.window import RowWindow, sync_windows

__all__ = ["DistEmbedding", "DistTensor", "PartitionBook", "RowWindow", "SparseAdagrad", "SparseAdam",
           "float_rows", "sync_windows"]
