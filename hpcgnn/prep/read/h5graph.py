"""The compact binary graph file (``.h5``): chunked HDF5 that any number of ranks read by rows.

Layout (root attributes ``hpcgnn_format = "graph"``, ``version = 1``, ``num_nodes``,
``num_edges``, ``name``)::

    src, dst          [E]      int32 below 2**31 nodes, else int64 (the part files' rule)
    nodes/<field>     [N, ...] feat, label, train_mask, val_mask, test_mask, any node field
    edges/<field>     [E, ...] edge fields (weight, ...)

Datasets are chunked by about 4 MiB (optionally gzip-compressed with byte shuffling), so a
rank reading rows ``[lo, hi)`` touches only the chunks that hold them: the format a graph too
large for one process is read from by ``hpcgnn partition --method multilevel`` (each rank its
slice), written by ``hpcgnn convert`` and by ``hpcgnn generate`` (in parallel under mpirun).
Half the bytes of the generic ``.npz`` for the ids of graphs below two billion nodes.
"""
from __future__ import annotations

import os

import h5py
import numpy as np

from hpcgnn.format.ondisk import id_dtype
from hpcgnn.prep.graph import Graph
from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.files import atomic_path

_FORMAT_TAG = "graph"
_VERSION = 1
CHUNK_BYTES = 4 << 20
_NODE_GROUP, _EDGE_GROUP = "nodes", "edges"


def is_h5graph(path) -> bool:
    """Local. Whether ``path`` is an HDF5 file tagged as a hpcgnn graph."""
    try:
        if not h5py.is_hdf5(os.fspath(path)):
            return False
        with h5py.File(path, "r") as h5:
            return _text(h5.attrs.get("hpcgnn_format")) == _FORMAT_TAG
    except OSError:
        return False


def _text(value):
    return value.decode() if isinstance(value, bytes) else value


def _chunks(shape, dtype):
    row_bytes = max(1, np.dtype(dtype).itemsize * int(np.prod(shape[1:], dtype=np.int64)))
    most = max(1, CHUNK_BYTES // row_bytes)
    # equal chunks: HDF5 allocates the last, partial chunk whole
    rows = -(-int(shape[0]) // -(-int(shape[0]) // most)) if shape[0] else 0
    return (rows, *shape[1:]) if shape[0] else None


def create_h5graph(path, num_nodes, num_edges, node_specs, edge_specs, name="graph", compress=False):
    """Local. Create an empty graph file: every dataset sized and chunked, no rows written yet.

    ``node_specs`` / ``edge_specs`` map a field to ``(dtype, row shape)``. Returns the id dtype
    the writer must store ``src``/``dst`` as.
    """
    ids = np.dtype(id_dtype(num_nodes))
    options = {"compression": "gzip", "compression_opts": 1, "shuffle": True} if compress else {}
    with h5py.File(path, "w") as h5:
        h5.attrs.update({"hpcgnn_format": _FORMAT_TAG, "version": _VERSION, "num_nodes": int(num_nodes),
                         "num_edges": int(num_edges), "name": str(name)})
        for key in ("src", "dst"):
            h5.create_dataset(key, shape=(num_edges,), dtype=ids, chunks=_chunks((num_edges,), ids), **options)
        for group, count, specs in ((_NODE_GROUP, num_nodes, node_specs), (_EDGE_GROUP, num_edges, edge_specs)):
            grp = h5.create_group(group)
            grp.attrs["order"] = list(specs)  # HDF5 lists members by name; keep the input's order
            for field, (dtype, row_shape) in specs.items():
                shape = (count, *row_shape)
                grp.create_dataset(field, shape=shape, dtype=dtype, chunks=_chunks(shape, dtype),
                                   **(options if count else {}))
    return ids


def write_rows(path, edge_first, edges: dict, node_first, nodes: dict):
    """Local. Write rows into a file made by :func:`create_h5graph`: ``edges`` (``src``,
    ``dst`` and ``edge_<field>`` arrays) from row ``edge_first``, node fields from ``node_first``."""
    with h5py.File(path, "r+") as h5:
        for key, rows in edges.items():
            target = h5[key] if key in ("src", "dst") else h5[_EDGE_GROUP][key[len("edge_"):]]
            target[edge_first:edge_first + rows.shape[0]] = rows
        for key, rows in nodes.items():
            h5[_NODE_GROUP][key][node_first:node_first + rows.shape[0]] = rows


def write_h5graph(graph: Graph, path, compress=False) -> None:
    """Local. Write ``graph`` as a graph file, atomically (temp file, then rename)."""
    node_rows = {k: np.asarray(v.toarray() if hasattr(v, "toarray") else v) for k, v in graph.ndata.items()}
    with atomic_path(path, suffix=".h5") as tmp:
        ids = create_h5graph(tmp, graph.num_nodes, graph.num_edges,
                             {k: (v.dtype, v.shape[1:]) for k, v in node_rows.items()},
                             {k: (v.dtype, v.shape[1:]) for k, v in graph.edata.items()},
                             name=graph.name, compress=compress)
        edges = {"src": graph.src.astype(ids, copy=False), "dst": graph.dst.astype(ids, copy=False)}
        edges.update({"edge_" + k: v for k, v in graph.edata.items()})
        write_rows(tmp, 0, edges, 0, node_rows)


class H5GraphArrays:
    """Local. The arrays of a graph file read by rows, under the generic ``.npz`` keys (``src``,
    ``dst``, ``num_nodes``, ``edge_<field>``, node fields by name), so one parallel reader
    serves both formats. Use as a context manager, or call :meth:`close`."""

    def __init__(self, path):
        self.path = os.fspath(path)
        if not os.path.exists(self.path):
            raise InputError(self.path, "file not found")
        if not h5py.is_hdf5(self.path):
            raise InputError(self.path, "not an HDF5 file: empty, truncated or another kind of file",
                             "format", "h5graph")
        try:
            self.h5 = h5py.File(self.path, "r")
        except OSError as exc:
            raise InputError(self.path, f"not a readable HDF5 file ({exc})", "format", "h5graph") from None
        attrs = self.h5.attrs
        if _text(attrs.get("hpcgnn_format")) != _FORMAT_TAG:
            self.close()
            raise InputError(self.path, "is not a hpcgnn graph file (write one with hpcgnn convert)",
                             "hpcgnn_format", _text(attrs.get("hpcgnn_format")))
        version = attrs.get("version")
        version = int(version) if np.ndim(version) == 0 and isinstance(version, (int, np.integer)) else version
        if not isinstance(version, int) or not 1 <= version <= _VERSION:
            self.close()
            raise InputError(self.path, f"is a graph file version this hpcgnn cannot read (it reads 1 to {_VERSION})",
                             "version", version)
        self.members = {}
        for key in ("src", "dst"):
            if key in self.h5:
                self.members[key] = self.h5[key]
        for group, prefix in ((_NODE_GROUP, ""), (_EDGE_GROUP, "edge_")):
            members = self.h5.get(group, {})
            order = [_text(f) for f in getattr(members, "attrs", {}).get("order", [])]
            for field in [f for f in order if f in members] + sorted(set(members) - set(order)):
                self.members[prefix + field] = members[field]
        self.num_nodes = attrs.get("num_nodes")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Local. Close the file."""
        if getattr(self, "h5", None) is not None:
            self.h5.close()
            self.h5 = None

    def keys(self):
        return list(self.members) + (["num_nodes"] if self.num_nodes is not None else [])

    def __contains__(self, key):
        return key in self.members or (key == "num_nodes" and self.num_nodes is not None)

    def shape(self, key) -> tuple:
        return () if key == "num_nodes" else tuple(self.members[key].shape)

    def dtype(self, key) -> np.dtype:
        return np.asarray(self.num_nodes).dtype if key == "num_nodes" else self.members[key].dtype

    def rows(self, key, start, stop) -> np.ndarray:
        """Local. Rows ``[start, stop)`` of array ``key`` (``num_nodes``: the scalar)."""
        if key == "num_nodes":
            return np.asarray(self.num_nodes).reshape(())
        dataset = self.members[key]
        start, stop = max(0, start), max(start, stop)
        out = np.empty((stop - start, *dataset.shape[1:]), dtype=dataset.dtype)
        if stop > start:
            dataset.read_direct(out, np.s_[start:stop])
        return out


def read_h5graph(path, name=None) -> Graph:
    """Local. Read a whole graph file (see module docstring) and validate it."""
    with H5GraphArrays(path) as arrays:
        for key in ("src", "dst"):
            if key not in arrays:
                raise InputError(arrays.path, "missing required array", key)
        src = arrays.rows("src", 0, arrays.shape("src")[0]).astype(np.int64)
        dst = arrays.rows("dst", 0, arrays.shape("dst")[0]).astype(np.int64)
        if "num_nodes" not in arrays:
            raise InputError(arrays.path, "missing the number of nodes", "num_nodes")
        num_nodes = int(arrays.rows("num_nodes", 0, 1))
        ndata, edata = {}, {}
        for key in arrays.members:
            if key in ("src", "dst"):
                continue
            rows = arrays.rows(key, 0, arrays.shape(key)[0])
            if key.startswith("edge_"):
                edata[key[len("edge_"):]] = rows
            else:
                ndata[key] = rows
        graph_name = name or _text(arrays.h5.attrs.get("name")) or os.path.splitext(os.path.basename(arrays.path))[0]
    return Graph(num_nodes, src, dst, ndata, edata, name=graph_name, source=os.fspath(path)).validate()
