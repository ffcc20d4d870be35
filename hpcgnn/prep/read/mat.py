"""MATLAB ``.mat`` graphs (facebook100, BlogCatalog, ...): an adjacency plus node variables.

Each variable plays one role, found by shape and name unless a flag names it:

adjacency (``--mat-adjacency NAME``)
    The only square sparse matrix (else the only square matrix); among several, the one with a
    conventional name (``A``, ``adj``, ``adjacency``, ``network``, ``net``, ``graph``, ``G``,
    ``W``). One edge per stored nonzero, row -> column, as in the Shchur reader.
labels (``--mat-labels NAME``)
    A variable named ``label(s)``, ``gnd``, ``group(s)``, ``class(es)`` or ``y`` with one row per
    node: a vector of class codes (numbered 0..C-1 in ascending order of the codes, which are
    kept as ``notes['class_names']``), or an [N, C] 0/1 matrix (one class per row; an empty row
    is unlabelled; several classes in a row make the whole matrix multi-label).
features (``--mat-features NAME``)
    A variable named ``X``, ``feat(s)``, ``features``, ``fea`` or ``attr(ibutes)`` -> ``feat``.
attribute table (``--mat-attributes NAME``)
    An [N, k] table of integer codes with 0 for a missing value, such as facebook100's
    ``local_info`` (status, gender, major, minor, dorm, year, high school). ``label_column`` (the
    0-based column) takes the labels from it: each nonzero code is a class, numbered in
    ascending order of the codes, and 0 is unlabelled (-1). Without ``table_features=False``
    the other columns become features, one-hot: one 0/1 column per nonzero code of each
    column (the codes name categories such as a dorm, so their numeric values mean nothing),
    appended to the features variable if there is one, kept sparse.

MATLAB v7.3 files are HDF5 inside; they are read with h5py (numeric arrays and sparse
matrices; cells, structs and strings are skipped). Nothing in a ``.mat`` file is executed.
"""
from __future__ import annotations

import os

import h5py
import numpy as np
import scipy.io
import scipy.sparse as sp

from hpcgnn.prep.graph import Graph
from hpcgnn.prep.read.shchur import edges_from_adjacency, labels_from_onehot
from hpcgnn.runtime.errors import InputError

_ADJACENCY_NAMES = ("a", "adj", "adjacency", "adj_matrix", "network", "net", "graph", "g", "w")
LABEL_NAMES = ("label", "labels", "gnd", "group", "groups", "class", "classes", "y")
FEATURE_NAMES = ("x", "feat", "feats", "features", "fea", "attr", "attributes", "attr_matrix")
_LISTED = 12  # variables named in an error message


def load_mat_variables(path) -> dict:
    """Local. The numeric matrices of a ``.mat`` file (any version), by variable name.

    Parameters
    ----------
    path : str or os.PathLike
        A MATLAB v4/v5/v7 (scipy.io) or v7.3 (HDF5) file.

    Returns
    -------
    dict
        Name -> 2-D numpy array or scipy.sparse matrix, in MATLAB's orientation (rows first);
        a vector is [1, n] or [n, 1] as saved. Strings, cells and structs are left out.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise InputError(path, "file not found")
    try:
        with open(path, "rb") as fh:
            major, _ = scipy.io.matlab.matfile_version(fh)
    except (ValueError, OSError, scipy.io.matlab.MatReadError) as exc:
        raise InputError(path, f"not a MATLAB .mat file ({exc})", "format", "mat") from None
    if major == 2:
        return _load_hdf5_mat(path)
    try:
        contents = scipy.io.loadmat(path)
    except (ValueError, TypeError, OSError, scipy.io.matlab.MatReadError) as exc:
        raise InputError(path, f"cannot be read as a MATLAB .mat file ({exc})", "format", "mat") from None
    return {name: value for name, value in contents.items()
            if not name.startswith("__") and _is_matrix(value)}


def _is_matrix(value):
    if sp.issparse(value):
        return True
    return isinstance(value, np.ndarray) and value.ndim in (1, 2) and value.dtype.kind in "biuf"


def _load_hdf5_mat(path):
    variables = {}
    try:
        with h5py.File(path, "r") as mat:
            for name, item in mat.items():
                if name.startswith("#"):  # "#refs#": the storage behind cells and structs
                    continue
                value = _hdf5_variable(item)
                if value is not None:
                    variables[name] = value
    except OSError as exc:
        raise InputError(path, f"cannot be read as a MATLAB v7.3 (HDF5) file ({exc})", "format", "mat") from None
    return variables


def _hdf5_variable(item):
    if isinstance(item, h5py.Group):
        if "MATLAB_sparse" not in item.attrs:
            return None  # a struct
        rows = int(item.attrs["MATLAB_sparse"])
        offsets = item["jc"][()].astype(np.int64)
        indices = item["ir"][()].astype(np.int64) if "ir" in item else np.zeros(0, np.int64)
        values = item["data"][()] if "data" in item else np.ones(indices.shape[0])
        if values.dtype.names:  # complex: a compound (real, imag) type
            return None
        return sp.csc_matrix((values, indices, offsets), shape=(rows, offsets.shape[0] - 1))
    kind = item.attrs.get("MATLAB_class", b"")
    kind = kind.decode() if isinstance(kind, bytes) else str(kind)
    if kind in ("char", "cell", "struct", "function_handle") or "MATLAB_empty" in item.attrs:
        return None
    value = item[()]
    if not (isinstance(value, np.ndarray) and value.ndim in (1, 2) and value.dtype.kind in "biuf"):
        return None
    return value.T  # HDF5 holds MATLAB's column-major arrays transposed


def describe(variables, names=None) -> str:
    """Local. ``"A [5x5 sparse], local_info [5x7 float64]"`` for the named (default all) variables."""
    names = list(variables if names is None else names)
    shown = [f"{name} [{'x'.join(str(n) for n in variables[name].shape)} "
             f"{'sparse' if sp.issparse(variables[name]) else variables[name].dtype}]" for name in names[:_LISTED]]
    more = f" and {len(names) - _LISTED} more" if len(names) > _LISTED else ""
    return ", ".join(shown) + more if shown else "none"


def _choose_adjacency(path, variables, given):
    if given is not None:
        _require_variable(path, variables, given, "--mat-adjacency")
        return given
    square = [name for name, value in variables.items()
              if len(value.shape) == 2 and value.shape[0] == value.shape[1] > 1]
    pool = [name for name in square if sp.issparse(variables[name])] or square
    if len(pool) == 1:
        return pool[0]
    named = [name for name in pool if name.lower() in _ADJACENCY_NAMES]
    if len(named) == 1:
        return named[0]
    found = f"square matrices: {describe(variables, pool)}" if pool else f"no square matrix among {describe(variables)}"
    raise InputError(path, f"cannot tell which variable is the adjacency ({found}); "
                     "choose one with --mat-adjacency NAME", "--mat-adjacency", None)


def _require_variable(path, variables, name, flag):
    if name not in variables:
        raise InputError(path, f"no numeric variable of that name (variables: {describe(variables)})", flag, name)


def _node_rows(value, num_nodes):
    """``value`` with one row per node ([1, N] row vectors turned into columns), or None."""
    shape = value.shape
    if len(shape) == 1:
        return value.reshape(-1, 1) if shape[0] == num_nodes else None
    if shape[0] == num_nodes:
        return value
    return value.T if shape[0] == 1 and shape[1] == num_nodes else None


def _choose_role(path, variables, node_variables, num_nodes, given, names, flag, role):
    if given is not None:
        _require_variable(path, variables, given, flag)
        if given not in node_variables:
            shape = "x".join(str(n) for n in variables[given].shape)
            raise InputError(path, f"is [{shape}] but the adjacency has {num_nodes} nodes (one row per node "
                             "expected)", flag, given)
        return given
    named = [name for name in node_variables if name.lower() in names]
    if len(named) > 1:
        raise InputError(path, f"several {role} variables ({describe(variables, named)}); choose one with "
                         f"{flag} NAME", flag, None)
    return named[0] if named else None


def _choose_table(path, variables, node_variables, num_nodes, given, taken, label_column):
    if given is not None:
        return _choose_role(path, variables, node_variables, num_nodes, given, (), "--mat-attributes",
                            "attribute table")
    # A table of codes is dense; a sparse matrix with a row per node is a second graph or features.
    tables = [name for name, value in node_variables.items()
              if name not in taken and not sp.issparse(value) and value.shape[1] >= 2]
    if label_column is not None:
        if len(tables) == 1:
            return tables[0]
        found = f"tables: {describe(variables, tables)}" if tables else f"variables: {describe(variables)}"
        raise InputError(path, f"--label-column needs one attribute table with a row per node ({found}); "
                         "choose it with --mat-attributes NAME", "--mat-attributes", None)
    if taken[0] is None and tables:  # no labels anywhere else: say where they could come from
        choice = (f"with --label-column I (0-based, 0..{node_variables[tables[0]].shape[1] - 1})"
                  if len(tables) == 1 else "with --mat-attributes NAME --label-column I (0-based)")
        raise InputError(path, f"no label variable; take the labels from a column of {describe(variables, tables)} "
                         + choice, "--label-column", None)
    return None


def _column_index(path, label_column, table_name, width):
    try:
        column = int(label_column)
    except (TypeError, ValueError):
        column = -1
    if not 0 <= column < width:
        raise InputError(path, f"must be a 0-based column index of '{table_name}' (0..{width - 1})",
                         "--label-column", label_column)
    return column


def _whole_numbers(path, name, value):
    value = value.toarray() if sp.issparse(value) else np.asarray(value)
    if value.dtype.kind == "f":
        whole = np.isfinite(value) & (value == np.round(value))
        if not whole.all():
            raise InputError(path, "must hold whole-number codes", name, float(value[~whole][0]))
    return value.astype(np.int64)


def _codes_to_classes(codes, missing=None):
    """Class per entry (codes numbered 0..C-1 in ascending order; ``missing`` -> -1) and the codes."""
    labels = np.full(codes.shape[0], -1, dtype=np.int64)
    present = np.ones(codes.shape[0], dtype=bool) if missing is None else codes != missing
    classes, inverse = np.unique(codes[present], return_inverse=True)
    labels[present] = inverse.reshape(-1)
    return labels, classes


def _labels_variable(path, name, value):
    if sp.issparse(value) or value.shape[1] > 1:
        return labels_from_onehot(value), {}
    labels, classes = _codes_to_classes(_whole_numbers(path, name, value).reshape(-1))
    return labels, {"class_names": [str(code) for code in classes]}


def _one_hot_columns(table, columns):
    """[N, sum of codes per column] 0/1 csr float32: one column per nonzero code of each column."""
    blocks = []
    for column in columns:
        classes, codes = _codes_to_classes(table[:, column], missing=0)
        rows = np.flatnonzero(classes >= 0)
        blocks.append(sp.csr_matrix((np.ones(rows.shape[0], np.float32), (rows, classes[rows])),
                                    shape=(table.shape[0], codes.shape[0])))
    return sp.hstack(blocks, format="csr", dtype=np.float32) if blocks else None


def _features_variable(value):
    if sp.issparse(value):
        return sp.csr_matrix(value, dtype=np.float32)
    return np.asarray(value, dtype=np.float32)


def read_mat(path, adjacency_var=None, attributes_var=None, labels_var=None, features_var=None,
             label_column=None, table_features=True, name=None) -> Graph:
    """Local. Read a MATLAB ``.mat`` graph (roles of the variables: see module docstring).

    Parameters
    ----------
    path : str or os.PathLike
        The ``.mat`` file (v4 to v7.3).
    adjacency_var, attributes_var, labels_var, features_var : str, optional
        Variable of each role (``--mat-adjacency`` ... ``--mat-features``); found by shape and
        name when None.
    label_column : int or str, optional
        0-based column of the attribute table holding the labels (``--label-column``).
    table_features : bool
        One-hot features from the attribute table's other columns (``--no-table-features``
        turns them off).
    name : str, optional
        Graph name; default is the file name without ``.mat``.

    Returns
    -------
    Graph
        Validated graph with ``label`` (int64, -1 = unlabelled) and ``feat`` (float32; sparse
        when one-hot columns are in it) when the file has them; no split masks. ``notes`` holds
        ``class_names`` (the code behind each label value) and the variables used.

    Raises
    ------
    InputError
        For an unreadable file, or a role that cannot be told apart: the message lists the
        variables found and names the flag that chooses one.
    """
    path = os.fspath(path)
    variables = load_mat_variables(path)
    adjacency_name = _choose_adjacency(path, variables, adjacency_var)
    num_nodes, src, dst, edata = edges_from_adjacency(path, variables[adjacency_name], adjacency_name)
    node_variables = {key: rows for key, value in variables.items() if key != adjacency_name
                      and (rows := _node_rows(value, num_nodes)) is not None}
    labels_name = _choose_role(path, variables, node_variables, num_nodes, labels_var, LABEL_NAMES,
                               "--mat-labels", "label")
    features_name = _choose_role(path, variables, node_variables, num_nodes, features_var, FEATURE_NAMES,
                                 "--mat-features", "feature")
    table_name = _choose_table(path, variables, node_variables, num_nodes, attributes_var,
                               (labels_name, features_name), label_column)
    notes = {"adjacency": adjacency_name}
    ndata, features = {}, []
    if features_name is not None:
        features.append(_features_variable(node_variables[features_name]))
        notes["features"] = features_name
    if labels_name is not None and label_column is None:
        ndata["label"], class_notes = _labels_variable(path, labels_name, node_variables[labels_name])
        notes.update(class_notes, labels=labels_name)
    if table_name is not None:
        table = _whole_numbers(path, table_name, node_variables[table_name])
        feature_columns = list(range(table.shape[1]))
        if label_column is not None:
            column = _column_index(path, label_column, table_name, table.shape[1])
            ndata["label"], classes = _codes_to_classes(table[:, column], missing=0)
            notes.update(class_names=[str(code) for code in classes], labels=f"{table_name}[:, {column}]")
            feature_columns.remove(column)
        if table_features and feature_columns:
            features.append(_one_hot_columns(table, feature_columns))
            notes["one_hot_features"] = f"{table_name}[:, {feature_columns}]"
    if features:
        ndata["feat"] = (sp.hstack([sp.csr_matrix(f) for f in features], format="csr", dtype=np.float32)
                         if len(features) > 1 else features[0])
    graph = Graph(num_nodes, src, dst, ndata, edata, name=name or os.path.splitext(os.path.basename(path))[0],
                  source=path, notes=notes)
    return graph.validate()
