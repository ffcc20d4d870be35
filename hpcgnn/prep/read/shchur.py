"""Shchur / GraphData ``.npz`` files (Amazon, Coauthor, CitationFull, ...), two layouts.

(a) Sparse parts as plain arrays: ``adj_data``/``adj_indices``/``adj_indptr``/``adj_shape``
    (CSR adjacency), ``attr_*`` likewise or a dense ``attr_matrix``, and ``labels`` (class per
    node) or ``label_*`` (sparse one-hot). Loaded without pickle support.
(b) GraphData's pickled layout: ``adj_matrix`` and ``node_attr`` are 0-d object arrays holding
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


def _matrix(archive, prefix, dense_key):
    """A matrix stored as ``<prefix>_data/_indices/_indptr/_shape`` or whole under ``dense_key``."""
    path = archive.path
    parts = [f"{prefix}_{part}" for part in _CSR_PARTS]
    present = [key for key in parts if key in archive.keys]
    if present:
        missing = [key for key in parts if key not in archive.keys]
        if missing:
            raise InputError(path, "missing required array", missing[0], f"found {present}")
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
            raise InputError(path, "inconsistent CSR arrays", f"{prefix}_indptr", str(exc)) from None
        return matrix
    if dense_key not in archive.keys:
        return None
    value = archive[dense_key]
    if sp.issparse(value):
        return value.tocsr()
    if isinstance(value, np.ndarray) and value.ndim == 2 and value.dtype.kind in "biuf":
        return sp.csr_matrix(value)
    raise InputError(path, "expected a 2-D numeric or scipy.sparse matrix", dense_key,
                     getattr(value, "shape", type(value).__name__))


def _labels(archive):
    path = archive.path
    for key in ("labels", "node_label"):
        if key in archive.keys:
            value = archive[key]
            break
    else:
        value = _matrix(archive, "label", "label_matrix")
        if value is None:
            return None
        key = "label_indptr"
    if sp.issparse(value) or (isinstance(value, np.ndarray) and value.ndim == 2):
        onehot = sp.csr_matrix(value)
        onehot.eliminate_zeros()
        per_node = np.diff(onehot.indptr)
        if per_node.max(initial=0) > 1:  # multi-label: keep the 0/1 matrix
            return (onehot.toarray() != 0).astype(np.int64)
        labels = np.full(onehot.shape[0], -1, dtype=np.int64)
        labels[per_node == 1] = onehot.indices
        return labels
    value = np.asarray(value)
    if value.ndim != 1 or value.dtype.kind not in "iuf":
        raise InputError(path, "labels must be a 1-D numeric array", key, f"{value.dtype}{list(value.shape)}")
    if value.dtype.kind == "f":
        if not np.isfinite(value).all() or (value != np.round(value)).any():
            bad = value[~np.isfinite(value) | (value != np.round(value))][0]
            raise InputError(path, "labels must be whole numbers", key, float(bad))
    return value.astype(np.int64)


def read_shchur(path, name=None) -> Graph:
    """Local. Read a Shchur / GraphData ``.npz`` graph (either layout, see module docstring).

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
        multi-label files give an [N, C] 0/1 matrix). No split masks.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise InputError(path, "file not found")
    archive = _Archive(path)
    try:
        adjacency = _matrix(archive, "adj", "adj_matrix")
        if adjacency is None:
            raise InputError(path, "missing required array (adj_data/adj_indices/adj_indptr/adj_shape "
                             "or adj_matrix)", "adj_matrix", sorted(archive.keys))
        features = _matrix(archive, "attr", "attr_matrix")
        if features is None:
            features = _matrix(archive, "node_attr", "node_attr")
        labels = _labels(archive)
    finally:
        archive.close()
    if adjacency.shape[0] != adjacency.shape[1]:
        raise InputError(path, "adjacency matrix must be square", "adj_shape", adjacency.shape)
    adjacency = adjacency.tocsr()
    adjacency.sum_duplicates()
    adjacency.eliminate_zeros()
    num_nodes = int(adjacency.shape[0])
    src = np.repeat(np.arange(num_nodes, dtype=np.int64), np.diff(adjacency.indptr))
    dst = adjacency.indices.astype(np.int64)
    edata = {}
    if not np.all(adjacency.data == 1):
        edata["weight"] = adjacency.data.astype(np.float32)
    ndata = {}
    if features is not None:
        ndata["feat"] = features.astype(np.float32)
    if labels is not None:
        ndata["label"] = labels
    graph = Graph(num_nodes, src, dst, ndata, edata,
                  name=name or os.path.splitext(os.path.basename(path))[0], source=path)
    return graph.validate()
