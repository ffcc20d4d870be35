"""The generic ``.npz`` graph format: the project's interchange file.

Keys: ``src``, ``dst`` (integer arrays), optional ``num_nodes`` (scalar), node fields
(``feat`` [N, F], ``label`` [N], boolean ``train_mask`` / ``val_mask`` / ``test_mask``, any
other array with N rows), and edge fields prefixed ``edge_`` (``edge_weight`` [E], ...).
Arrays are loaded without pickle support, so an untrusted file cannot run code.
"""
from __future__ import annotations

import os
import zipfile

import numpy as np

from hpcgnn.prep.graph import Graph
from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.files import atomic_path

# Scalars written by generators as metadata; they are not node fields.
_SCALAR_KEYS = ("num_nodes",)


def read_npz(path, name=None) -> Graph:
    """Local. Read a generic graph ``.npz`` (see module docstring) and validate it."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise InputError(path, "file not found")
    # np.load would take a non-zip file for a pickle and blame pickling; say what it is not.
    if not zipfile.is_zipfile(path):
        raise InputError(path, "not a .npz (zip) archive: empty, truncated or another kind of file", "format", "npz")
    try:
        archive = np.load(path, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise InputError(path, f"not a readable .npz file ({exc})", "format", "npz") from None
    with archive:
        keys = set(archive.files)
        for required in ("src", "dst"):
            if required not in keys:
                raise InputError(path, "missing required array", required)
        try:
            arrays = {k: archive[k] for k in archive.files}
        except ValueError as exc:
            raise InputError(path, f"holds pickled objects, which generic npz does not allow ({exc})") from None
    src, dst = arrays.pop("src"), arrays.pop("dst")
    for key, ids in (("src", src), ("dst", dst)):
        if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
            raise InputError(path, "must be a 1-D integer array", key, f"{ids.dtype}{list(ids.shape)}")
    src = src.astype(np.int64, copy=False)
    dst = dst.astype(np.int64, copy=False)
    if "num_nodes" in arrays:
        raw = arrays.pop("num_nodes")
        if raw.ndim != 0 or not np.issubdtype(raw.dtype, np.integer):
            raise InputError(path, "must be an integer scalar", "num_nodes", raw)
        num_nodes = int(raw)
    else:
        num_nodes = int(max(src.max(initial=-1), dst.max(initial=-1)) + 1)
    ndata, edata = {}, {}
    for key, arr in arrays.items():
        if key.startswith("edge_"):
            edata[key[len("edge_"):]] = arr
        elif arr.ndim == 0:
            continue  # metadata scalars (seed, homophily, ...) are not fields
        else:
            ndata[key] = arr
    graph = Graph(num_nodes, src, dst, ndata, edata,
                  name=name or os.path.splitext(os.path.basename(path))[0], source=path)
    return graph.validate()


def write_npz(graph: Graph, path, compress=False) -> None:
    """Local. Write ``graph`` as a generic ``.npz``, atomically (temp file, then rename)."""
    arrays = {"src": graph.src, "dst": graph.dst, "num_nodes": np.int64(graph.num_nodes)}
    for key, arr in graph.ndata.items():
        arrays[key] = arr.toarray() if hasattr(arr, "toarray") else arr
    for key, arr in graph.edata.items():
        arrays["edge_" + key] = arr
    save = np.savez_compressed if compress else np.savez
    with atomic_path(path, suffix=".npz") as tmp:
        with open(tmp, "wb") as fh:
            save(fh, **arrays)
