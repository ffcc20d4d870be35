"""The partitioned dataset on disk: ``DIR/meta.json`` plus one HDF5 file per part.

Part ``p`` owns the contiguous global node ids ``[node_starts[p], node_starts[p+1])`` and
stores, for its owned nodes only:

``indptr``   int64 [n_p + 1]   CSC offsets: in-edges of local node ``i`` are ``indptr[i]:indptr[i+1]``
``indices``  int32/int64 [e_p] global id of each in-edge's source (int32 when num_nodes < 2**31)
``eid``      int32/int64 [e_p] id of each edge in the partitioner's input edge list
``orig_id``  int64 [n_p]       id of each node in the partitioner's input
node fields  [n_p, ...]        ``feat``, ``label``, ``train_mask``, ... (owned rows only)
edge fields  [e_p, ...]        ``edge_<name>``, in the same order as ``indices``

Global edge id of stored edge ``k`` of part ``p`` is ``edge_starts[p] + k``. Every in-edge of
an owned node is stored, so the first sampling hop never leaves the rank. ``meta.json`` is
written last: a directory without it is not a dataset.
"""
from __future__ import annotations

import hashlib
import json
import os

import h5py
import numpy as np

from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.files import atomic_path

FORMAT_NAME = "hpcgnn-partition"
FORMAT_VERSION = 1
STRUCTURE = ("indptr", "indices", "eid", "orig_id")
EDGE_PREFIX = "edge_"


def part_file_name(part_id: int) -> str:
    """Local. File name of part ``part_id`` inside a dataset directory."""
    return f"part-{part_id:05d}.h5"


def id_dtype(count: int):
    """Local. The narrowest id dtype of this format (int32 or int64) that holds ``count`` ids."""
    return np.int32 if count < 2**31 else np.int64


def write_part(path, arrays: dict, attrs: dict) -> None:
    """Local. Write one part file atomically with deterministic bytes (no timestamps)."""
    with atomic_path(path, suffix=".h5") as tmp:
        with h5py.File(tmp, "w", libver=("earliest", "v110"), track_order=False) as h5:
            for key, value in attrs.items():
                h5.attrs[key] = value
            for name in sorted(arrays):
                h5.create_dataset(name, data=arrays[name], track_times=False)


def sha256_file(path, block=1 << 24) -> str:
    """Local. Hex SHA-256 of a file, read in 16 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(block):
            digest.update(chunk)
    return digest.hexdigest()


def write_meta(directory, meta: dict) -> None:
    """Local. Write ``meta.json`` atomically."""
    with atomic_path(os.path.join(directory, "meta.json")) as tmp:
        with open(tmp, "w") as fh:
            json.dump(meta, fh, indent=1)
            fh.write("\n")


def read_meta(directory) -> dict:
    """Local. Load and check ``DIR/meta.json``; InputError names the file and field if bad."""
    path = os.path.join(os.fspath(directory), "meta.json")
    if not os.path.isdir(directory):
        raise InputError(directory, "dataset directory not found")
    if not os.path.exists(path):
        raise InputError(path, "missing: not a partitioned dataset (run 'hpcgnn partition' first)")
    try:
        with open(path) as fh:
            meta = json.load(fh)
    except (OSError, ValueError) as exc:
        raise InputError(path, f"unreadable JSON ({exc})") from None
    if meta.get("format") != FORMAT_NAME:
        raise InputError(path, f"not a {FORMAT_NAME} dataset", "format", meta.get("format"))
    if meta.get("version") != FORMAT_VERSION:
        raise InputError(path, f"unsupported version (this hpcgnn reads {FORMAT_VERSION})",
                         "version", meta.get("version"))
    for key in ("num_nodes", "num_edges", "num_parts", "node_starts", "edge_starts", "parts"):
        if key not in meta:
            raise InputError(path, "missing field", key)
    num_parts = meta["num_parts"]
    for key in ("node_starts", "edge_starts"):
        starts = meta[key]
        total = meta["num_nodes" if key == "node_starts" else "num_edges"]
        if len(starts) != num_parts + 1 or starts[0] != 0 or starts[-1] != total \
                or any(b < a for a, b in zip(starts, starts[1:])):
            raise InputError(path, f"must rise from 0 to the total in {num_parts + 1} steps", key, starts)
    if len(meta["parts"]) != num_parts:
        raise InputError(path, f"lists {len(meta['parts'])} parts, num_parts is {num_parts}", "parts")
    return meta


def part_path(directory, meta: dict, part_id: int) -> str:
    """Local. Path of part ``part_id``'s file; InputError if it is missing."""
    path = os.path.join(os.fspath(directory), meta["parts"][part_id]["file"])
    if not os.path.exists(path):
        raise InputError(path, "part file listed in meta.json is missing", "parts", part_id)
    return path


def read_part(directory, meta: dict, part_id: int, fields=None) -> dict:
    """Local. Load part ``part_id``'s arrays into memory (all fields, or those named)."""
    path = part_path(directory, meta, part_id)
    with h5py.File(path, "r") as h5:
        names = list(h5.keys()) if fields is None else [f for f in fields if f in h5]
        return {name: h5[name][()] for name in names}
