"""Raw Planetoid files (Yang et al. 2016): ``ind.<name>.{x,y,tx,ty,allx,ally,graph,test.index}``.

The first seven are Python-2 pickles of scipy.sparse feature matrices, one-hot label arrays and
a ``{node: [neighbours]}`` dict; ``test.index`` is text, one node id per line, in the row order
of ``tx``/``ty``. Node ``i < len(allx)`` takes row ``i`` of ``allx``/``ally``; test node
``test.index[j]`` takes row ``j`` of ``tx``/``ty``; ids in neither (CiteSeer has some) get zero
features and label -1. Public split: train = the first ``len(y)`` nodes, validation = the next
500, test = the ``test.index`` ids.

Pickles are loaded by ``safe_pickle_load``, which resolves only numpy arrays, scipy.sparse
matrices and plain containers, so a tampered file cannot call arbitrary functions.
"""
from __future__ import annotations

import codecs
import collections
import copyreg
import itertools
import os
import pickle

import numpy as np
import scipy.sparse as sp

from hpcgnn.prep.graph import Graph, check_memory, check_sparse_ids
from hpcgnn.runtime.errors import InputError

_PICKLED_PARTS = ("x", "y", "tx", "ty", "allx", "ally", "graph")
PARTS = _PICKLED_PARTS + ("test.index",)
_PUBLIC_VAL_SIZE = 500

try:  # numpy >= 2 moved the pickling helpers; old pickles still name numpy.core
    from numpy._core import multiarray as _multiarray
    from numpy._core import numeric as _numeric
except ImportError:  # pragma: no cover - numpy 1.x
    from numpy.core import multiarray as _multiarray
    from numpy.core import numeric as _numeric

_NUMPY_GLOBALS = {"_reconstruct": _multiarray._reconstruct, "scalar": _multiarray.scalar,
                  "_frombuffer": getattr(_numeric, "_frombuffer", None)}
_BUILTINS = {cls.__name__: cls for cls in (list, dict, set, frozenset, tuple, object, int, float,
                                           complex, str, bytes, bytearray)}
_ALLOWED_GLOBALS = {
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("collections", "defaultdict"): collections.defaultdict,
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("copy_reg", "_reconstructor"): copyreg._reconstructor,
    ("copyreg", "_reconstructor"): copyreg._reconstructor,
    ("_codecs", "encode"): codecs.encode,  # how protocol 2 spells bytes objects
}
for _module in ("numpy.core.multiarray", "numpy._core.multiarray", "numpy.core.numeric", "numpy._core.numeric"):
    for _name, _obj in _NUMPY_GLOBALS.items():
        if _obj is not None:
            _ALLOWED_GLOBALS[(_module, _name)] = _obj
for _module in ("builtins", "__builtin__"):
    for _name, _obj in _BUILTINS.items():
        _ALLOWED_GLOBALS[(_module, _name)] = _obj
_ALLOWED_GLOBALS[("__builtin__", "unicode")] = str


class _RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        """Local. Resolve ``module.name`` only if it is on the allow-list; refuse anything else."""
        if (module, name) in _ALLOWED_GLOBALS:
            return _ALLOWED_GLOBALS[(module, name)]
        # Old files name private modules (scipy.sparse.csr); the public namespace outlives them.
        if module.startswith("scipy.sparse") and name.endswith(("_matrix", "_array")):
            cls = getattr(sp, name, None)
            if isinstance(cls, type):
                return cls
        raise pickle.UnpicklingError(f"refusing to load global {module}.{name}")


def safe_pickle_load(fh, path, field):
    """Local. Unpickle numpy / scipy.sparse / container data (Python-2 pickles too) from ``fh``.

    Parameters
    ----------
    fh : binary file object
        Positioned at the start of a pickle stream.
    path : str
        File name for error messages.
    field : str
        What the pickle holds, for error messages.

    Returns
    -------
    object
        The unpickled object; strings from Python 2 are decoded as latin-1.

    Raises
    ------
    InputError
        If the stream is corrupt or references anything outside the allowed types.
    """
    try:
        return _RestrictedUnpickler(fh, encoding="latin1").load()
    except Exception as exc:  # a corrupt stream can fail in any unpickling step
        raise InputError(path, "not a readable pickle", field, f"{type(exc).__name__}: {exc}") from None


def locate_planetoid(directory_or_prefix, name=None):
    """Local. Resolve a directory or prefix (``dir/ind.cora``, ``dir/cora``) to (directory, name).

    Parameters
    ----------
    directory_or_prefix : str or os.PathLike
        A directory holding one dataset's files, a file prefix, or one of the files.
    name : str, optional
        Dataset name; needed when a directory holds several datasets.

    Returns
    -------
    (str, str)
        The directory and the dataset name.
    """
    path = os.fspath(directory_or_prefix)
    if os.path.isdir(path):
        if name is None:
            names = sorted(entry[4:-6] for entry in os.listdir(path)
                           if entry.startswith("ind.") and entry.endswith(".graph"))
            if not names:
                raise InputError(path, "no Planetoid files (ind.<name>.graph) in directory", "name", "<none>")
            if len(names) > 1:
                raise InputError(path, "several Planetoid datasets here; pass a name", "name", names)
            name = names[0]
        return path, name
    directory, base = os.path.split(path)
    if name is None:
        base = base[len("ind."):] if base.startswith("ind.") else base
        for part in PARTS:
            if base.endswith("." + part):
                base = base[: -len(part) - 1]
                break
        name = base
    return directory or ".", name


def _as_matrix(value, path, field, sparse):
    if sp.issparse(value):
        matrix = value.tocsr()
    elif isinstance(value, np.ndarray) and value.ndim == 2 and value.dtype.kind in "biuf":
        matrix = sp.csr_matrix(value)
    else:
        raise InputError(path, "expected a 2-D numeric matrix", field,
                         getattr(value, "shape", type(value).__name__))
    return matrix.astype(np.float32) if sparse else matrix.toarray()


def _labels_from_onehot(onehot):
    # A row without any positive entry is an unlabelled node.
    labels = onehot.argmax(axis=1).astype(np.int64)
    labels[~(onehot != 0).any(axis=1)] = -1
    return labels


def _read_test_index(path):
    try:
        with open(path, encoding="latin-1") as fh:
            lines = fh.read().splitlines()
    except OSError as exc:
        raise InputError(path, f"cannot read file ({exc.strerror})", "test.index") from None
    ids = []
    for number, line in enumerate(lines, start=1):  # ~1000 lines: a plain loop is fine
        token = line.strip()
        if not token:
            continue
        try:
            ids.append(int(token))
        except ValueError:
            raise InputError(path, f"not an integer node id on line {number}", "test.index", token) from None
    return np.asarray(ids, dtype=np.int64)


def _edges_from_dict(adjacency, path):
    if not isinstance(adjacency, dict):
        raise InputError(path, "expected a dict {node: [neighbours]}", "graph", type(adjacency).__name__)
    keys = np.asarray(list(adjacency.keys()))
    try:
        counts = np.fromiter((len(v) for v in adjacency.values()), np.int64, len(adjacency))
        neighbours = np.asarray(list(itertools.chain.from_iterable(adjacency.values())))
    except TypeError as exc:
        raise InputError(path, "neighbour lists must be lists of node ids", "graph", str(exc)) from None
    for what, ids in (("node", keys), ("neighbour", neighbours)):
        if ids.size and ids.dtype.kind not in "iu":
            raise InputError(path, f"{what} ids must be integers", "graph", ids.dtype)
    src = np.repeat(keys.astype(np.int64), counts)
    return src, neighbours.astype(np.int64).reshape(-1)


def read_planetoid(directory_or_prefix, name=None) -> Graph:
    """Local. Read raw Planetoid files into a graph with features, labels and the public split.

    Parameters
    ----------
    directory_or_prefix : str or os.PathLike
        Directory holding ``ind.<name>.*`` files, or a prefix such as ``data/ind.cora``.
    name : str, optional
        Dataset name (``cora``, ``citeseer``, ``pubmed``); inferred when unambiguous.

    Returns
    -------
    Graph
        Validated graph: ``feat`` (csr_matrix float32), ``label`` (int64, -1 = unlabelled),
        ``train_mask`` / ``val_mask`` / ``test_mask``; the edges of the adjacency dict exactly
        as listed (both directions, duplicates and self loops kept). The validation set is the
        500 nodes after the training nodes, cut short if ``allx`` has fewer rows.
    """
    directory, name = locate_planetoid(directory_or_prefix, name)
    files = {part: os.path.join(directory, f"ind.{name}.{part}") for part in PARTS}
    for part, path in files.items():
        if not os.path.isfile(path):
            raise InputError(path, "missing Planetoid file", part, f"ind.{name}.{part}")
    loaded = {}
    for part in _PICKLED_PARTS:
        with open(files[part], "rb") as fh:
            loaded[part] = safe_pickle_load(fh, files[part], part)
    test_index = _read_test_index(files["test.index"])
    allx = _as_matrix(loaded["allx"], files["allx"], "allx", sparse=True)
    tx = _as_matrix(loaded["tx"], files["tx"], "tx", sparse=True)
    ally = _as_matrix(loaded["ally"], files["ally"], "ally", sparse=False)
    ty = _as_matrix(loaded["ty"], files["ty"], "ty", sparse=False)
    num_train = _as_matrix(loaded["y"], files["y"], "y", sparse=False).shape[0]
    num_known = allx.shape[0]
    for part, rows, expected, against in (("ally", ally.shape[0], num_known, "allx"),
                                          ("ty", ty.shape[0], tx.shape[0], "tx"),
                                          ("test.index", test_index.shape[0], tx.shape[0], "tx"),
                                          ("tx", tx.shape[1], allx.shape[1], "allx columns"),
                                          ("ty", ty.shape[1], ally.shape[1], "ally columns")):
        if rows != expected:
            raise InputError(files[part], f"size differs from {against} ({expected})", part, rows)
    if num_train > num_known:
        raise InputError(files["y"], f"more training rows than allx has ({num_known})", "y", num_train)
    if test_index.size:
        if test_index.min() < num_known:
            raise InputError(files["test.index"], f"test id inside the allx rows [0, {num_known})",
                             "test.index", int(test_index.min()))
        unique, counts = np.unique(test_index, return_counts=True)
        if (counts > 1).any():
            raise InputError(files["test.index"], "duplicate test node id", "test.index",
                             int(unique[counts > 1][0]))
    num_nodes = int(max(num_known, test_index.max(initial=-1) + 1))
    src, dst = _edges_from_dict(loaded["graph"], files["graph"])
    # Every array below has num_nodes rows: refuse a huge test id before allocating them.
    if num_nodes > num_known:
        check_sparse_ids(files["test.index"], num_nodes, num_known + test_index.shape[0] + 2 * src.shape[0],
                         "test.index", num_nodes - 1)
        check_memory(files["test.index"], num_nodes, src.shape[0], "test.index", num_nodes - 1)

    # One extra all-zero row stands in for ids that have neither an allx nor a tx row.
    stacked = sp.vstack([allx, tx, sp.csr_matrix((1, allx.shape[1]), dtype=np.float32)], format="csr")
    source_row = np.full(num_nodes, num_known + tx.shape[0], dtype=np.int64)
    source_row[:num_known] = np.arange(num_known)
    source_row[test_index] = num_known + np.arange(tx.shape[0])
    features = stacked[source_row].tocsr().astype(np.float32)
    labels = np.full(num_nodes, -1, dtype=np.int64)
    labels[:num_known] = _labels_from_onehot(ally)
    labels[test_index] = _labels_from_onehot(ty)

    for field, ids in (("src", src), ("dst", dst)):
        if ids.size and (ids.min() < 0 or ids.max() >= num_nodes):
            bad = int(ids.min()) if ids.min() < 0 else int(ids.max())
            raise InputError(files["graph"], f"{field} node id out of range [0, {num_nodes})", "graph", bad)
    masks = {key: np.zeros(num_nodes, dtype=bool) for key in ("train_mask", "val_mask", "test_mask")}
    masks["train_mask"][:num_train] = True
    masks["val_mask"][num_train:min(num_train + _PUBLIC_VAL_SIZE, num_known)] = True
    masks["test_mask"][test_index] = True
    ndata = {"feat": features, "label": labels, **masks}
    graph = Graph(num_nodes, src, dst, ndata, {}, name=name, source=os.path.join(directory, f"ind.{name}"))
    return graph.validate()
