"""The fetch step: the node fields a sampled batch needs, gathered by global id.

This is where a feature cache or a device copy plugs in: a loader calls one ``fetch(batch)``
per batch, on its prefetch thread when it has one.
"""
from __future__ import annotations

import torch


class FieldFetch:
    """Local. Gather ``feature`` rows of a batch's input nodes and ``label`` rows of its seeds.

    Parameters
    ----------
    graph : DistGraph
    feature, label : str or None
        Node fields gathered into ``batch.feat`` (rows of ``input_gids``) and ``batch.label``
        (rows of ``seed_gids``) as torch tensors; None skips one.
    """

    def __init__(self, graph, feature="feat", label="label"):
        self.feature = None if feature is None else graph.ndata[feature]
        self.label = None if label is None else graph.ndata[label]

    def __call__(self, batch):
        """Local. Fill ``batch.feat`` and ``batch.label``; returns the batch."""
        if self.feature is not None:
            batch.feat = torch.from_numpy(self.feature.gather(batch.input_gids))
        if self.label is not None:
            batch.label = torch.from_numpy(self.label.gather(batch.seed_gids))
        return batch
