"""A model on a typed graph: each node type's input projected to one width, then any layer stack.

The batch's input is :class:`~hpcgnn.loading.typed_rows.TypedRows` (per-type feature rows at
their own widths, and learned embedding rows for types without features); the projection
(:class:`~hpcgnn.nn.relational_models.TypeProjection`) turns it into one ``[n, width]`` matrix
and the stack (RGCN, RGAT, or a homogeneous model that ignores relations) computes from there.
Layer-wise inference calls :meth:`TypedModel.layer_forward` exactly as on a plain stack.
"""
from __future__ import annotations

from torch import nn

from hpcgnn.loading.typed_rows import TypedRows


class TypedModel(nn.Module):
    """Local. ``projection`` (per-type input -> ``width``) followed by ``stack``."""

    def __init__(self, projection, stack):
        super().__init__()
        self.projection = projection
        self.stack = stack

    @property
    def layers(self):
        return self.stack.layers

    @property
    def needs_degrees(self):
        return getattr(self.stack, "needs_degrees", False)

    def inputs(self, x):
        """Local. The stack's input rows: ``x`` projected when it is typed (for a stack whose input
        layer reads them so, the projection not yet applied: a
        :class:`~hpcgnn.nn.relational.ProjectedRows`), else ``x`` itself."""
        if not isinstance(x, TypedRows):
            return x
        if getattr(self.stack, "reads_projected_rows", False):
            return self.projection.lazy(x.types, x.rows)
        return self.projection(x.types, x.rows)

    def forward(self, blocks, x, input_degree=None):
        return self.stack(blocks, self.inputs(x), input_degree)

    def layer_forward(self, i, block, h):
        return self.stack.layer_forward(i, block, self.inputs(h) if i == 0 else h)
