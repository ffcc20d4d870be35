"""Loaders: the batch plan (same step count on every rank), the fetch step (features and
labels by global id: where a cache plugs in), the prefetch thread, and ``NodeDataLoader``
composed of them, and ``EdgeDataLoader`` (link prediction) composed of the same."""
from hpcgnn.loading.batch_plan import BatchPlan
from hpcgnn.loading.edge_loader import EdgeDataLoader
from hpcgnn.loading.fetch import FieldFetch
from hpcgnn.loading.node_loader import NodeDataLoader
from hpcgnn.loading.prefetch import LoaderStats

__all__ = ["BatchPlan", "EdgeDataLoader", "FieldFetch", "LoaderStats", "NodeDataLoader"]
