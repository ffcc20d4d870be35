"""Typed (heterogeneous) graphs in preparation: what every typed reader and generator returns.

A reader names its node types and counts, its relations as ``(src_type, relation, dst_type,
src, dst)`` with ids local to each type (``0..count-1``), per-type node fields (``feat`` of
its own width, or none: the model then learns an embedding for that type), and the labels and
split masks of the labelled type. :func:`typed_graph` checks all of it before anything large is
allocated and flattens it into the :class:`~hpcgnn.prep.graph.Graph` the partitioner takes:

- input ids numbered type by type (type ``t``'s nodes are ``offsets[t]..offsets[t+1]-1``);
- the edges relation by relation, so a stable sort by destination (the CSC build) keeps each
  node's in-edges grouped by relation; edge field :data:`~hpcgnn.format.schema.ETYPE` holds
  each edge's relation id;
- ``label`` (-1 outside the labelled type) and the split masks as full-length node fields, so
  splits, class balance and metrics read them as on a homogeneous graph;
- ``graph.schema`` (a :class:`~hpcgnn.format.schema.Schema`), ``graph.type_offsets`` and
  ``graph.typed_fields`` (``{type: {field: array over that type's nodes}}``).
"""
from __future__ import annotations

import numpy as np

from hpcgnn.format.fields import MASKS, UNLABELLED, check_node_field
from hpcgnn.format.schema import ETYPE, REVERSE_PREFIX, Schema, check_name
from hpcgnn.prep.graph import Graph
from hpcgnn.runtime.errors import InputError


def etype_dtype(num_relations: int) -> np.dtype:
    """Local. The dtype of the relation-id edge field."""
    return np.dtype(np.int8 if num_relations < 128 else np.int16)


def _check_ids(where, field, ids, count):
    ids = np.asarray(ids)
    if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
        raise InputError(where, "edge ends must be a 1-D integer array", field, f"{ids.dtype}{list(ids.shape)}")
    if ids.size:
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= count:
            bad = lo if lo < 0 else hi
            raise InputError(where, f"node id beyond its type's range [0, {count})", field, bad)
    return ids.astype(np.int64, copy=False)


def typed_graph(node_counts, relations, typed_fields=None, target=None, label=None, masks=None, name="graph",
                source="<memory>", add_reverse=False, notes=None) -> Graph:
    """Local. Check a typed graph's parts and flatten them into one :class:`Graph` (module docstring).

    Parameters
    ----------
    node_counts : dict ``{type: count}``
        Node types in type-id order.
    relations : list of ``(src_type, relation, dst_type, src, dst)``
        Edges of each relation, ``src[i] -> dst[i]``, ids local to each end's type.
    typed_fields : dict ``{type: {field: array [count, ...]}}``, optional
        Per-type node fields (``feat`` 2-D, any width; dense or ``scipy.sparse``).
    target, label, masks :
        The labelled type, its labels ``[count]`` (``-1``: unlabelled) and its split masks
        ``{"train_mask": bool [count], ...}``; a labelled type without masks is refused
        (partition's ``--split`` draws them later only for a homogeneous graph).
    add_reverse : bool
        Add relation ``rev_<r>`` (dst_type -> src_type) for every relation ``r``.
    """
    where = source
    types = tuple(node_counts)
    for t in types:
        check_name(where, "node_types", t)
        count = node_counts[t]
        if not isinstance(count, (int, np.integer)) or count < 0:
            raise InputError(where, "a node count must be a non-negative integer", f"node_counts.{t}", count)
    triples, ends = [], []
    for src_type, rel_name, dst_type, src, dst in relations:
        triples.append((src_type, rel_name, dst_type))
        ends.append((src, dst))
    if add_reverse:
        for (src_type, rel_name, dst_type), (src, dst) in list(zip(triples, ends)):
            triples.append((dst_type, REVERSE_PREFIX + rel_name, src_type))
            ends.append((dst, src))
    schema = Schema(types, tuple(triples), target).validate(where)
    counts = np.array([int(node_counts[t]) for t in types], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    if offsets[-1] == 0:
        raise InputError(where, "graph has no nodes", "node_counts", dict(node_counts))
    checked = []
    for (src_type, rel_name, dst_type), (src, dst) in zip(triples, ends):
        src = _check_ids(where, f"{rel_name}.src", src, counts[schema.type_index(src_type)])
        dst = _check_ids(where, f"{rel_name}.dst", dst, counts[schema.type_index(dst_type)])
        if src.shape != dst.shape:
            raise InputError(where, "src and dst lengths differ", f"{rel_name}.dst",
                             f"{dst.shape[0]} vs {src.shape[0]}")
        checked.append((src, dst))
    typed_fields = {t: dict(f) for t, f in (typed_fields or {}).items()}
    for t, fields in typed_fields.items():
        if t not in types:
            raise InputError(where, f"fields given for an unknown node type (the types are {', '.join(types)})",
                             "typed_fields", t)
        for field, values in fields.items():
            check_name(where, f"{t}.fields", field)
            rows = values.shape[0] if hasattr(values, "shape") and len(values.shape) else None
            if rows != counts[schema.type_index(t)]:
                raise InputError(where, f"a field of type {t} needs one row per {t} node "
                                 f"({counts[schema.type_index(t)]:,})", f"{t}.{field}", rows)
            if field in ("label",) + MASKS:
                raise InputError(where, "labels and masks belong to the labelled type (target=, label=, masks=)",
                                 f"{t}.{field}", field)
            check_node_field(where, f"{t}.{field}" if field != "feat" else "feat", values)
    ndata = {}
    if label is not None or masks:
        if target is None:
            raise InputError(where, "labels given without naming the labelled node type", "target", None)
        n_target = int(counts[schema.type_index(target)])
        first = int(offsets[schema.type_index(target)])
        label = np.asarray(label) if label is not None else None
        if label is None:
            raise InputError(where, f"type {target} has split masks but no labels", f"{target}.label", None)
        if label.shape[0] != n_target:
            raise InputError(where, f"labels need one row per {target} node ({n_target:,})", f"{target}.label",
                             label.shape[0])
        if not masks or not any(np.asarray(m).any() for m in masks.values()):
            raise InputError(where, f"type {target} has labels but no split (no train/val/test masks): give the "
                             "reader its split file", f"{target}.train_mask", None)
        full = np.full((int(offsets[-1]),) + label.shape[1:], UNLABELLED, dtype=label.dtype)
        full[first:first + n_target] = label
        ndata["label"] = full
        for mask_name, mask in masks.items():
            if mask_name not in MASKS:
                raise InputError(where, f"split masks are {', '.join(MASKS)}", f"{target}.masks", mask_name)
            mask = np.asarray(mask)
            if mask.dtype != np.bool_ or mask.shape != (n_target,):
                raise InputError(where, f"a mask is boolean with one row per {target} node", f"{target}.{mask_name}",
                                 f"{mask.dtype}{list(mask.shape)}")
            full_mask = np.zeros(int(offsets[-1]), dtype=bool)
            full_mask[first:first + n_target] = mask
            ndata[mask_name] = full_mask
    elif target is not None and target not in types:
        schema.validate(where)
    # the only large allocations: one copy of the edge ends and the relation column
    total = sum(s.shape[0] for s, _ in checked)
    src_all = np.empty(total, dtype=np.int64)
    dst_all = np.empty(total, dtype=np.int64)
    etype = np.empty(total, dtype=etype_dtype(len(triples)))
    at = 0
    for r, ((src_type, _, dst_type), (src, dst)) in enumerate(zip(triples, checked)):
        n = src.shape[0]
        np.add(src, offsets[schema.type_index(src_type)], out=src_all[at:at + n])
        np.add(dst, offsets[schema.type_index(dst_type)], out=dst_all[at:at + n])
        etype[at:at + n] = r
        at += n
    graph = Graph(int(offsets[-1]), src_all, dst_all, ndata=ndata, edata={ETYPE: etype}, name=name, source=source,
                  notes=dict(notes or {}))
    graph.schema = schema
    graph.type_offsets = offsets
    graph.typed_fields = typed_fields
    return graph
