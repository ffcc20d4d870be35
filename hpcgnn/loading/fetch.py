"""The fetch step: the node fields a sampled batch needs, gathered by global id.

This is where a feature cache or a device copy plugs in: a loader calls one ``fetch(batch)``
per batch, on its prefetch thread when it has one. With a
:class:`~hpcgnn.loading.cache.RemoteRowCache` of the feature field, cached rows of other
nodes are copied locally instead of crossing the network.
"""
from __future__ import annotations

import numpy as np
import torch

from hpcgnn.loading.cache import off_node
from hpcgnn.store import float_rows


class FieldFetch:
    """Local. Gather ``feature`` rows of a batch's input nodes and ``label`` rows of its seeds.

    Parameters
    ----------
    graph : DistGraph
    feature, label : str or None
        Node fields gathered into ``batch.feat`` (rows of ``input_gids``) and ``batch.label``
        (rows of ``seed_gids``) as torch tensors; None skips one.
    cache : RemoteRowCache, optional
        A cache of the feature field's rows on other nodes.

    Attributes
    ----------
    remote_rows, cache_hits : int
        Feature rows requested from other nodes so far, and how many of them the cache served.
    pinned : bool
        Gather the feature rows into pinned host memory (torch's caching host allocator, which
        reuses a buffer once the copy that read it is done): batches bound for a GPU are then
        copied there without another copy on the host (:mod:`hpcgnn.loading.device_stage`).
    resident : ResidentRows or None
        Rows of the feature field kept on the device (:mod:`hpcgnn.loading.device_rows`): a batch's
        ``feat`` is then a :class:`~hpcgnn.loading.device_rows.BatchRows` that the device stage
        completes there.
    """

    pinned = False
    resident = None

    def __init__(self, graph, feature="feat", label="label", cache=None):
        self.feature = None if feature is None else graph.ndata[feature]
        self.label = None if label is None else graph.ndata[label]
        if cache is not None and cache.tensor is not self.feature:
            raise ValueError("the cache holds rows of another field than the one fetched")
        self.cache = cache
        self.row_bytes = 0 if self.feature is None else self.feature.window.row_bytes
        # inside one node nothing crosses a network: skip counting
        self._one_node = self.feature is None or bool((self.feature.window.node_slot >= 0).all())
        self.remote_rows = self.cache_hits = 0

    def __call__(self, batch):
        """Local. Fill ``batch.feat`` and ``batch.label``; returns the batch."""
        if self.resident is not None:
            batch.feat = self.resident.split(batch.input_gids, self._float_features)
        elif self.feature is not None:
            batch.feat = self._float_features(batch.input_gids)
        if self.label is not None:
            batch.label = torch.from_numpy(self.label.gather(batch.seed_gids))
        return batch

    def _float_features(self, gids) -> torch.Tensor:
        return float_rows(self._features(gids), self.feature.encoding)

    def _features(self, gids):
        if self.cache is None:
            if not self._one_node:
                self.remote_rows += int(off_node(self.feature, gids).sum())
            out = None
            if self.pinned:
                out = torch.empty((len(gids), *self.feature.shape[1:]), pin_memory=True,
                                  dtype=torch.from_numpy(np.empty(0, self.feature.dtype)).dtype).numpy()
            return self.feature.gather(gids, out=out)
        rows, remote, hits = self.cache.gather(gids)
        self.remote_rows += remote
        self.cache_hits += hits
        return rows
