"""Models on typed graphs: the R-GCN and R-GAT layer stacks, and the per-node-type input layer.

:class:`RGCN` and :class:`RGAT` are :class:`~hpcgnn.nn.models.LayerStack` s (the same
``forward(blocks, x, input_degree)``, ``layer_forward`` for layer-wise inference, dropout, norms and
``--precision bf16``) of the relational layers of :mod:`hpcgnn.nn.relational`, with ReLU between
layers; ``x`` is one ``[n_input, in_dim]`` matrix. A typed graph's input rows have a width per
node type: :class:`TypeProjection` maps them to one width first, as a separate module the task
composes with the stack (:class:`~hpcgnn.nn.typed_model.TypedModel`).
"""
from __future__ import annotations

import torch
from torch import nn

from hpcgnn.nn.models import LayerStack
from hpcgnn.nn.relational import ProjectedRows, RGATConv, RGCNConv


class RGCN(LayerStack):
    """R-GCN: ``num_layers`` RGCNConv layers over ``num_relations`` relations.

    ``regularizer`` and ``num_bases`` as :class:`~hpcgnn.nn.relational.RGCNConv`'s; with 'block',
    a layer whose widths the block count does not divide (an output layer of few classes, an
    input of odd width) has a full weight per relation instead.
    """

    def __init__(self, in_dim, hidden, out_dim, num_relations, num_layers=2, regularizer="basis", num_bases=0,
                 self_loop=True, dropout=0.5, norm=None, input_dropout=0.0):
        dims = [in_dim] + [hidden] * (num_layers - 1) + [out_dim]
        layers = []
        for a, b in zip(dims, dims[1:]):
            kind = regularizer
            if regularizer == "block" and (num_bases < 1 or a % num_bases or b % num_bases):
                kind = "none"
            layers.append(RGCNConv(a, b, num_relations, kind, num_bases, self_loop))
        super().__init__(layers, dims[1:-1], dropout, norm, input_dropout)

    #: the input layer reads a typed batch's rows unprojected (:class:`ProjectedRows`)
    reads_projected_rows = True

    def forward(self, blocks, x, input_degree=None):
        first = blocks[0] if blocks else None
        dropped = self.input_dropout.training and self.input_dropout.p > 0
        if isinstance(x, ProjectedRows) and (dropped or getattr(first, "extra_rows", None) is not None):
            if x.relational_types:
                raise ValueError("per-relation rows of featureless types (--featureless relational) take no input "
                                 "dropout and no appended rows")
            x = x.dense()  # the input layer's rows are changed before it reads them
        return super().forward(blocks, x, input_degree)


class RGAT(LayerStack):
    """R-GAT: hidden layers concatenate ``heads`` heads of ``hidden``; the output layer averages
    ``heads`` heads of ``out_dim`` (MLPerf's reference ends in a linear map of the last hidden
    layer's concatenated heads, which an averaged output layer computes with the same attention).
    ``self_loop=False`` is MLPerf's layer exactly."""

    def __init__(self, in_dim, hidden, out_dim, num_relations, num_layers=2, heads=4, self_loop=True, dropout=0.5,
                 attn_dropout=0.0, norm=None, input_dropout=0.0):
        layers, dim = [], in_dim
        for _ in range(num_layers - 1):
            layers.append(RGATConv(dim, hidden, num_relations, heads, True, self_loop, attn_dropout=attn_dropout))
            dim = hidden * heads
        layers.append(RGATConv(dim, out_dim, num_relations, heads, False, self_loop, attn_dropout=attn_dropout))
        super().__init__(layers, [hidden * heads] * (num_layers - 1), dropout, norm, input_dropout)


class TypeProjection(nn.Module):
    """Local. The input layer of a typed graph: node type ``t``'s rows (``type_dims[t]`` wide) mapped
    to ``out_dim`` by its own linear map; a type of width 0 (no features) brings its rows already
    ``out_dim`` wide (learned embeddings) and they pass through unchanged.

    ``featureless_slices`` > 0 (``--featureless relational``): a type of width 0 brings instead
    ``featureless_slices`` slices of ``out_dim`` per row (one per relation and one for the node's
    own term), which only R-GCN's input layer reads
    (:meth:`~hpcgnn.nn.relational.RGCNConv._forward_featureless`); :meth:`forward` refuses them."""

    def __init__(self, type_dims, out_dim, featureless_slices=0):
        super().__init__()
        self.type_dims = tuple(int(d) for d in type_dims)
        self.out_dim = int(out_dim)
        self.featureless_slices = int(featureless_slices)
        self.maps = nn.ModuleList([nn.Linear(d, out_dim) if d else nn.Identity() for d in self.type_dims])

    @property
    def relational_types(self) -> frozenset:
        """The types whose rows are per-relation slices (none unless ``featureless_slices``)."""
        if not self.featureless_slices:
            return frozenset()
        return frozenset(t for t, d in enumerate(self.type_dims) if not d)

    def featureless_width(self) -> int:
        """Local. The width of a featureless type's input rows."""
        return self.out_dim * (self.featureless_slices or 1)

    def check(self, types, rows) -> list:
        """Local. The number of positions of every type; ValueError when ``types`` or ``rows`` do
        not fit the projection (as :meth:`forward` takes them)."""
        num_types = len(self.type_dims)
        if types.numel() and (int(types.min()) < 0 or int(types.max()) >= num_types):
            raise ValueError(f"node types {int(types.min())}..{int(types.max())} for a projection of {num_types} types")
        counts = torch.bincount(types, minlength=num_types).tolist()
        for t, count in enumerate(counts):
            if not count:
                continue
            if t not in rows:
                raise ValueError(f"{count} rows of node type {t} and no input for them")
            width = self.type_dims[t] or self.featureless_width()
            if tuple(rows[t].shape) != (count, width):
                raise ValueError(f"node type {t}: rows of shape {tuple(rows[t].shape)} for {count} positions of width "
                                 f"{width}")
        return counts

    def compose(self, t, weight):
        """Local. ``(weight @ P_t, weight @ c_t)``: the map ``x -> weight (P_t x + c_t)`` of type
        ``t``'s unprojected rows (``(weight, None)`` for a type whose rows pass unchanged)."""
        layer = self.maps[t]
        if isinstance(layer, nn.Identity):
            return weight, None
        return weight @ layer.weight, (None if layer.bias is None else weight @ layer.bias)

    def lazy(self, types, rows) -> ProjectedRows:
        """Local. The projection of ``types`` and ``rows`` not yet applied (checked now)."""
        return ProjectedRows(self, types, rows)

    def forward(self, types, rows):
        """Local. ``[n, out_dim]``: row ``k`` is the projection of the row of ``rows[types[k]]`` at
        ``k``'s place among the positions of its type (``types`` int64 ``[n]``, ``rows`` a dict
        ``type -> [n_t, width]``)."""
        types = torch.as_tensor(types, dtype=torch.int64)
        counts = self.check(types, rows)
        relational = [t for t in self.relational_types if counts[t]]
        if relational:
            raise ValueError(f"node type {relational[0]} brings per-relation rows (--featureless relational), which "
                             "only R-GCN's input layer reads, unprojected")
        projected = [self.maps[t](rows[t].float()) for t, count in enumerate(counts) if count]
        if not projected:
            return torch.zeros(0, self.out_dim)
        # rows arrive type by type; the stable sort of the types puts each back at its position
        order = torch.argsort(types, stable=True)
        where = torch.empty_like(order)
        where[order] = torch.arange(order.shape[0])
        return torch.cat(projected)[where]
