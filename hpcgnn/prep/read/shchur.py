"""Shchur / GraphData ``.npz`` files (Amazon, Coauthor, CitationFull, ...), three layouts.

(a) Sparse parts as plain arrays: ``adj_data``/``adj_indices``/``adj_indptr``/``adj_shape``
    (CSR adjacency), ``attr_*`` likewise or a dense ``attr_matrix``, and ``labels`` (class per
    node) or ``label_*`` (sparse one-hot). Loaded without pickle support.
(b) The same with dotted names, as the gnn-benchmark repository's ``SparseGraph`` writes them:
    ``adj_matrix.data``/``.indices``/``.indptr``/``.shape``, ``attr_matrix.*``, ``labels`` (or
    ``labels.*``, sparse one-hot), and optional ``class_names``, ``node_names``,
    ``idx_to_node``, ... Of those, ``class_names`` is kept (as ``Graph.notes``) when it is a
    plain string array; the rest describe nodes and attributes and are not read.
(c) GraphData's pickled layout: ``adj_matrix`` and ``node_attr`` are 0-d object arrays holding
    scipy.sparse matrices, ``node_label`` a plain array. Only these object arrays are unpickled,
    with the restricted unpickler of ``hpcgnn.prep.read.planetoid`` (numpy, scipy.sparse and
    containers only); other object arrays such as ``metadata`` are never touched.
"""
from __future__ import annotations

import os
import zipfile

import numpy as np
import scipy.sparse as sp

from hpcgnn.prep.graph import Graph, as_index_array
from hpcgnn.prep.read.planetoid import safe_pickle_load
from hpcgnn.runtime.errors import InputError

_CSR_PARTS = ("data", "indices", "indptr", "shape")
# Name prefixes of a matrix's CSR parts: underscore (layout a) and dotted (layout b).
ADJACENCY_PREFIXES = ("adj_", "adj_matrix.")
_ATTRIBUTE_PREFIXES = ("attr_", "attr_matrix.")
_LABEL_PREFIXES = ("label_", "labels.")


class _Archive:
    """Arrays of one .npz by name; object arrays go through the restricted unpickler."""

    def __init__(self, path):
        self.path = path
        # np.load would take a non-zip file for a pickle and blame pickling; say what it is not.
        if not zipfile.is_zipfile(path):
            raise InputError(path, "not a .npz (zip) archive: empty, truncated or another kind of file",
                             "format", "shchur")
        try:
            self._npz = np.load(path, allow_pickle=False)
        except (OSError, ValueError, zipfile.BadZipFile) as exc:
            raise InputError(path, f"not a readable .npz file ({exc})", "format", "shchur") from None
        if not hasattr(self._npz, "files"):
            raise InputError(path, "holds a single array, not a .npz archive of named arrays", "format", "shchur")
        self.keys = set(self._npz.files)

    def close(self):
        """Local. Close the archive."""
        self._npz.close()

    def __getitem__(self, key):
        try:
            return self._npz[key]
        except ValueError:  # "Object arrays cannot be loaded when allow_pickle=False"
            return self._unpickle(key)

    def plain(self, key):
        """Local. The array under ``key`` if it loads without unpickling, else None."""
        if key not in self.keys:
            return None
        try:
            return self._npz[key]
        except ValueError:
            return None

    def _unpickle(self, key):
        with zipfile.ZipFile(self.path) as archive, archive.open(key + ".npy") as fp:
            version = np.lib.format.read_magic(fp)
            if version == (1, 0):
                np.lib.format.read_array_header_1_0(fp)
            elif version == (2, 0):
                np.lib.format.read_array_header_2_0(fp)
            else:
                raise InputError(self.path, "unsupported .npy version for an object array", key, version)
            value = safe_pickle_load(fp, self.path, key)
        if isinstance(value, np.ndarray) and value.dtype == object and value.ndim == 0:
            value = value.item()
        return value


def _csr_from_parts(archive, parts):
    path = archive.path
    data, indices, indptr, shape = (archive[key] for key in parts)
    # scipy would cast float indices to int, silently truncating a corrupt 1.5 to 1.
    indices, indptr, shape = (as_index_array(path, key, values)
                              for key, values in zip(parts[1:], (indices, indptr, shape)))
    if shape.shape != (2,):
        raise InputError(path, "must hold two numbers (rows, columns)", parts[3], shape.tolist())
    try:
        matrix = sp.csr_matrix((data, indices, indptr), shape=tuple(int(n) for n in shape))
        matrix.check_format(full_check=True)
    except (ValueError, TypeError) as exc:
        raise InputError(path, "inconsistent CSR arrays", parts[2], str(exc)) from None
    return matrix


def _matrix(archive, prefixes, dense_key):
    """A matrix stored as ``<prefix>data/indices/indptr/shape`` (the first prefix present) or
    whole under ``dense_key``."""
    path = archive.path
    for prefix in prefixes:
        parts = [prefix + part for part in _CSR_PARTS]
        present = [key for key in parts if key in archive.keys]
        if present:
            missing = [key for key in parts if key not in archive.keys]
            if missing:
                raise InputError(path, "missing required array", missing[0], f"found {present}")
            return _csr_from_parts(archive, parts)
    if dense_key not in archive.keys:
        return None
    value = archive[dense_key]
    if sp.issparse(value):
        return value.tocsr()
    if isinstance(value, np.ndarray) and value.ndim == 2 and value.dtype.kind in "biuf":
        return sp.csr_matrix(value)
    raise InputError(path, "expected a 2-D numeric or scipy.sparse matrix", dense_key,
                     getattr(value, "shape", type(value).__name__))


def labels_from_onehot(onehot) -> np.ndarray:
    """Local. Class per node from a one-hot [N, C] matrix (dense or sparse).

    Returns int64 [N] with ``UNLABELLED`` (-1) for an empty row, or, when some row has several
    classes, the [N, C] 0/1 int64 matrix itself (multi-label).
    """
    onehot = sp.csr_matrix(onehot)
    onehot.eliminate_zeros()
    per_node = np.diff(onehot.indptr)
    if per_node.max(initial=0) > 1:
        return (onehot.toarray() != 0).astype(np.int64)
    labels = np.full(onehot.shape[0], -1, dtype=np.int64)
    labels[per_node == 1] = onehot.indices
    return labels


def _labels(archive):
    path = archive.path
    for key in ("labels", "node_label"):
        if key in archive.keys:
            value = archive[key]
            break
    else:
        value = _matrix(archive, _LABEL_PREFIXES, "label_matrix")
        if value is None:
            return None
        key = "label_indptr"
    if sp.issparse(value) or (isinstance(value, np.ndarray) and value.ndim == 2):
        return labels_from_onehot(value)
    value = np.asarray(value)
    if value.ndim != 1 or value.dtype.kind not in "iuf":
        raise InputError(path, "labels must be a 1-D numeric array", key, f"{value.dtype}{list(value.shape)}")
    if value.dtype.kind == "f":
        if not np.isfinite(value).all() or (value != np.round(value)).any():
            bad = value[~np.isfinite(value) | (value != np.round(value))][0]
            raise InputError(path, "labels must be whole numbers", key, float(bad))
    return value.astype(np.int64)


def _class_names(archive):
    names = archive.plain("class_names")
    if names is None or names.ndim != 1 or names.dtype.kind not in "US":
        return {}
    return {"class_names": [str(name) for name in names.astype(str)]}


def edges_from_adjacency(path, adjacency, field="adj_shape"):
    """Local. Edges of a square sparse adjacency: one per stored nonzero, row -> column.

    Parameters
    ----------
    path : str
        The input, for the message.
    adjacency : scipy.sparse matrix
        [N, N]; duplicate entries are summed and explicit zeros dropped.
    field : str
        The name of the adjacency in the input, for the message.

    Returns
    -------
    (int, numpy.ndarray, numpy.ndarray, dict)
        ``num_nodes``, int64 ``src`` and ``dst`` in row-major order, and edge fields:
        ``weight`` (float32) only if some value is not 1.
    """
    if adjacency.shape[0] != adjacency.shape[1]:
        raise InputError(path, "adjacency matrix must be square", field, adjacency.shape)
    adjacency = sp.csr_matrix(adjacency)
    adjacency.sum_duplicates()
    adjacency.eliminate_zeros()
    num_nodes = int(adjacency.shape[0])
    src = np.repeat(np.arange(num_nodes, dtype=np.int64), np.diff(adjacency.indptr))
    dst = adjacency.indices.astype(np.int64)
    edata = {}
    if not np.all(adjacency.data == 1):
        edata["weight"] = adjacency.data.astype(np.float32)
    return num_nodes, src, dst, edata


def read_shchur(path, name=None) -> Graph:
    """Local. Read a Shchur / GraphData ``.npz`` graph (any layout, see module docstring).

    The pickled layout (``adj_matrix`` / ``node_attr`` object arrays) needs unpickling; it is
    done only for those keys and only with a restricted unpickler, yet a pickle is still code
    from the file's author: read such files only from sources you trust.

    Parameters
    ----------
    path : str or os.PathLike
        The ``.npz`` file.
    name : str, optional
        Graph name; default is the file name without ``.npz``.

    Returns
    -------
    Graph
        Validated graph: one edge per stored nonzero of the adjacency (row -> column, as stored,
        so an unsymmetrised file stays directed), ``edata['weight']`` (float32) only if some
        value is not 1, ``feat`` as csr_matrix float32, ``label`` int64 (-1 = unlabelled;
        multi-label files give an [N, C] 0/1 matrix). No split masks. ``notes['class_names']``
        when the file names its classes.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise InputError(path, "file not found")
    archive = _Archive(path)
    try:
        adjacency = _matrix(archive, ADJACENCY_PREFIXES, "adj_matrix")
        if adjacency is None:
            raise InputError(path, "missing required array (adj_data/adj_indices/adj_indptr/adj_shape, "
                             "adj_matrix.data/... or adj_matrix)", "adj_matrix", sorted(archive.keys))
        features = _matrix(archive, _ATTRIBUTE_PREFIXES, "attr_matrix")
        if features is None:
            features = _matrix(archive, ("node_attr_",), "node_attr")
        labels = _labels(archive)
        notes = _class_names(archive)
    finally:
        archive.close()
    shape_key = next((prefix + "shape" for prefix in ADJACENCY_PREFIXES if prefix + "shape" in archive.keys),
                     "adj_matrix")
    num_nodes, src, dst, edata = edges_from_adjacency(path, adjacency, shape_key)
    ndata = {}
    if features is not None:
        ndata["feat"] = features.astype(np.float32)
    if labels is not None:
        ndata["label"] = labels
    graph = Graph(num_nodes, src, dst, ndata, edata,
                  name=name or os.path.splitext(os.path.basename(path))[0], source=path, notes=notes)
    return graph.validate()
