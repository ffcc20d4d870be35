"""MAGNN's processed heterogeneous datasets (DBLP, IMDB, LastFM as MAGNN and PyG ship them),
with HGB's node-classification split beside them.

Files of the dataset directory (numpy/scipy formats, nothing unpickled)::

    node_types.npy            int type id per node, types 0..T-1           (required)
    adjM.npz                  scipy.sparse [N, N], row -> column           (required)
    features_<t>.npz / .npy   type t's features, sparse or dense, one row per node of type t
                              (optional: a type without one gets no features)
    labels.npy                classes of the labelled type's nodes         (optional)
    train_val_test_idx.npz    train_idx / val_idx / test_idx: ids among the labelled type's nodes
    hgb_split/label.dat       HGB: train+val nodes, 'id<TAB>name<TAB>type<TAB>label' (--hgb-split)
    hgb_split/label.dat.test_full (else label.dat.test)   HGB: the test nodes

A node's id inside its type is its rank among the nodes of that type (nodes are usually
numbered type by type, so these are the file's ids minus the type's first id). Node type names
are ``--type-names a,b,...``, else those of ``hgb_split/info.dat``, else MAGNN's for a known
layout (DBLP's type counts: author, paper, term, venue; IMDB's: movie, director, actor;
LastFM's: user, artist, tag), else ``type0``, ``type1``, ... Every ordered pair of types with
entries in ``adjM``'s block is one relation named ``<src_type>-<dst_type>`` (adjM stores both
directions of a link, so ``author-paper`` and ``paper-author`` are two relations), one edge per
stored nonzero. The labelled type is the one with as many nodes as ``labels.npy`` has rows
(``--target-type`` when several have).

The split is MAGNN's ``train_val_test_idx.npz`` unless ``--hgb-split``: then HGB's files give
the test nodes (their ids are the global ids of ``node_types.npy``), and ``label.dat``'s nodes
are split as HGB does on every run, here by a seeded stratified ``--val-fraction`` (default
0.2, HGB's 80/20) held out for validation (seed: ``--split-seed``). The labels always come
from ``labels.npy``: HGB scrambles the test file's labels, and ``label.dat``'s must agree.
"""
from __future__ import annotations

import json
import os
import zipfile

import numpy as np
import scipy.sparse as sp

from hpcgnn.prep.graph import Graph
from hpcgnn.prep.read.typed_common import DEFAULT_VAL_FRACTION, check_fraction, hold_out_validation, masks_from_ids
from hpcgnn.prep.typed import typed_graph
from hpcgnn.runtime.errors import InputError

REQUIRED = ("adjM.npz", "node_types.npy")
HGB_DIR = "hgb_split"
#: MAGNN's type names of the layouts it published, by their type counts
KNOWN_TYPES = {(4057, 14328, 7723, 20): ("author", "paper", "term", "venue"),
               (4278, 2081, 5257): ("movie", "director", "actor"),
               (1892, 17632, 1088): ("user", "artist", "tag")}
SPLIT_KEYS = (("train_idx", "train_mask"), ("val_idx", "val_mask"), ("test_idx", "test_mask"))


def is_magnn_dir(path) -> bool:
    """Local. Whether ``path`` is a MAGNN dataset directory (``adjM.npz`` and ``node_types.npy``)."""
    return os.path.isdir(path) and all(os.path.isfile(os.path.join(path, name)) for name in REQUIRED)


def magnn_root(path) -> str:
    """Local. The dataset directory of ``path``: itself, or the directory of its ``adjM.npz``."""
    path = os.fspath(path)
    if os.path.basename(path) == "adjM.npz":
        path = os.path.dirname(path) or "."
    if not is_magnn_dir(path):
        raise InputError(path, f"not a MAGNN dataset directory (needs {' and '.join(REQUIRED)})", "format", "magnn")
    return path


def _load_npy(path, field):
    try:
        return np.load(path, allow_pickle=False)
    except ValueError as exc:
        raise InputError(path, f"not a plain numeric array ({exc})", field, "npy") from None


def _load_sparse(path, field):
    try:
        return sp.load_npz(path)
    except (ValueError, KeyError, OSError, zipfile.BadZipFile) as exc:
        raise InputError(path, f"not a scipy.sparse .npz ({' '.join(str(exc).split())})", field, "npz") from None


def _node_types(path):
    types = _load_npy(path, "node_types")
    if types.ndim != 1 or not np.issubdtype(types.dtype, np.integer) or types.size == 0:
        raise InputError(path, "node types are a non-empty 1-D integer array", "node_types",
                         f"{types.dtype}{list(types.shape)}")
    if types.min() < 0:
        raise InputError(path, "node type ids are 0..T-1", "node_types", int(types.min()))
    counts = np.bincount(types)
    if (counts == 0).any():
        raise InputError(path, "node type ids are 0..T-1, each with nodes", "node_types",
                         f"no node of type {int(np.flatnonzero(counts == 0)[0])}")
    return types.astype(np.int64), counts


def _type_names(root, counts, given):
    where = os.path.join(root, "node_types.npy")
    if given is not None:
        names = [n.strip() for n in given.split(",")] if isinstance(given, str) else list(given)
        if len(names) != counts.shape[0]:
            raise InputError(where, f"needs {counts.shape[0]} type names, one per node type", "--type-names", given)
        return tuple(names), "--type-names"
    info = os.path.join(root, HGB_DIR, "info.dat")
    if os.path.isfile(info):
        try:
            with open(info, encoding="utf-8") as fh:
                listed = json.load(fh)["node.dat"]["node type"]
            names = tuple(str(listed[str(t)]) for t in range(counts.shape[0]))
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
            raise InputError(info, f"cannot read the node type names ({type(exc).__name__}: {exc}); name them with "
                             "--type-names a,b,...", "node.dat.node type", None) from None
        return names, os.path.join(HGB_DIR, "info.dat")
    known = KNOWN_TYPES.get(tuple(int(c) for c in counts))
    if known is not None:
        return known, "MAGNN's names for these type counts"
    return tuple(f"type{t}" for t in range(counts.shape[0])), "numbered"


def _features(root, t, type_name, count):
    for suffix, load in ((".npz", _load_sparse), (".npy", _load_npy)):
        path = os.path.join(root, f"features_{t}{suffix}")
        if not os.path.isfile(path):
            continue
        value = load(path, "features")
        if sp.issparse(value):
            value = sp.csr_matrix(value, dtype=np.float32)
        elif value.ndim != 2 or value.dtype.kind not in "biuf":
            raise InputError(path, "features are a 2-D numeric array", "features", f"{value.dtype}{list(value.shape)}")
        else:
            value = value.astype(np.float32, copy=False)
        if value.shape[0] != count:
            raise InputError(path, f"needs one row per {type_name} node ({count:,})", "rows", value.shape[0])
        return value
    return None


def _target(root, counts, names, labels, given):
    where = os.path.join(root, "labels.npy")
    if given is not None:
        if given not in names:
            raise InputError(where, f"no such node type (the types are {', '.join(names)})", "--target-type", given)
        t = names.index(given)
    else:
        matches = np.flatnonzero(counts == labels.shape[0])
        if matches.shape[0] != 1:
            found = ", ".join(names[i] for i in matches) or "none"
            raise InputError(where, f"cannot tell which node type the labels belong to (types with "
                             f"{labels.shape[0]:,} nodes: {found}); name it with --target-type TYPE",
                             "--target-type", None)
        t = int(matches[0])
    if labels.shape[0] != counts[t]:
        raise InputError(where, f"labels need one row per {names[t]} node ({counts[t]:,})", "rows", labels.shape[0])
    return t


def _labels(path):
    labels = _load_npy(path, "labels")
    if labels.ndim not in (1, 2) or labels.dtype.kind not in "biuf":
        raise InputError(path, "labels are a 1-D array of classes (or [n, C] 0/1)", "labels",
                         f"{labels.dtype}{list(labels.shape)}")
    if labels.dtype.kind == "f":
        if not np.isfinite(labels).all() or (labels != np.round(labels)).any():
            bad = labels[~np.isfinite(labels) | (labels != np.round(labels))][0]
            raise InputError(path, "labels must be whole numbers", "labels", float(bad))
    return labels.astype(np.int64)


def _magnn_split(root):
    path = os.path.join(root, "train_val_test_idx.npz")
    if not os.path.isfile(path):
        return None
    try:
        archive = np.load(path, allow_pickle=False)
    except (ValueError, OSError, zipfile.BadZipFile) as exc:
        raise InputError(path, f"not a readable .npz ({exc})", "format", "npz") from None
    with archive:
        missing = [key for key, _ in SPLIT_KEYS if key not in archive.files]
        if missing:
            raise InputError(path, f"split needs {', '.join(k for k, _ in SPLIT_KEYS)} (has "
                             f"{', '.join(archive.files)})", missing[0], None)
        return path, {mask: archive[key].reshape(-1) for key, mask in SPLIT_KEYS}


def _hgb_rows(path, types, local, target, names):
    """Target-type ids and label column values of an HGB ``label.dat`` file."""
    ids, values = [], []
    with open(path, encoding="utf-8", errors="surrogateescape") as fh:
        for number, line in enumerate(fh, 1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            cells = line.split("\t")
            if len(cells) != 4 or not cells[0].strip().isdigit():
                raise InputError(path, "HGB label lines are 'id<TAB>name<TAB>type<TAB>label'", f"line {number}", line)
            node = int(cells[0])
            if node >= types.shape[0]:
                raise InputError(path, f"node id beyond the graph's {types.shape[0]:,} nodes", f"line {number}", node)
            if types[node] != target:
                raise InputError(path, f"node is of type {names[types[node]]}, not the labelled type "
                                 f"{names[target]} (--target-type)", f"line {number}", node)
            ids.append(local[node])
            values.append(cells[3].strip())
    if not ids:
        raise InputError(path, "HGB label file has no rows", "rows", 0)
    return np.asarray(ids, dtype=np.int64), values


def _hgb_split(root, types, local, target, names, labels, val_fraction, split_seed):
    directory = os.path.join(root, HGB_DIR)
    train_path = os.path.join(directory, "label.dat")
    if not os.path.isfile(train_path):
        raise InputError(train_path, "--hgb-split reads HGB's label.dat and label.dat.test_full under hgb_split/",
                         "--hgb-split", "<absent>")
    test_path = next((os.path.join(directory, name) for name in ("label.dat.test_full", "label.dat.test")
                      if os.path.isfile(os.path.join(directory, name))), None)
    if test_path is None:
        raise InputError(os.path.join(directory, "label.dat.test_full"), "HGB's test file is missing", "--hgb-split",
                         "<absent>")
    train_ids, values = _hgb_rows(train_path, types, local, target, names)
    if labels.ndim == 1:
        for k, value in enumerate(values):
            if value.lstrip("-").isdigit() and int(value) != labels[train_ids[k]]:
                raise InputError(train_path, f"label disagrees with labels.npy ({int(labels[train_ids[k]])}) for "
                                 f"{names[target]} {train_ids[k]}", "label", value)
    test_ids, _ = _hgb_rows(test_path, types, local, target, names)
    if labels.ndim == 1:
        train, val = hold_out_validation(train_path, train_ids, labels[train_ids], val_fraction, split_seed)
    else:
        train, val = hold_out_validation(train_path, train_ids, np.zeros(train_ids.shape[0]), val_fraction, split_seed)
    return test_path, {"train_mask": train, "val_mask": val, "test_mask": test_ids}


def read_magnn(path, hgb_split=False, val_fraction=DEFAULT_VAL_FRACTION, split_seed=0, type_names=None,
               target_type=None, name=None) -> Graph:
    """Local. Read a MAGNN dataset directory (layout: module docstring).

    Parameters
    ----------
    path : str or os.PathLike
        The directory, or its ``adjM.npz``.
    hgb_split : bool
        Use HGB's split under ``hgb_split/`` instead of ``train_val_test_idx.npz``.
    val_fraction, split_seed :
        With ``hgb_split``: the stratified fraction of ``label.dat``'s nodes held out for
        validation, and its seed.
    type_names : str or sequence, optional
        Node type names in type-id order (``"author,paper,term,venue"``).
    target_type : str, optional
        The labelled type, when several types have as many nodes as ``labels.npy`` has rows.

    Returns
    -------
    Graph
        A typed graph (:func:`~hpcgnn.prep.typed.typed_graph`).
    """
    root = magnn_root(path)
    val_fraction = check_fraction(root, val_fraction)
    types_path = os.path.join(root, "node_types.npy")
    types, counts = _node_types(types_path)
    names, named_by = _type_names(root, counts, type_names)
    adjacency_path = os.path.join(root, "adjM.npz")
    adjacency = _load_sparse(adjacency_path, "adjM")
    if adjacency.shape != (types.shape[0], types.shape[0]):
        raise InputError(adjacency_path, f"adjacency must be [N, N] with N = {types.shape[0]:,} nodes of "
                         "node_types.npy", "shape", adjacency.shape)
    order = np.argsort(types, kind="stable")
    offsets = np.concatenate([[0], np.cumsum(counts)])
    local = np.empty(types.shape[0], dtype=np.int64)
    local[order] = np.arange(types.shape[0]) - offsets[types[order]]
    typed_fields = {}
    for t, type_name in enumerate(names):
        feat = _features(root, t, type_name, int(counts[t]))
        if feat is not None:
            typed_fields[type_name] = {"feat": feat}
    target = label = masks = None
    notes = {"type_names": named_by}
    labels_path = os.path.join(root, "labels.npy")
    if os.path.isfile(labels_path):
        labels = _labels(labels_path)
        t = _target(root, counts, names, labels, target_type)
        target, label = names[t], labels
        if hgb_split:
            split_path, splits = _hgb_split(root, types, local, t, names, labels, val_fraction, split_seed)
            notes.update(split="hgb", val_fraction=val_fraction, split_seed=int(split_seed),
                         test_file=os.path.basename(split_path))
        else:
            found = _magnn_split(root)
            if found is None:
                raise InputError(os.path.join(root, "train_val_test_idx.npz"), f"type {target} has labels but no "
                                 "split: MAGNN's split file is missing (--hgb-split reads HGB's)", "train_idx", None)
            split_path, splits = found
            notes["split"] = "magnn"
        masks = masks_from_ids(split_path, int(counts[t]), splits)
    elif hgb_split:
        raise InputError(labels_path, "--hgb-split needs the labels of labels.npy", "--hgb-split", "<absent>")
    adjacency = sp.coo_matrix(sp.csr_matrix(adjacency))  # row-major, duplicates summed
    adjacency.sum_duplicates()
    adjacency.eliminate_zeros()
    row_type, col_type = types[adjacency.row], types[adjacency.col]
    pair = row_type * len(names) + col_type
    relations = []
    for key in np.unique(pair):
        s, d = divmod(int(key), len(names))
        keep = pair == key
        relations.append((names[s], f"{names[s]}-{names[d]}", names[d], local[adjacency.row[keep]],
                          local[adjacency.col[keep]]))
    return typed_graph({n: int(c) for n, c in zip(names, counts)}, relations, typed_fields, target=target,
                       label=label, masks=masks, name=name or os.path.basename(os.path.abspath(root)),
                       source=root, notes=notes)
