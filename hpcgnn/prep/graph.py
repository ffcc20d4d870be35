"""The in-memory graph every reader returns and the partitioner consumes.

A graph is a directed edge list (``src[i] -> dst[i]``, int64 global ids in ``[0, num_nodes)``)
plus node fields (``ndata``: ``feat`` [N, F], ``label`` [N], boolean ``train_mask`` /
``val_mask`` / ``test_mask``, ...) and edge fields (``edata``, first axis = edge). Node
features may be a ``scipy.sparse.csr_matrix``: readers keep sparse inputs sparse and only the
partition writer densifies, one part's rows at a time.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hpcgnn.runtime.errors import InputError

MASKS = ("train_mask", "val_mask", "test_mask")


@dataclass
class Graph:
    """Local. A directed graph with node and edge fields (see module docstring)."""

    num_nodes: int
    src: np.ndarray
    dst: np.ndarray
    ndata: dict = field(default_factory=dict)
    edata: dict = field(default_factory=dict)
    name: str = "graph"
    source: str = "<memory>"
    #: True when every edge's reverse is known to be present (set by ``transform.symmetrize``);
    #: lets the partitioner hand the in-edge CSC to METIS without building ``A + A^T``.
    symmetric: bool = False

    @property
    def num_edges(self) -> int:
        return int(self.src.shape[0])

    def validate(self) -> Graph:
        """Local. Check ids, lengths, dtypes and finiteness; raise InputError naming the field.

        Returns the graph itself so readers can end with ``return graph.validate()``.
        """
        where = self.source
        if not isinstance(self.num_nodes, (int, np.integer)) or self.num_nodes <= 0:
            raise InputError(where, "graph has no nodes", "num_nodes", self.num_nodes)
        for name, ids in (("src", self.src), ("dst", self.dst)):
            if not isinstance(ids, np.ndarray) or ids.ndim != 1:
                raise InputError(where, "must be a 1-D array", name, getattr(ids, "shape", ids))
            if not np.issubdtype(ids.dtype, np.integer):
                raise InputError(where, "node ids must be integers", name, ids.dtype)
        if self.src.shape != self.dst.shape:
            raise InputError(where, "src and dst lengths differ", "dst",
                             f"{self.dst.shape[0]} vs {self.src.shape[0]}")
        if self.num_edges == 0:
            raise InputError(where, "graph has no edges", "src", 0)
        for name, ids in (("src", self.src), ("dst", self.dst)):
            lo, hi = int(ids.min()), int(ids.max())
            if lo < 0:
                raise InputError(where, "negative node id", name, lo)
            if hi >= self.num_nodes:
                raise InputError(where, f"node id out of range [0, {self.num_nodes})", name, hi)
        for name, arr in self.ndata.items():
            _check_rows(where, name, arr, self.num_nodes, "num_nodes")
            _check_node_field(where, name, arr)
        for name, arr in self.edata.items():
            _check_rows(where, f"edge_{name}", arr, self.num_edges, "num_edges")
            _check_finite(where, f"edge_{name}", arr)
        return self

    def summary(self) -> str:
        """Local. One line: name, nodes, edges and fields."""
        fields = ", ".join(f"{k}{_shape_of(v)}" for k, v in self.ndata.items())
        efields = ", ".join(f"{k}{_shape_of(v)}" for k, v in self.edata.items())
        return (f"{self.name}: {self.num_nodes:,} nodes, {self.num_edges:,} edges"
                + (f"; node fields: {fields}" if fields else "")
                + (f"; edge fields: {efields}" if efields else ""))


def _shape_of(arr):
    return list(arr.shape)


def _check_rows(where, name, arr, expected, what):
    rows = arr.shape[0] if hasattr(arr, "shape") and len(arr.shape) else None
    if rows != expected:
        raise InputError(where, f"has {rows} rows but {what} is {expected}", name, rows)


def _check_node_field(where, name, arr):
    if name in MASKS:
        if getattr(arr, "dtype", None) != np.bool_:
            raise InputError(where, "masks must be boolean", name, getattr(arr, "dtype", type(arr)))
    elif name == "label":
        if not np.issubdtype(arr.dtype, np.integer):
            raise InputError(where, "labels must be integers", name, arr.dtype)
    _check_finite(where, name, arr)


def _check_finite(where, name, arr):
    values = arr.data if hasattr(arr, "tocsr") else arr
    if np.issubdtype(values.dtype, np.floating):
        bad = ~np.isfinite(values)
        if bad.any():
            first = values.reshape(-1)[np.flatnonzero(bad.reshape(-1))[0]]
            raise InputError(where, "contains NaN or inf", name, float(first))
    elif not (np.issubdtype(values.dtype, np.integer) or values.dtype == np.bool_):
        raise InputError(where, "unsupported dtype", name, values.dtype)
