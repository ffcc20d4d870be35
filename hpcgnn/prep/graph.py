"""The in-memory graph every reader returns and the partitioner consumes.

A graph is a directed edge list (``src[i] -> dst[i]``, int64 global ids in ``[0, num_nodes)``)
plus node fields (``ndata``: ``feat`` [N, F], ``label`` [N] (multi-label: [N, C] of 0/1),
boolean ``train_mask`` / ``val_mask`` / ``test_mask``, ...) and edge fields (``edata``, first
axis = edge), and for link prediction optionally held-out edge sets (``link``, see
:mod:`hpcgnn.prep.edge_split`). Node features may be a ``scipy.sparse.csr_matrix``: readers keep
sparse inputs sparse and only the partition writer densifies, one part's rows at a time.

What every reader's graph must satisfy (``Graph.validate``): ids in range, ``feat`` 2-D,
every node field one row per node, the three masks disjoint, labels at least ``UNLABELLED``
(-1), which marks a node without a label (in a multi-label row: any -1) and is allowed only
outside every mask, and multi-label labels at most 1. A node count implied by sparse ids (a
largest id far above the number of ids the input names) is refused before anything of that
length is allocated; ``check_memory`` refuses a graph whose partitioning cannot fit in the
available memory.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hpcgnn.format.fields import MASKS, UNLABELLED, check_finite, check_node_field
from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.memory import available_memory

# Sparse ids: a node count implied by the largest id is refused when it is above both of
# these: ``SPARSE_ID_MIN_NODES`` keeps small inputs (whose node arrays cost little) out of the
# rule, and real graphs name nearly all their ids (average degree is well above 1), so a count
# over ``SPARSE_ID_FACTOR`` times the ids the input names means raw ids that need relabelling.
SPARSE_ID_MIN_NODES = 1 << 22
SPARSE_ID_FACTOR = 8
RELABEL_HINT = "relabel the ids to 0..n-1 (--relabel for an edge list)"
# Lower bounds of what partitioning allocates: per node the in-edge indptr, two balance
# weight columns, the part ids, the relabelling order and the new ids; per edge the CSC
# sources and edge ids (all int64).
PARTITION_BYTES_PER_NODE = 40
PARTITION_BYTES_PER_EDGE = 16


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
    #: What a reader learnt beside the arrays (``class_names``: the name of each label value,
    #: ``split_index``, ...). ``hpcgnn partition`` records it in meta.json's ``source``; the
    #: transforms build new graphs without it, so take it from the graph the reader returned.
    notes: dict = field(default_factory=dict)
    #: Held-out edge sets for link prediction: a :class:`~hpcgnn.prep.edge_split.LinkSplit`
    #: (a reader's own split, or ``--edge-split`` once applied), else None. The transforms keep
    #: it, renumbering it when they renumber the nodes.
    link: object = None
    #: A typed graph (:mod:`hpcgnn.prep.typed`): its :class:`~hpcgnn.format.schema.Schema`, the first
    #: input id of every node type (``type_offsets`` [T + 1]) and the per-type node fields
    #: (``{type: {field: array}}``); None, None and empty for a homogeneous graph.
    schema: object = None
    type_offsets: object = None
    typed_fields: dict = field(default_factory=dict)

    @property
    def num_edges(self) -> int:
        return int(self.src.shape[0])

    def validate(self) -> Graph:
        """Local. Check ids, lengths, shapes, dtypes, finiteness, disjoint masks, labels and sparse
        ids (see module docstring); raise InputError naming the field.

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
        field, value = self.count_origin()
        if field != "num_nodes" and not ({"feat", "label"} & set(self.ndata)):
            # Without feature or label rows only the edge endpoints name nodes.
            check_sparse_ids(where, self.num_nodes, 2 * self.num_edges, field, value)
        for name, arr in self.ndata.items():
            _check_rows(where, name, arr, self.num_nodes, "num_nodes")
            check_node_field(where, name, arr)
        self._check_masks_and_labels()
        for name, arr in self.edata.items():
            _check_rows(where, f"edge_{name}", arr, self.num_edges, "num_edges")
            check_finite(where, f"edge_{name}", arr)
        if self.link is not None:
            self.link.validate(where, self.num_nodes)
        return self

    def count_origin(self):
        """Local. What set ``num_nodes``: ``(field, largest id)`` when the largest id of ``src``
        or ``dst`` implies it, else ``("num_nodes", num_nodes)`` (a count given explicitly)."""
        for name, ids in (("src", self.src), ("dst", self.dst)):
            if ids.size and int(ids.max()) + 1 == self.num_nodes:
                return name, self.num_nodes - 1
        return "num_nodes", self.num_nodes

    def check_memory(self) -> Graph:
        """Local. Refuse the graph if partitioning it cannot fit in the available memory.

        Returns the graph itself; raises InputError naming the id (or count) behind ``num_nodes``.
        """
        field, value = self.count_origin()
        check_memory(self.source, self.num_nodes, self.num_edges, field, value)
        return self

    def _check_masks_and_labels(self):
        check_masks_and_labels(self.source, self.ndata)

    def summary(self) -> str:
        """Local. One line: name, nodes, edges and fields."""
        fields = ", ".join(f"{k}{_shape_of(v)}" for k, v in self.ndata.items())
        efields = ", ".join(f"{k}{_shape_of(v)}" for k, v in self.edata.items())
        return (f"{self.name}: {self.num_nodes:,} nodes, {self.num_edges:,} edges"
                + (f"; node fields: {fields}" if fields else "")
                + (f"; edge fields: {efields}" if efields else ""))


def check_masks_and_labels(where, ndata, first=0):
    """Local. Refuse overlapping masks, labels below UNLABELLED (or a multi-label value above 1)
    and an unlabelled node inside a mask; ``first`` is the global id of row 0 (a block of a
    spread graph), so the error names the node as the input does."""
    masks = [(name, ndata[name]) for name in MASKS if name in ndata]
    for i, (first_mask, a) in enumerate(masks):
        for second, b in masks[i + 1:]:
            both = np.flatnonzero(a & b)
            if both.size:
                raise InputError(where, f"{first_mask} and {second} overlap: {both.size:,} node(s) in both, "
                                 f"e.g. node {first + int(both[0])}", second, first + int(both[0]))
    label = ndata.get("label")
    if label is None or label.size == 0:
        return
    lowest = int(label.min())
    if lowest < UNLABELLED:
        raise InputError(where, f"labels must be >= 0, or {UNLABELLED} for an unlabelled node", "label", lowest)
    if label.ndim == 2 and int(label.max()) > 1:
        raise InputError(where, f"multi-label labels [num_nodes, C] must be 0 or 1 (or {UNLABELLED} for an "
                         "unlabelled node)", "label", int(label.max()))
    if lowest == UNLABELLED:
        unlabelled = label < 0 if label.ndim == 1 else (label < 0).any(axis=1)
        for name, mask in masks:
            bad = np.flatnonzero(mask & unlabelled)
            if bad.size:
                raise InputError(where, f"node {first + int(bad[0])} is in {name} but has label {UNLABELLED} "
                                 f"(unlabelled; {bad.size:,} such node(s))", "label", first + int(bad[0]))


def _shape_of(arr):
    return list(arr.shape)


def _check_rows(where, name, arr, expected, what):
    rows = arr.shape[0] if hasattr(arr, "shape") and len(arr.shape) else None
    if rows != expected:
        raise InputError(where, f"has {rows} rows but {what} is {expected}", name, rows)


def check_sparse_ids(where, num_nodes, named, field, largest):
    """Local. Refuse a node count implied by sparse ids, before any array of that length exists.

    Parameters
    ----------
    where : str
        The input, for the message.
    num_nodes : int
        Node count implied by the largest id (largest + 1).
    named : int
        How many node ids the input names: edge endpoints plus feature or label rows.
    field : str
        Where the largest id is (``src``, ``dst``, ``test.index``, ...).
    largest : int
        The largest id.

    Raises
    ------
    InputError
        If ``num_nodes`` exceeds both ``SPARSE_ID_MIN_NODES`` and ``SPARSE_ID_FACTOR * named``.
    """
    if num_nodes > SPARSE_ID_MIN_NODES and num_nodes > SPARSE_ID_FACTOR * named:
        raise InputError(where, f"node id implies {num_nodes:,} nodes but the input names at most {named:,} "
                         f"(sparse ids); {RELABEL_HINT}", field, largest)


def as_index_array(where, field, values) -> np.ndarray:
    """Local. ``values`` as an int64 index array (node ids, CSR offsets, shapes), or InputError.

    Integer dtypes and floats holding whole numbers are accepted (some writers store indices
    as float); a fraction, NaN/inf, a non-numeric dtype or a negative value is refused, since
    casting would silently truncate it.

    Parameters
    ----------
    where : str
        The input, for the message.
    field : str
        Name of the array in the input.
    values : array_like
        The indices.

    Returns
    -------
    numpy.ndarray
        int64, same shape.
    """
    values = np.asarray(values)
    if values.dtype.kind == "f":
        whole = np.isfinite(values) & (values == np.round(values))
        if not whole.all():
            raise InputError(where, "indices must be whole numbers", field, float(values[~whole][0]))
    elif values.dtype.kind not in "iu":
        raise InputError(where, "indices must be integers", field, values.dtype)
    if values.size and values.min() < 0:
        raise InputError(where, "indices must be non-negative", field, values.min().item())
    if values.dtype.kind == "u" and values.size and values.max() > np.iinfo(np.int64).max:
        raise InputError(where, "index too large", field, values.max().item())
    return values.astype(np.int64, copy=False)


def check_memory(where, num_nodes, num_edges, field, value):
    """Local. Refuse a graph whose partitioning needs more memory than is available.

    The estimate (``PARTITION_BYTES_PER_NODE`` per node plus ``PARTITION_BYTES_PER_EDGE``
    per edge) is a lower bound of what the partitioner allocates, so a graph that would fit
    is never refused; it is meant to stop a huge id or node count before tens of GiB are asked
    for, not to predict the peak.

    Parameters
    ----------
    where : str
        The input, for the message.
    num_nodes, num_edges : int
        Sizes of the graph.
    field, value
        What set ``num_nodes`` (the field and the largest id, or ``num_nodes`` and the count).

    Raises
    ------
    InputError
        If the estimate exceeds ``available_memory()``.
    """
    need = PARTITION_BYTES_PER_NODE * int(num_nodes) + PARTITION_BYTES_PER_EDGE * int(num_edges)
    have = available_memory()
    if need > have:
        raise InputError(where, f"{int(num_nodes):,} nodes and {int(num_edges):,} edges need at least "
                         f"{need / 2**30:.1f} GiB to partition but {have / 2**30:.1f} GiB is available; "
                         f"if the ids are sparse, {RELABEL_HINT}", field, value)
