"""A typed graph in one ``.npz``: hpcgnn's own layout for typed data that comes in no other.

Every array is named ``<what>/<type>`` (or ``edges/<src_type>/<relation>/<dst_type>``), names
following the schema's rule (letters, digits, ``_``, ``-``; at most 64, not starting with a
digit or ``-``)::

    num_nodes/<type>                  integer scalar: the type's node count   (one per node type)
    edges/<src_type>/<rel>/<dst_type> integer [E, 2]: src, dst ids local to each end's type
                                      (0..count-1)                            (one per relation)
    feat/<type>                       numeric [count, F]: the type's features (optional; a type
                                      without features gets a learnable embedding)
    label/<type>                      integer [count] (-1: unlabelled) or [count, C] of 0/1
                                      (multi-label); at most one type carries labels
    train_mask/<type>, val_mask/<type>, test_mask/<type>
                                      bool [count]: the labelled type's split (required with labels)

Node types and relations keep the archive's order (``np.savez`` writes keyword order); every
relation name is distinct (``--add-reverse`` and the reader's other arguments:
:mod:`~hpcgnn.prep.read.typed_common`). Written with numpy alone, e.g.::

    np.savez("g.npz", **{"num_nodes/paper": 3, "num_nodes/author": 2,
                         "edges/author/writes/paper": np.array([[0, 0], [1, 2]]),
                         "feat/paper": paper_features, "label/paper": np.array([0, 1, -1]),
                         "train_mask/paper": np.array([True, False, False]), ...})
"""
from __future__ import annotations

import os
import zipfile

import numpy as np

from hpcgnn.format.fields import MASKS
from hpcgnn.format.schema import NAME_PATTERN
from hpcgnn.prep.graph import Graph
from hpcgnn.prep.typed import typed_graph
from hpcgnn.runtime.errors import InputError

PER_TYPE = ("num_nodes", "feat", "label") + MASKS
CONVENTION = ("num_nodes/<type>, edges/<src_type>/<relation>/<dst_type>, feat/<type>, label/<type>, "
              "train_mask/<type>, val_mask/<type>, test_mask/<type>")


def is_typed_npz_keys(keys) -> bool:
    """Local. Whether an npz's array names are those of this layout."""
    return any(k.startswith("edges/") for k in keys) and any(k.startswith("num_nodes/") for k in keys)


def _names_ok(parts):
    return all(NAME_PATTERN.fullmatch(part) for part in parts)


def read_typed_npz(path, add_reverse=False, name=None) -> Graph:
    """Local. Read a typed ``.npz`` (layout: module docstring).

    Parameters
    ----------
    path : str or os.PathLike
        The ``.npz`` file.
    add_reverse, name :
        As every typed reader takes them (:mod:`~hpcgnn.prep.read.typed_common`).

    Returns
    -------
    Graph
        A typed graph (:func:`~hpcgnn.prep.typed.typed_graph`).
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise InputError(path, "file not found")
    if not zipfile.is_zipfile(path):
        raise InputError(path, "not a .npz (zip) archive", "format", "typed_npz")
    with np.load(path, allow_pickle=False) as archive:
        keys = list(archive.files)
        counts, edge_keys, per_type = {}, [], {}
        for key in keys:
            parts = key.split("/")
            if parts[0] == "edges" and len(parts) == 4 and _names_ok(parts[1:]):
                edge_keys.append(key)
            elif parts[0] in PER_TYPE and len(parts) == 2 and _names_ok(parts[1:]):
                per_type.setdefault(parts[0], {})[parts[1]] = key
            else:
                raise InputError(path, f"not an array of the typed npz layout ({CONVENTION}; names of letters, "
                                 "digits, '_' and '-')", "keys", key)
        for node_type, key in per_type.get("num_nodes", {}).items():
            value = archive[key]
            if value.size != 1 or not np.issubdtype(value.dtype, np.integer) or int(value.reshape(-1)[0]) < 0:
                raise InputError(path, "a node count is one non-negative integer", key,
                                 value.reshape(-1)[:3].tolist() if value.size else "[]")
            counts[node_type] = int(value.reshape(-1)[0])
        if not counts:
            raise InputError(path, "no node types: one num_nodes/<type> count per type", "num_nodes", None)
        for named in per_type.values():
            for node_type, key in named.items():
                if node_type not in counts:
                    raise InputError(path, f"names an unknown node type (the types, from num_nodes/<type>, are "
                                     f"{', '.join(counts)})", key, node_type)
        relations, seen = [], {}
        for key in edge_keys:
            _, src_type, rel, dst_type = key.split("/")
            for end in (src_type, dst_type):
                if end not in counts:
                    raise InputError(path, f"relation {rel!r} names an unknown node type (the types, from "
                                     f"num_nodes/<type>, are {', '.join(counts)})", key, end)
            if rel in seen:
                raise InputError(path, f"relation named twice (also {seen[rel]}): relation names must be distinct",
                                 key, rel)
            seen[rel] = key
            edges = archive[key]
            if edges.ndim != 2 or edges.shape[1] != 2 or not np.issubdtype(edges.dtype, np.integer):
                raise InputError(path, "an edge list is an integer [E, 2] array (src, dst)", key,
                                 f"{edges.dtype}{list(edges.shape)}")
            for column, end in ((0, src_type), (1, dst_type)):
                ids = edges[:, column]
                if ids.size and (ids.min() < 0 or ids.max() >= counts[end]):
                    bad = int(ids.min()) if ids.min() < 0 else int(ids.max())
                    raise InputError(path, f"{'src' if column == 0 else 'dst'} id beyond type {end}'s range "
                                     f"[0, {counts[end]})", key, bad)
            relations.append((src_type, rel, dst_type, edges[:, 0].astype(np.int64), edges[:, 1].astype(np.int64)))
        typed_fields = {}
        for node_type, key in per_type.get("feat", {}).items():
            feat = archive[key]
            if feat.ndim != 2 or feat.dtype.kind not in "biuf":
                raise InputError(path, "features are a numeric [count, F] array", key,
                                 f"{feat.dtype}{list(feat.shape)}")
            if feat.shape[0] != counts[node_type]:
                raise InputError(path, f"needs one row per {node_type} node ({counts[node_type]:,})", key,
                                 feat.shape[0])
            typed_fields[node_type] = {"feat": feat.astype(np.float32, copy=False)}
        labelled = per_type.get("label", {})
        mask_types = {t for m in MASKS for t in per_type.get(m, {})}
        target = label = masks = None
        if len(labelled) > 1:
            raise InputError(path, "labels on several node types; one type carries labels", "label",
                             ", ".join(labelled))
        if labelled:
            target, key = next(iter(labelled.items()))
            label = archive[key]
            if label.ndim not in (1, 2) or not np.issubdtype(label.dtype, np.integer):
                raise InputError(path, "labels are integer [count] (-1: unlabelled) or [count, C]", key,
                                 f"{label.dtype}{list(label.shape)}")
            if label.shape[0] != counts[target]:
                raise InputError(path, f"needs one row per {target} node ({counts[target]:,})", key, label.shape[0])
            masks = {}
            for mask_name in MASKS:
                mask_key = per_type.get(mask_name, {}).get(target)
                if mask_key is None:
                    continue
                mask = archive[mask_key]
                if mask.dtype != np.bool_ or mask.shape != (counts[target],):
                    raise InputError(path, f"a split mask is bool with one row per {target} node "
                                     f"({counts[target]:,})", mask_key, f"{mask.dtype}{list(mask.shape)}")
                masks[mask_name] = mask
            if not any(m.any() for m in masks.values()):
                raise InputError(path, f"type {target} has labels but no split: give train_mask/{target} (and "
                                 f"val_mask/{target}, test_mask/{target})", f"train_mask/{target}", None)
        stray = mask_types - ({target} if target else set())
        if stray:
            mask_type = sorted(stray)[0]
            raise InputError(path, "a split mask on a type without labels (label/<type>)", f"train_mask/{mask_type}",
                             mask_type)
    return typed_graph(counts, relations, typed_fields, target=target, label=label.astype(np.int64)
                       if label is not None else None, masks=masks, name=name or
                       os.path.splitext(os.path.basename(path))[0], source=path, add_reverse=add_reverse)
