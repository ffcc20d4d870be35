"""The input rows of a typed graph's batch: each node type's features at their own width.

A typed dataset stores ``feat`` per node type (``graph.typed_ndata[type]["feat"]``, rows by type
id); a type without features has none, and the model learns an embedding for it instead. A
batch's input nodes mix types, so its features are not one matrix but :class:`TypedRows`: the
type of every input row and, per type, the rows of that type's positions in order. The model's
first stage (:class:`~hpcgnn.nn.typed_model.TypedModel`) projects each type to one width.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from hpcgnn.store import float_rows


@dataclass
class TypedRows:
    """Local. ``types`` [n]: node type of every input row; ``rows[t]``: the rows of type ``t``'s
    positions (``positions[t]``, ascending), for the types that have them."""

    types: torch.Tensor
    positions: dict
    rows: dict = field(default_factory=dict)

    @property
    def num_rows(self) -> int:
        return int(self.types.shape[0])


def typed_rows(graph, gids, feature="feat") -> TypedRows:
    """Local. The ``feature`` rows of ``gids`` (any owner) of every node type that has the field."""
    gids = np.asarray(gids, dtype=np.int64)
    types, tids = graph.layout.type_ids(gids)
    order = np.argsort(types, kind="stable")
    bounds = np.searchsorted(types[order], np.arange(graph.schema.num_types + 1))
    positions, rows = {}, {}
    for t, name in enumerate(graph.schema.node_types):
        at = order[bounds[t]:bounds[t + 1]]
        if not at.shape[0]:
            continue
        positions[t] = torch.from_numpy(at)
        table = graph.typed_ndata.get(name, {}).get(feature)
        if table is not None:
            rows[t] = float_rows(table.gather(tids[at]), table.encoding)
    return TypedRows(torch.from_numpy(types), positions, rows)


def type_widths(graph, feature="feat") -> tuple:
    """Local. The ``feature`` width of every node type, 0 for a type without the field."""
    widths = []
    for name in graph.schema.node_types:
        table = graph.typed_ndata.get(name, {}).get(feature)
        widths.append(0 if table is None else int(np.prod(table.shape[1:])))
    return tuple(widths)


class TypedFieldFetch:
    """Local. The fetch step of a typed graph: :func:`typed_rows` of a batch's input nodes into
    ``batch.feat`` and the ``label`` rows of its seeds into ``batch.label``."""

    def __init__(self, graph, label="label", feature="feat"):
        self.graph = graph
        self.feature = feature
        self.label = None if label is None else graph.ndata[label]
        # what the loader's statistics read of a fetch step (no cache of typed rows)
        self.remote_rows = self.cache_hits = self.row_bytes = 0

    def __call__(self, batch):
        """Local. Fill ``batch.feat`` and ``batch.label``; returns the batch."""
        batch.feat = typed_rows(self.graph, batch.input_gids, self.feature)
        if self.label is not None:
            batch.label = torch.from_numpy(self.label.gather(batch.seed_gids))
        return batch
