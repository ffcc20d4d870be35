"""Reading a graph in parallel: every rank reads its own slice of the input.

A generic ``.npz`` (the project's interchange format, :mod:`hpcgnn.prep.read.npz`) is read
without loading it: each array of an uncompressed archive is memory-mapped where it lies in
the zip file and rank ``r`` copies rows ``[r E / K, (r+1) E / K)`` of ``src``/``dst`` and its
block of every node field; a compressed member is streamed, keeping only the rank's rows. The
edges then move to the ranks owning their destinations (:class:`SpreadGraph`). Any other
format is read by rank 0 with the serial readers and dealt out the same way, except the
graph file (``.h5``), read by rows like the ``.npz``.
"""
from __future__ import annotations

import os
import struct
import zipfile

import numpy as np

from hpcgnn.prep.dist.blocks import block_starts, owner_of, send_to_owners
from hpcgnn.prep.dist.spread import SpreadGraph, to_destination_owners, validate
from hpcgnn.prep.graph import Graph
from hpcgnn.prep.read.h5graph import H5GraphArrays
from hpcgnn.prep.read.text import require_regular
from hpcgnn.runtime.comm import mpi
from hpcgnn.runtime.errors import InputError

_LOCAL_HEADER = struct.Struct("<4s5H3I2H")  # a zip member's local file header (30 bytes)
_STREAM_BYTES = 1 << 24


class NpzArrays:
    """Local. The arrays of a ``.npz`` read by rows, without loading whole arrays.

    ``shape(key)``, ``dtype(key)`` come from each member's .npy header; ``rows(key, start,
    stop)`` copies those rows (from a memory map of a stored member, by streaming a deflated
    one). Pickled (object) arrays are refused, as the serial reader refuses them.
    """

    def __init__(self, path):
        self.path = os.fspath(path)
        if not os.path.exists(self.path):
            raise InputError(self.path, "file not found")
        require_regular(self.path, "is read by rows, seeking in the archive")
        if not zipfile.is_zipfile(self.path):
            raise InputError(self.path, "not a .npz (zip) archive: empty, truncated or another kind of file",
                             "format", "npz")
        self.members = {}
        with zipfile.ZipFile(self.path) as archive, open(self.path, "rb") as raw:
            for info in archive.infolist():
                if not info.filename.endswith(".npy"):
                    continue
                key = info.filename[:-4]
                with archive.open(info) as member:
                    shape, fortran, dtype = self._header(member, key)
                    header_bytes = member.tell()
                offset = None
                if info.compress_type == zipfile.ZIP_STORED:
                    raw.seek(info.header_offset)
                    fields = _LOCAL_HEADER.unpack(raw.read(_LOCAL_HEADER.size))
                    offset = info.header_offset + _LOCAL_HEADER.size + fields[-2] + fields[-1] + header_bytes
                if fortran and len(shape) > 1:
                    raise InputError(self.path, "is stored in Fortran order; rewrite it C-ordered "
                                     "(np.ascontiguousarray) to read it by rows", key, list(shape))
                self.members[key] = (info, shape, dtype, offset)

    def _header(self, member, key):
        try:
            version = np.lib.format.read_magic(member)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, fortran, dtype = read(member)
        except ValueError as exc:
            raise InputError(self.path, f"not a readable .npy member ({exc})", key) from None
        if dtype.hasobject:
            raise InputError(self.path, "holds pickled objects, which generic npz does not allow", key)
        return shape, fortran, dtype

    def keys(self):
        return list(self.members)

    def __contains__(self, key):
        return key in self.members

    def shape(self, key) -> tuple:
        return self.members[key][1]

    def dtype(self, key) -> np.dtype:
        return self.members[key][2]

    def rows(self, key, start, stop) -> np.ndarray:
        """Local. Rows ``[start, stop)`` of array ``key`` (a scalar: the whole value)."""
        info, shape, dtype, offset = self.members[key]
        if not shape:
            with zipfile.ZipFile(self.path) as archive, archive.open(info) as member:
                self._header(member, key)
                return np.frombuffer(member.read(dtype.itemsize), dtype=dtype).reshape(())
        row_bytes = dtype.itemsize * int(np.prod(shape[1:], dtype=np.int64))
        count = max(0, stop - start)
        if count == 0 or row_bytes == 0:
            return np.empty((count, *shape[1:]), dtype=dtype)
        if offset is not None:
            mapped = np.memmap(self.path, dtype=dtype, mode="r", offset=offset, shape=shape)
            return np.array(mapped[start:stop])
        with zipfile.ZipFile(self.path) as archive, archive.open(info) as member:
            self._header(member, key)
            skip = start * row_bytes
            while skip:
                skip -= len(member.read(min(skip, _STREAM_BYTES)))
            data = member.read(count * row_bytes)
        return np.frombuffer(data, dtype=dtype).reshape(count, *shape[1:]).copy()


def read_npz_spread(comm, path, name=None) -> SpreadGraph:
    """Collective over comm. Read a generic ``.npz`` graph, each rank its slice (see module
    docstring); the result is validated as the serial reader validates a Graph."""
    return _read_arrays_spread(comm, NpzArrays(path), name)


def read_h5graph_spread(comm, path, name=None) -> SpreadGraph:
    """Collective over comm. Read a graph file (:mod:`hpcgnn.prep.read.h5graph`), each rank its
    chunks; validated as :func:`read_npz_spread` validates."""
    require_regular(path, "is read by rows, seeking in the file")
    with H5GraphArrays(path) as arrays:
        stored = arrays.h5.attrs.get("name")
        stored = stored.decode() if isinstance(stored, bytes) else stored
        return _read_arrays_spread(comm, arrays, name or stored)


def edge_count(arrays) -> int:
    """Local. The number of edges of ``arrays``, once ``src``/``dst`` are checked: present,
    1-D integer arrays of one length, not empty."""
    for key in ("src", "dst"):
        if key not in arrays:
            raise InputError(arrays.path, "missing required array", key)
        if len(arrays.shape(key)) != 1 or not np.issubdtype(arrays.dtype(key), np.integer):
            raise InputError(arrays.path, "must be a 1-D integer array", key,
                             f"{arrays.dtype(key)}{list(arrays.shape(key))}")
    num_edges = arrays.shape("src")[0]
    if arrays.shape("dst")[0] != num_edges:
        raise InputError(arrays.path, "src and dst lengths differ", "dst", f"{arrays.shape('dst')[0]} vs {num_edges}")
    if num_edges == 0:
        raise InputError(arrays.path, "graph has no edges", "src", 0)
    return num_edges


def _read_arrays_spread(comm, arrays, name=None) -> SpreadGraph:
    """Collective over comm. The graph held by ``arrays`` (:class:`NpzArrays` or
    :class:`~hpcgnn.prep.read.h5graph.H5GraphArrays`: generic ``.npz`` keys read by rows), each
    rank its slice of the edges and its block of the nodes."""
    where = arrays.path
    num_edges = edge_count(arrays)
    lo, hi = block_starts(num_edges, comm.size)[comm.rank:comm.rank + 2]
    src = arrays.rows("src", lo, hi).astype(np.int64, copy=False)
    dst = arrays.rows("dst", lo, hi).astype(np.int64, copy=False)
    num_nodes = count_nodes(comm, arrays, src, dst)
    check_ids(comm, where, num_nodes, src, dst)
    starts = block_starts(num_nodes, comm.size)
    first, end = starts[comm.rank:comm.rank + 2]
    ndata, edata = {}, {}
    for key in arrays.keys():
        shape = arrays.shape(key)
        if key in ("src", "dst") or not shape:
            continue  # scalars (num_nodes, a generator's seed, ...) are metadata
        expected, what = (num_edges, "num_edges") if key.startswith("edge_") else (num_nodes, "num_nodes")
        if shape[0] != expected:
            raise InputError(where, f"has {shape[0]} rows, expected {what} = {expected}", key, list(shape))
        if key.startswith("edge_"):
            edata[key[len("edge_"):]] = arrays.rows(key, lo, hi)
        else:
            ndata[key] = arrays.rows(key, first, end)
    graph = SpreadGraph(num_nodes, starts, src, dst, np.arange(lo, hi, dtype=np.int64), ndata, edata,
                        name or os.path.splitext(os.path.basename(where))[0], where, input_edges=num_edges)
    return validate(comm, to_destination_owners(comm, graph))


def count_nodes(comm, arrays, src, dst) -> int:
    """Collective over comm. The graph's ``num_nodes`` scalar, else the largest id in any
    rank's ``src``/``dst`` rows plus one."""
    if "num_nodes" in arrays:
        raw = arrays.rows("num_nodes", 0, 1)
        if raw.ndim != 0 or not np.issubdtype(raw.dtype, np.integer):
            raise InputError(arrays.path, "must be an integer scalar", "num_nodes", raw)
        count = int(raw)
    else:
        largest = max(int(src.max(initial=-1)), int(dst.max(initial=-1)))
        count = int(comm.allreduce(largest, op=mpi().MAX)) + 1
    if count <= 0:
        raise InputError(arrays.path, "graph has no nodes", "num_nodes", count)
    return count


def check_ids(comm, where, num_nodes, src, dst):
    """Collective over comm. The serial reader's id checks, on the global minimum and maximum (so every rank raises
    the same error)."""
    for key, ids in (("src", src), ("dst", dst)):
        lowest = int(comm.allreduce(int(ids.min(initial=0)), op=mpi().MIN))
        highest = int(comm.allreduce(int(ids.max(initial=0)), op=mpi().MAX))
        if lowest < 0:
            raise InputError(where, "negative node id", key, lowest)
        if highest >= num_nodes:
            raise InputError(where, f"node id out of range [0, {num_nodes})", key, highest)


def spread_graph(comm, graph: Graph | None) -> SpreadGraph:
    """Collective over comm. Deal rank 0's in-memory ``graph`` out by destination block (the
    route of inputs that only the serial readers read); a typed graph's schema goes to every
    rank and each type's field rows to the ranks whose blocks hold them."""
    specs = None
    if comm.rank == 0:
        typed = None
        if graph.schema is not None:
            typed = (graph.schema, np.asarray(graph.type_offsets, dtype=np.int64),
                     {t: {f: (v.dtype, v.shape[1:]) for f, v in fields.items()}
                      for t, fields in graph.typed_fields.items()})
        specs = (graph.num_nodes, graph.num_edges, graph.name, graph.source, graph.symmetric,
                 {k: (v.dtype, v.shape[1:]) for k, v in graph.ndata.items()},
                 {k: (v.dtype, v.shape[1:]) for k, v in graph.edata.items()}, typed)
    num_nodes, num_edges, name, source, symmetric, node_specs, edge_specs, typed = comm.bcast(specs, root=0)
    starts = block_starts(num_nodes, comm.size)
    if comm.rank == 0:
        node_rows = {k: _dense(v) for k, v in graph.ndata.items()}
        edges = (graph.src, graph.dst, np.arange(num_edges, dtype=np.int64), *graph.edata.values())
        node_owner = owner_of(np.arange(num_nodes, dtype=np.int64), starts)
        edge_owner = owner_of(graph.dst, starts)
    else:
        node_rows = {k: np.empty((0, *shape), dtype) for k, (dtype, shape) in node_specs.items()}
        edges = (np.empty(0, np.int64),) * 3 + tuple(np.empty((0, *s), d) for d, s in edge_specs.values())
        node_owner = edge_owner = np.empty(0, dtype=np.int64)
    ndata = dict(zip(node_rows, send_to_owners(comm, node_owner, *node_rows.values())))
    moved = send_to_owners(comm, edge_owner, *edges)
    spread = SpreadGraph(num_nodes, starts, moved[0], moved[1], moved[2], ndata, dict(zip(edge_specs, moved[3:])),
                         name, source, symmetric, num_edges)
    if typed is not None:
        spread.schema, spread.type_offsets, field_specs = typed
        spread.typed_fields = _deal_typed_fields(comm, spread, graph.typed_fields if comm.rank == 0 else None,
                                                 field_specs)
    return spread


def _dense(values):
    return np.asarray(values.toarray() if hasattr(values, "toarray") else values)


def _deal_typed_fields(comm, spread: SpreadGraph, typed_fields, field_specs) -> dict:
    """Collective over comm. Every rank's rows of each per-type field of rank 0's ``typed_fields``
    (:meth:`SpreadGraph.type_rows`), one type at a time (a sparse field densified one type at a time)."""
    dealt = {}
    for node_type, specs in field_specs.items():
        t = spread.schema.type_index(node_type)
        count = int(spread.type_offsets[t + 1] - spread.type_offsets[t])
        if comm.rank == 0:
            rows = [_dense(typed_fields[node_type][f]) for f in specs]
            owner = owner_of(np.arange(count, dtype=np.int64) + spread.type_offsets[t], spread.starts)
        else:
            rows = [np.empty((0, *shape), dtype) for dtype, shape in specs.values()]
            owner = np.empty(0, dtype=np.int64)
        dealt[node_type] = dict(zip(specs, send_to_owners(comm, owner, *rows)))
        del rows
    return dealt
