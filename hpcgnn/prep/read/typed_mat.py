"""MATLAB ``.mat`` files of per-relation matrices: HAN's ACM layout (``PvsA``, ``PvsL``, ``PvsT``, ...).

Every variable named ``<X>vs<Y>`` (``X`` and ``Y`` a capital letter and optional lower-case
letters: ``PvsA``, ``AvsF``) is a relation from node type ``X`` to node type ``Y``: an
``[n_X, n_Y]`` matrix (sparse or dense) whose stored nonzeros are its edges, row -> column,
values ignored. The relation is named as the variable, the node types by the letters; a type's
count is the matching side of its matrices, which must agree, and a letter that no relation
uses (``C`` of a ``PvsC`` read as labels) names no node type. Variables of other names
(``CNormPvsA``, name cells such as ``P``) are not read. HAN's files store each relation once
(``--add-reverse`` adds ``rev_<XvsY>``, ``Y`` -> ``X``: :mod:`~hpcgnn.prep.read.typed_common`).

Labels (``--mat-labels NAME``, else a variable named ``label(s)``, ``gnd``, ``y``, ...) are a
vector of class codes (numbered 0..C-1 in ascending order of the codes, ``notes['class_names']``)
or a one-hot ``[n, C]`` matrix, on the type with that many nodes (``--target-type`` when several
have); an ``XvsY`` matrix named by ``--mat-labels`` (``PvsC``: a paper's conference) is a label
source, not a relation. Features (``--mat-features NAME``, else a variable named ``feat(s)``,
``features``, ``X``, ...) belong to the type with as many nodes as the variable has rows (the
labelled type first); an ``XvsY`` matrix named by ``--mat-features`` (``PvsT``: a paper's terms,
as HAN's ACM features are) gives type ``X`` its features and is not a relation. The split is
``train_idx`` / ``val_idx`` / ``test_idx`` (0-based ids among the labelled type's nodes),
required with labels.
"""
from __future__ import annotations

import os
import re

import h5py
import numpy as np
import scipy.io
import scipy.sparse as sp

from hpcgnn.prep.graph import Graph
from hpcgnn.prep.read.mat import FEATURE_NAMES, LABEL_NAMES, describe, load_mat_variables
from hpcgnn.prep.read.shchur import labels_from_onehot
from hpcgnn.prep.read.typed_common import class_ids, masks_from_ids
from hpcgnn.prep.typed import typed_graph
from hpcgnn.runtime.errors import InputError

RELATION_NAME = re.compile(r"([A-Z][a-z]*)vs([A-Z][a-z]*)")
SPLIT_NAMES = (("train_idx", "train_mask"), ("val_idx", "val_mask"), ("test_idx", "test_mask"))


def mat_variable_names(path) -> list:
    """Local. The variable names of a ``.mat`` file without loading them (v4-v7 and v7.3)."""
    try:
        with open(path, "rb") as fh:
            major, _ = scipy.io.matlab.matfile_version(fh)
        if major == 2:
            with h5py.File(path, "r") as mat:
                return [name for name in mat if not name.startswith("#")]
        return [name for name, _, _ in scipy.io.whosmat(path)]
    except (ValueError, OSError, TypeError, scipy.io.matlab.MatReadError) as exc:
        raise InputError(path, f"not a MATLAB .mat file ({exc})", "format", "mat") from None


def is_typed_mat(path) -> bool:
    """Local. Whether a ``.mat`` file holds per-relation ``XvsY`` matrices."""
    return any(RELATION_NAME.fullmatch(name) for name in mat_variable_names(path))


def _rows_of(value, count):
    """``value`` with one row per node when it has ``count`` rows (a [1, n] row vector turned)."""
    if value.shape[0] == count:
        return value
    if len(value.shape) == 2 and value.shape[0] == 1 and value.shape[1] == count:
        return value.T
    return None


def _owner(path, counts, value, target, flag, name):
    """The type ``value`` has a row per node of (the labelled type first)."""
    rows = [t for t, n in counts.items() if _rows_of(value, n) is not None]
    if target in rows:
        return target
    if len(rows) != 1:
        found = ", ".join(f"{t} ({counts[t]})" for t in rows) or "none"
        raise InputError(path, f"cannot tell which node type '{name}' [{'x'.join(map(str, value.shape))}] belongs "
                         f"to (types with that many nodes: {found}); name it with --target-type TYPE", flag, name)
    return rows[0]


def _choose(path, variables, given, names, flag, role):
    if given is not None:
        if given not in variables:
            raise InputError(path, f"no numeric variable of that name (variables: {describe(variables)})", flag, given)
        return given
    named = [name for name in variables if name.lower() in names]
    if len(named) > 1:
        raise InputError(path, f"several {role} variables ({describe(variables, named)}); choose one with {flag} NAME",
                         flag, None)
    return named[0] if named else None


def _label_values(path, name, value):
    if sp.issparse(value) or (value.ndim == 2 and value.shape[1] > 1):
        return labels_from_onehot(value), {}
    value = np.asarray(value).reshape(-1)
    if value.dtype.kind == "f" and not (np.isfinite(value) & (value == np.round(value))).all():
        raise InputError(path, "label codes must be whole numbers", name, float(value[value != np.round(value)][0]))
    labels, class_names = class_ids(value.astype(np.int64))
    return labels, {"class_names": class_names}


def read_typed_mat(path, labels_var=None, features_var=None, target_type=None, add_reverse=False,
                   name=None) -> Graph:
    """Local. Read a ``.mat`` file of per-relation matrices (layout: module docstring).

    Parameters
    ----------
    path : str or os.PathLike
        The ``.mat`` file (v4 to v7.3).
    labels_var, features_var : str, optional
        The label and feature variables (``--mat-labels``, ``--mat-features``).
    target_type, add_reverse, name :
        As every typed reader takes them (:mod:`~hpcgnn.prep.read.typed_common`); a type is
        named by its letter of the ``XvsY`` names.

    Returns
    -------
    Graph
        A typed graph (:func:`~hpcgnn.prep.typed.typed_graph`).
    """
    path = os.fspath(path)
    variables = load_mat_variables(path)
    labels_name = _choose(path, variables, labels_var, LABEL_NAMES, "--mat-labels", "label")
    features_name = _choose(path, variables, features_var, FEATURE_NAMES, "--mat-features", "feature")
    counts, sizes, relations = {}, {}, []
    for key, value in variables.items():
        match = RELATION_NAME.fullmatch(key)
        if match is None or len(value.shape) != 2:
            continue
        for node_type, count in zip(match.groups(), value.shape):
            if node_type in counts and counts[node_type] != count:
                raise InputError(path, f"type {node_type} has {counts[node_type]} nodes in {sizes[node_type]} but "
                                 f"{count} here", key, "x".join(map(str, value.shape)))
            counts.setdefault(node_type, int(count))
            sizes.setdefault(node_type, key)
        if key in (labels_name, features_name):
            continue
        matrix = sp.coo_matrix(sp.csr_matrix(value))
        matrix.sum_duplicates()
        matrix.eliminate_zeros()
        relations.append((match.group(1), key, match.group(2), matrix.row.astype(np.int64),
                          matrix.col.astype(np.int64)))
    if not relations:
        raise InputError(path, f"no XvsY relation matrix (variables: {describe(variables)})", "relations", None)
    # a letter seen only in the label or feature matrix (PvsC's C, PvsT's T) names no node type
    used = {end for src_type, _, dst_type, _, _ in relations for end in (src_type, dst_type)}
    counts = {t: n for t, n in counts.items() if t in used}
    if target_type is not None and target_type not in counts:
        raise InputError(path, f"no such node type (the types are {', '.join(counts)})", "--target-type", target_type)
    target, label, masks, notes = None, None, None, {"relations": [r[1] for r in relations]}
    if labels_name is not None:
        value = variables[labels_name]
        match = RELATION_NAME.fullmatch(labels_name)
        target = match.group(1) if match else _owner(path, counts, value, target_type, "--mat-labels", labels_name)
        if target not in counts:
            raise InputError(path, f"labels of type {target}, which no relation has", "--mat-labels", labels_name)
        label, class_notes = _label_values(path, labels_name, _rows_of(value, counts[target]))
        notes.update(class_notes, labels=labels_name)
        splits = {mask: variables[key] for key, mask in SPLIT_NAMES if key in variables}
        if not splits:
            raise InputError(path, f"type {target} has labels but no split: the file needs train_idx (val_idx, "
                             f"test_idx) with ids among the {target} nodes", "train_idx", None)
        for key, mask in SPLIT_NAMES:
            if mask in splits:
                ids = np.asarray(splits[mask].toarray() if sp.issparse(splits[mask]) else splits[mask]).reshape(-1)
                if ids.dtype.kind == "f" and (ids != np.round(ids)).any():
                    raise InputError(path, "split ids must be whole numbers", key, float(ids[ids != np.round(ids)][0]))
                splits[mask] = ids.astype(np.int64)
        masks = masks_from_ids(path, counts[target], splits)
    typed_fields = {}
    if features_name is not None:
        value = variables[features_name]
        match = RELATION_NAME.fullmatch(features_name)
        owner = match.group(1) if match else _owner(path, counts, value, target, "--mat-features", features_name)
        if owner not in counts:
            raise InputError(path, f"features of type {owner}, which no relation has", "--mat-features",
                             features_name)
        feat = _rows_of(value, counts[owner])
        typed_fields[owner] = {"feat": sp.csr_matrix(feat, dtype=np.float32) if sp.issparse(feat)
                               else np.asarray(feat, dtype=np.float32)}
        notes["features"] = f"{features_name} ({owner})"
    return typed_graph(counts, relations, typed_fields, target=target, label=label, masks=masks,
                       name=name or os.path.splitext(os.path.basename(path))[0], source=path,
                       add_reverse=add_reverse, notes=notes)
