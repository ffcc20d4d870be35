"""The partitioned dataset on disk: ``DIR/meta.json`` plus one HDF5 file per part.

Part ``p`` owns the contiguous global node ids ``[node_starts[p], node_starts[p+1])`` and
stores, for its owned nodes only:

``indptr``   int64 [n_p + 1]   CSC offsets: in-edges of local node ``i`` are ``indptr[i]:indptr[i+1]``
``indices``  int32/int64 [e_p] global id of each in-edge's source (int32 when num_nodes < 2**31)
``eid``      int32/int64 [e_p] id of each edge in the partitioner's input edge list
``orig_id``  int64 [n_p]       id of each node in the input file (distinct, not always < N)
node fields  [n_p, ...]        ``feat``, ``label``, ``train_mask``, ... (owned rows only)
edge fields  [e_p, ...]        ``edge_<name>``, in the same order as ``indices``

Link prediction (format version 2; made by ``hpcgnn partition --edge-split``, see
:mod:`hpcgnn.prep.edge_split`): held-out validation and test edges, each stored by the part that
owns its destination, in the partitioned (new) global ids:

``link_val_src``   int64 [v_p]      source of each validation positive
``link_val_dst``   int64 [v_p]      its destination, owned by this part
``link_val_neg``   int64 [v_p, K]   the destinations of each positive's K negatives
``link_val_neg_src`` int64 [v_p, K] their sources, only for ``uniform`` pairs (``corrupt``
                                   negatives share the positive's source, ``link_val_src``)
``link_test_*``    the same for the test edges

``meta.json`` then holds ``link``: ``{"symmetric": bool, "split": [f_train, f_val, f_test] or
"dataset", "seed": int, "eval_negatives": K, "negatives": "uniform" or "dataset",
"negatives_kind": "corrupt" or "uniform" (absent: corrupt), "num_train":
training units, "num_val": int, "num_test": int}`` (optional notes beside them:
``split_scheme``, ``dataset_negatives``, ``negatives_redrawn``, ``positives_dropped``,
``negatives_kept_rejected``: :class:`hpcgnn.prep.edge_split.LinkSplit`),
and every ``parts[p]`` entry ``link_val`` and ``link_test`` (v_p and the test count). The
training positives are the stored graph's own edges (``num_train`` units of them). The
``link_`` prefix is reserved: no node field may use it. Version 1 datasets (no edge sets) are
still read.

``orig_id`` is the id a user's own data names the node by: the edge list's id as written (also
with ``--relabel`` or ``--id-base 1``), the id before ``--largest-component`` dropped nodes, else
the node's row in the input; outputs keyed by node (saved embeddings) carry it.

Global edge id of stored edge ``k`` of part ``p`` is ``edge_starts[p] + k``. Every in-edge of
an owned node is stored, so the first sampling hop never leaves the rank. ``meta.json`` is
written last: a directory without it is not a dataset.

Every non-empty dataset is chunked (about :data:`CHUNK_BYTES` per chunk) with HDF5's
per-chunk fletcher32 checksum, which HDF5 verifies on every read. Both ``meta.json`` and the
part files are untrusted input: :func:`read_meta` validates the former, and :class:`PartFile`,
the one reader of part data, checks a part file against it and turns any failed read (a
checksum mismatch) into an :class:`~hpcgnn.runtime.errors.InputError` naming file and dataset.
Datasets written before checksums existed have none and load as before.
"""
from __future__ import annotations

import hashlib
import json
import os

import h5py
import numpy as np

from hpcgnn.prep.feat_dtype import ENCODINGS
from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.files import atomic_path

FORMAT_NAME = "hpcgnn-partition"
# Checksums did not change the version: the datasets, names, dtypes and shapes are the same,
# fletcher32 is a filter every HDF5 reads (and verifies) transparently, so older hpcgnn reads
# checksummed parts and this one reads unchecksummed ones; a bump would only refuse them.
# Version 2 added the link-prediction edge sets (``link``); version 1 datasets have none and read
# the same, so both are accepted.
FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
STRUCTURE = ("indptr", "indices", "eid", "orig_id")
EDGE_PREFIX = "edge_"
LINK_PREFIX = "link_"
#: the held-out edge sets of a link-prediction dataset
LINK_SPLITS = ("val", "test")
#: the datasets of each set: ``link_<set>_<array>``
LINK_ARRAYS = ("src", "dst", "neg")
LINK_META_COUNTS = ("num_train", "num_val", "num_test")
LINK_NEGATIVES = ("uniform", "dataset")
#: ``link.negatives_kind``: negatives ``(src, n)`` sharing the positive's source, or pairs ``(m, n)``
LINK_NEGATIVE_KINDS = ("corrupt", "uniform")
# Bytes per chunk of a checksummed dataset. HDF5's default chunk cache holds one such chunk;
# whole-dataset reads of 0.5-2 MiB chunks ran equally fast, 64 KiB and 16 MiB ones 20-60%
# slower (190 MiB float32 features, warm page cache).
CHUNK_BYTES = 1 << 20
FIELD_KINDS = "biuf"  # bool, signed, unsigned, float: what a DistTensor can hold


def part_file_name(part_id: int) -> str:
    """Local. File name of part ``part_id`` inside a dataset directory."""
    return f"part-{part_id:05d}.h5"


def link_datasets(meta) -> list[str]:
    """Local. Names of a part file's link-prediction datasets (``link_val_src``, ...), empty when
    ``meta`` has no ``link``."""
    if not isinstance(meta, dict) or meta.get("link") is None:
        return []
    return [f"{LINK_PREFIX}{split}_{array}" for split in LINK_SPLITS for array in link_arrays(meta)]


def link_arrays(meta) -> tuple:
    """Local. The arrays of each edge set: :data:`LINK_ARRAYS`, and ``neg_src`` for uniform pairs."""
    uniform = meta["link"].get("negatives_kind", "corrupt") == "uniform"
    return LINK_ARRAYS + ("neg_src",) if uniform else LINK_ARRAYS


def id_dtype(count: int):
    """Local. The narrowest id dtype of this format (int32 or int64) that holds ``count`` ids."""
    return np.int32 if count < 2**31 else np.int64


def chunk_layout(shape, dtype) -> dict:
    """Local. ``create_dataset`` options of a checksummed dataset: fletcher32 on chunks of whole
    rows, about :data:`CHUNK_BYTES` each. Empty (or 0-d) arrays stay contiguous: they have no
    bytes to protect, and HDF5 chunks need at least one row."""
    shape = tuple(int(x) for x in shape)
    if not shape or 0 in shape:
        return {}
    row_bytes = np.dtype(dtype).itemsize * int(np.prod(shape[1:], dtype=np.int64))
    rows = max(1, min(shape[0], CHUNK_BYTES // max(row_bytes, 1)))
    return {"chunks": (rows, *shape[1:]), "fletcher32": True}


def write_part(path, arrays: dict, attrs: dict, checksums: bool = True) -> None:
    """Local. Write one part file atomically with deterministic bytes (no timestamps).

    With ``checksums`` (the default) every non-empty dataset carries per-chunk fletcher32
    checksums (:func:`chunk_layout`); without, datasets are contiguous (the layout before
    checksums, kept for comparison).
    """
    with atomic_path(path, suffix=".h5") as tmp:
        with h5py.File(tmp, "w", libver=("earliest", "v110"), track_order=False) as h5:
            for key, value in attrs.items():
                h5.attrs[key] = value
            for name in sorted(arrays):
                value = np.asarray(arrays[name])
                layout = chunk_layout(value.shape, value.dtype) if checksums else {}
                h5.create_dataset(name, data=value, track_times=False, **layout)


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
    """Local. Load ``DIR/meta.json`` and validate it (:func:`validate_meta`).

    Every reader of a dataset (``DistGraph``, ``inspect``, :func:`read_part`) loads it here,
    so a bad file is refused the same way everywhere: one InputError naming the file, the
    field and the value.
    """
    directory = os.fspath(directory)
    path = os.path.join(directory, "meta.json")
    if not os.path.isdir(directory):
        raise InputError(directory, "dataset directory not found")
    if not os.path.exists(path):
        raise InputError(path, "missing: not a partitioned dataset (run 'hpcgnn partition' first)")
    try:
        with open(path) as fh:
            meta = json.load(fh)
    except (OSError, ValueError) as exc:
        raise InputError(path, f"unreadable JSON ({_one_line(exc)})") from None
    validate_meta(meta, path, directory)
    return meta


def _is_int(value) -> bool:
    # JSON true/false arrive as bool, a subclass of int; 3.0 is not a count either
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def validate_meta(meta, path, directory) -> None:
    """Local. Refuse a ``meta.json`` (already parsed, at ``path``) that hpcgnn must not act on.

    Checked: format and version; counts are non-negative integers; ``node_starts`` and
    ``edge_starts`` are ``num_parts + 1`` integers rising from 0 to ``num_nodes`` /
    ``num_edges``; one ``parts`` entry per part, each naming a plain file inside
    ``directory`` (symlinks resolved), its counts (when listed) equal to the starts'; node and
    edge fields have plain names, numeric dtypes and non-negative shapes, and no node field uses
    the reserved ``edge_`` or ``link_`` prefixes; version 1 or 2, and a ``link`` entry (version 2
    only) with its keys' types and per-part ``link_val``/``link_test`` counts summing to
    ``num_val``/``num_test``. Raises InputError.
    """
    if not isinstance(meta, dict):
        raise InputError(path, "must be a JSON object", value=type(meta).__name__)
    if meta.get("format") != FORMAT_NAME:
        raise InputError(path, f"not a {FORMAT_NAME} dataset", "format", meta.get("format"))
    if not _is_int(meta.get("version")) or meta["version"] not in READABLE_VERSIONS:
        raise InputError(path, "unsupported version (this hpcgnn reads "
                         f"{' and '.join(str(v) for v in READABLE_VERSIONS)})", "version", meta.get("version"))
    for key in ("num_nodes", "num_edges", "num_parts", "node_starts", "edge_starts", "parts", "node_fields"):
        if key not in meta:
            raise InputError(path, "missing field", key)
    for key in ("num_nodes", "num_edges", "num_parts"):
        if not _is_int(meta[key]) or meta[key] < (1 if key == "num_parts" else 0):
            raise InputError(path, "must be a " + ("positive" if key == "num_parts" else "non-negative")
                             + " integer", key, meta[key])
    num_parts = meta["num_parts"]
    for key, total_key in (("node_starts", "num_nodes"), ("edge_starts", "num_edges")):
        _check_starts(path, meta[key], key, num_parts, meta[total_key], total_key)
    parts = meta["parts"]
    if not isinstance(parts, list) or len(parts) != num_parts:
        raise InputError(path, f"must list one entry per part ({num_parts})", "parts",
                         len(parts) if isinstance(parts, list) else parts)
    seen = set()
    for part_id, info in enumerate(parts):
        if not isinstance(info, dict):
            raise InputError(path, "must be an object", f"parts[{part_id}]", info)
        field = f"parts[{part_id}].file"
        if "file" not in info:
            raise InputError(path, "missing field", field)
        resolve_part_file(directory, info["file"], path, field)
        if info["file"] in seen:
            raise InputError(path, "names a part file another part already uses", field, info["file"])
        seen.add(info["file"])
        for key, starts in (("num_nodes", meta["node_starts"]), ("num_edges", meta["edge_starts"])):
            want = starts[part_id + 1] - starts[part_id]
            if key in info and (not _is_int(info[key]) or info[key] != want):
                raise InputError(path, f"differs from {want}, the count the starts give",
                                 f"parts[{part_id}].{key}", info[key])
    for key, prefix in (("node_fields", ""), ("edge_fields", EDGE_PREFIX)):
        _check_fields(path, meta.get(key, {}), key, prefix)
    if meta.get("link") is not None:
        _check_link(path, meta)


def _check_link(path, meta):
    """Refuse a ``link`` entry (edge sets) that is malformed or disagrees with the parts' counts."""
    link = meta["link"]
    if meta["version"] < 2:
        raise InputError(path, "edge sets need format version 2", "version", meta["version"])
    if not isinstance(link, dict):
        raise InputError(path, "must be an object", "link", link)
    if not isinstance(link.get("symmetric"), bool):
        raise InputError(path, "must be true or false", "link.symmetric", link.get("symmetric"))
    split = link.get("split")
    if split != "dataset" and not (isinstance(split, list) and len(split) == 3
                                   and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in split)):
        raise InputError(path, "must be 'dataset' or a list of three fractions", "link.split", split)
    if not _is_int(link.get("seed")):
        raise InputError(path, "must be an integer", "link.seed", link.get("seed"))
    if not _is_int(link.get("eval_negatives")) or link["eval_negatives"] < 1:
        raise InputError(path, "must be a positive integer", "link.eval_negatives", link.get("eval_negatives"))
    if link.get("negatives") not in LINK_NEGATIVES:
        raise InputError(path, f"must be one of {', '.join(LINK_NEGATIVES)}", "link.negatives", link.get("negatives"))
    if link.get("negatives_kind", "corrupt") not in LINK_NEGATIVE_KINDS:
        raise InputError(path, f"must be one of {', '.join(LINK_NEGATIVE_KINDS)}", "link.negatives_kind",
                         link.get("negatives_kind"))
    for key in LINK_META_COUNTS:
        if not _is_int(link.get(key)) or link[key] < 0:
            raise InputError(path, "must be a non-negative integer", f"link.{key}", link.get(key))
    for split_name in LINK_SPLITS:
        key = f"{LINK_PREFIX}{split_name}"
        for part_id, info in enumerate(meta["parts"]):
            if not _is_int(info.get(key)) or info[key] < 0:
                raise InputError(path, "must be a non-negative integer", f"parts[{part_id}].{key}", info.get(key))
        total = sum(info[key] for info in meta["parts"])
        if total != link[f"num_{split_name}"]:
            raise InputError(path, f"the parts' {key} counts sum to {total}", f"link.num_{split_name}",
                             link[f"num_{split_name}"])


def _check_starts(path, starts, key, num_parts, total, total_key):
    if not isinstance(starts, list) or len(starts) != num_parts + 1:
        raise InputError(path, f"must be a list of num_parts + 1 = {num_parts + 1} integers", key, starts)
    for i, value in enumerate(starts):
        if not _is_int(value):
            raise InputError(path, f"entry {i} is not an integer", key, value)
    if starts[0] != 0:
        raise InputError(path, "must start at 0", key, starts)
    for i in range(num_parts):
        if starts[i + 1] < starts[i]:
            raise InputError(path, f"must not decrease, but entry {i + 1} is {starts[i + 1]} after {starts[i]}",
                             key, starts)
    if starts[-1] != total:
        raise InputError(path, f"must end at {total_key} = {total}", key, starts)


def _check_fields(path, fields, key, prefix):
    if not isinstance(fields, dict):
        raise InputError(path, "must be an object of name: {dtype, shape}", key, fields)
    for name, spec in fields.items():
        where = f"{key}.{name}"
        if not name or "/" in name or name in (".", "..") or prefix + name in STRUCTURE \
                or (not prefix and name.startswith((EDGE_PREFIX, LINK_PREFIX))):
            raise InputError(path, "is not a usable field name", key, name)
        if not isinstance(spec, dict) or not isinstance(spec.get("dtype"), str) \
                or not isinstance(spec.get("shape"), list):
            raise InputError(path, "must be an object with 'dtype' (a string) and 'shape' (a list)", where, spec)
        try:
            kind = np.dtype(spec["dtype"]).kind
        except (TypeError, ValueError):
            kind = None
        if kind is None or kind not in FIELD_KINDS:
            raise InputError(path, "dtype must be a numpy bool, integer or float type", where + ".dtype",
                             spec["dtype"])
        if not all(_is_int(x) and x >= 0 for x in spec["shape"]):
            raise InputError(path, "shape must be a list of non-negative integers", where + ".shape", spec["shape"])
        encoding = spec.get("encoding")
        if encoding is not None and (encoding not in ENCODINGS or np.dtype(spec["dtype"]) != ENCODINGS[encoding]):
            known = ", ".join(f"{name} (dtype {dtype})" for name, dtype in ENCODINGS.items())
            raise InputError(path, f"encoding must be one of {known}", where + ".encoding", encoding)


def resolve_part_file(directory, name, meta_path, field) -> str:
    """Local. Path of part file ``name`` of ``meta.json`` at ``meta_path``, refusing anything but a
    plain file name that stays inside ``directory`` once symlinks are resolved."""
    if not isinstance(name, str) or not name or "\0" in name:
        raise InputError(meta_path, "must be a part file name (a non-empty string)", field, name)
    if os.path.isabs(name):
        raise InputError(meta_path, "must be a plain file name inside the dataset directory, not an absolute path",
                         field, name)
    if "/" in name or os.sep in name or (os.altsep and os.altsep in name) or name in (".", ".."):
        raise InputError(meta_path, "must be a plain file name inside the dataset directory", field, name)
    root = os.path.realpath(directory)
    real = os.path.realpath(os.path.join(root, name))
    if real == root or os.path.commonpath([root, real]) != root:
        raise InputError(meta_path, f"resolves outside the dataset directory (to {real})", field, name)
    return os.path.join(os.fspath(directory), name)


def part_path(directory, meta: dict, part_id: int) -> str:
    """Local. Path of part ``part_id``'s file (checked again by :func:`resolve_part_file`: the
    directory may have changed since ``meta.json`` was read); InputError if it is missing."""
    meta_path = os.path.join(os.fspath(directory), "meta.json")
    path = resolve_part_file(directory, meta["parts"][part_id]["file"], meta_path, f"parts[{part_id}].file")
    if not os.path.isfile(path):
        raise InputError(path, "part file listed in meta.json is missing", "parts", part_id)
    return path


def _one_line(exc) -> str:
    return " ".join(str(exc).split())


class PartFile:
    """Local. Part ``part_id`` of a dataset, open for reading: the one reader of part data.

    Opening turns a file HDF5 cannot open (truncated, not HDF5) into an InputError;
    :meth:`problems` compares the file with ``meta.json``; :meth:`read` turns a failed read,
    above all a chunk whose fletcher32 checksum no longer matches its bytes, into an
    InputError naming the file and the dataset. Use as a context manager.

    Attributes
    ----------
    path : str
    num_nodes, num_edges : int
        The part's counts according to ``meta.json``'s starts.
    h5 : h5py.File
    """

    def __init__(self, directory, meta: dict, part_id: int):
        self.path = part_path(directory, meta, part_id)
        self.meta = meta
        self.part_id = part_id
        node_starts, edge_starts = meta["node_starts"], meta["edge_starts"]
        self.node_range = (node_starts[part_id], node_starts[part_id + 1])
        self.edge_start = edge_starts[part_id]
        self.num_nodes = node_starts[part_id + 1] - node_starts[part_id]
        self.num_edges = edge_starts[part_id + 1] - edge_starts[part_id]
        try:
            self.h5 = h5py.File(self.path, "r")
        except OSError as exc:
            raise InputError(self.path, f"cannot be opened as HDF5 ({_one_line(exc)})") from None

    def close(self) -> None:
        """Local. Close the file."""
        self.h5.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def expected(self) -> dict:
        """Local. ``{dataset: (shape, dtype)}`` that ``meta.json`` implies for this part; a dtype
        of None means "int32 or int64" (the id arrays, narrowed by the partitioner)."""
        n, e = self.num_nodes, self.num_edges
        want = {"indptr": ((n + 1,), np.dtype(np.int64)), "indices": ((e,), None), "eid": ((e,), None),
                "orig_id": ((n,), np.dtype(np.int64))}
        for key, rows, prefix in (("node_fields", n, ""), ("edge_fields", e, EDGE_PREFIX)):
            for name, spec in self.meta.get(key, {}).items():
                want[prefix + name] = ((rows, *spec["shape"]), np.dtype(spec["dtype"]))
        if link_datasets(self.meta):
            k, info = self.meta["link"]["eval_negatives"], self.meta["parts"][self.part_id]
            for split in LINK_SPLITS:
                count = info[f"{LINK_PREFIX}{split}"]
                for array in link_arrays(self.meta):
                    shape = (count, k) if array.startswith("neg") else (count,)
                    want[f"{LINK_PREFIX}{split}_{array}"] = (shape, np.dtype(np.int64))
        return want

    def problems(self) -> list:
        """Local. Every way the file disagrees with ``meta.json``, as InputErrors (empty if none).

        Checked: each structure dataset and each node/edge field is present with the shape
        (rows = the part's node or edge count) and dtype meta.json gives; ``indptr`` runs from 0
        to the edge count; the file's ``part_id``/``node_start``/``node_end``/``edge_start``
        attributes.
        Reads only metadata and the two ends of ``indptr``.
        """
        found = []
        for name, (shape, dtype) in self.expected().items():
            dset = self.h5.get(name)
            if not isinstance(dset, h5py.Dataset):
                found.append(InputError(self.path, "dataset listed in meta.json is missing", name))
            elif dset.shape != shape:
                found.append(InputError(self.path, f"shape differs from meta.json's {list(shape)}", name,
                                        list(dset.shape)))
            elif dtype is None and dset.dtype not in (np.int32, np.int64):
                found.append(InputError(self.path, "dtype must be int32 or int64", name, str(dset.dtype)))
            elif dtype is not None and dset.dtype != dtype:
                found.append(InputError(self.path, f"dtype differs from meta.json's {dtype}", name, str(dset.dtype)))
            elif name == "indptr":
                try:
                    ends = [int(self.read(name, rows=slice(i, i + 1))[0]) for i in (0, self.num_nodes)]
                except InputError as exc:
                    found.append(exc)
                    continue
                if ends != [0, self.num_edges]:
                    found.append(InputError(self.path, f"must run from 0 to the part's {self.num_edges} edges",
                                            name, ends))
        for key, want in (("part_id", self.part_id), ("node_start", self.node_range[0]),
                          ("node_end", self.node_range[1]), ("edge_start", self.edge_start)):
            got = self.h5.attrs.get(key)
            if not _is_int(got) or int(got) != want:
                found.append(InputError(self.path, f"attribute differs from meta.json's {want}", key,
                                        None if got is None else str(got)))
        return found

    def check(self) -> PartFile:
        """Local. Raise the first of :meth:`problems`, closing the file; else return self."""
        found = self.problems()
        if found:
            self.close()
            raise found[0]
        return self

    def dtype(self, name) -> np.dtype:
        """Local. Dtype of dataset ``name``."""
        return self.h5[name].dtype

    def read(self, name, out=None, rows=None) -> np.ndarray:
        """Local. Dataset ``name`` (or its ``rows`` slice), into ``out`` if given (C-contiguous,
        the dataset's shape); InputError naming file and dataset if HDF5 cannot read it."""
        dset = self.h5.get(name)
        if not isinstance(dset, h5py.Dataset):
            raise InputError(self.path, "dataset missing", name)
        try:
            if out is None:
                return dset[()] if rows is None else dset[rows]
            if out.size:
                dset.read_direct(out, source_sel=rows)
            return out
        except OSError as exc:
            # HDF5 reports a fletcher32 mismatch only as "filter returned failure during read"
            if dset.fletcher32:
                problem = f"corrupt data: a chunk fails its fletcher32 checksum ({_one_line(exc)})"
            else:
                problem = f"unreadable data ({_one_line(exc)})"
            raise InputError(self.path, problem, name) from None


def open_part(directory, meta: dict, part_id: int) -> PartFile:
    """Local. Part ``part_id`` opened and checked against ``meta.json`` (:meth:`PartFile.check`)."""
    return PartFile(directory, meta, part_id).check()


def read_part(directory, meta: dict, part_id: int, fields=None) -> dict:
    """Local. Load part ``part_id``'s arrays into memory (all fields, or those named)."""
    with open_part(directory, meta, part_id) as part:
        names = list(part.h5.keys()) if fields is None else [f for f in fields if f in part.h5]
        return {name: part.read(name) for name in names}
