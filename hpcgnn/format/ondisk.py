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

Typed (heterogeneous) graphs (:mod:`hpcgnn.format.schema`): inside each part's range the nodes
are ordered by node type, so part ``p``'s type-``t`` nodes are one contiguous block, and the
blocks of all (part, type) pairs tile the id space (:class:`~hpcgnn.format.schema.TypeLayout`).
``meta.json`` then holds ``schema``: ``{"node_types": [T names], "edge_types": [[src_type,
relation, dst_type], ...] (R canonical relations, names distinct), "target": the labelled type or
null, "type_counts": [P][T] nodes of each type in each part (each row sums to the part's node
count), "relation_counts": [R] edges of each relation (summing to num_edges), "typed_fields":
{type: {field: {dtype, shape[, encoding]}}}}``, and the part files hold

``<field>@<type>``  [n_pt, ...]   per-type node field (``feat@paper``): part ``p``'s type-``t``
                                  rows in id order (row ``i``: type id ``type_starts[t, p] + i``)
``edge_etype``      int8/int16 [e_p]  each in-edge's relation index; every node's in-edges are
                                  stored grouped by relation, ascending

``label`` and the split masks stay full-length node fields (-1 and False off the labelled type).
``orig_id`` of a typed node is its input id, numbered type by type: type ``t``'s input ids start at
the total count of the types before it, so ``orig_id`` minus that start is its id in the input's
own per-type numbering. A dataset without ``schema`` is homogeneous (one type, one relation,
no ``etype``), as every dataset written before typed graphs.

``orig_id`` is the id a user's own data names the node by: the edge list's id as written (also
with ``--relabel`` or ``--id-base 1``), the id before ``--largest-component`` dropped nodes, else
the node's row in the input; outputs keyed by node (saved embeddings) carry it.

Global edge id of stored edge ``k`` of part ``p`` is ``edge_starts[p] + k``. Every in-edge of
an owned node is stored, so the first sampling hop never leaves the rank. ``meta.json`` is
written last: a directory without it is not a dataset.

Every non-empty dataset is chunked (about :data:`CHUNK_BYTES` per chunk) with HDF5's
per-chunk fletcher32 checksum, which HDF5 verifies on every read. Both ``meta.json`` and the
part files are untrusted input: :func:`read_meta` validates the former (size and nesting
bounded before parsing, every count an integer of its range), and :class:`PartFile`, the one
reader of part data, checks a part file against it and turns any failed read (a checksum
mismatch) into an :class:`~hpcgnn.runtime.errors.InputError` naming file and dataset.
Datasets written before checksums existed have none and load as before.

HDF5 can point outside a file (external links, external raw storage, virtual datasets) and
run filter plugins; a part file may hold none of that. Opening one walks its root group once
(:meth:`PartFile.check_objects`) and refuses anything the writer (:func:`write_part`) does not
make: a link other than a hard link, a name other than the datasets ``meta.json`` implies, a
group, a virtual dataset, external storage, a layout other than contiguous or
:func:`chunk_layout`'s, a filter other than fletcher32, a stored type other than the one
h5py writes for a dtype of :data:`FIELD_DTYPES`, attributes other than :data:`PART_ATTRS`,
and storage that is missing or that the file is too small to hold (so every array a load
allocates is backed by bytes on disk). The values are checked on every load too, where it
costs one vectorised pass (:meth:`PartFile.value_problems`: CSC offsets, source ids, labels,
edge-set ids); what costs more (SHA-256, id permutations, held-out edges in the CSC) is
``inspect --verify``'s.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re

import h5py
import numpy as np

from hpcgnn.format.feat_dtype import ENCODINGS
from hpcgnn.format.fields import MASKS, UNLABELLED, check_node_field
from hpcgnn.format.schema import ETYPE, Schema, check_name, typed_field_name
from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.files import atomic_path, open_regular

FORMAT_NAME = "hpcgnn-partition"
# Checksums did not change the version: the datasets, names, dtypes and shapes are the same,
# fletcher32 is a filter every HDF5 reads (and verifies) transparently, so older hpcgnn reads
# checksummed parts and this one reads unchecksummed ones; a bump would only refuse them.
# Version 2 added the link-prediction edge sets (``link``); version 1 datasets have none and read
# the same, so both are accepted.
# Version 3 is a typed dataset (``schema``): written only for typed graphs, so that an hpcgnn that
# knows no types refuses it by its version rather than read it as one homogeneous graph;
# homogeneous datasets are still written as version 2.
FORMAT_VERSION = 2
TYPED_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
STRUCTURE = ("indptr", "indices", "eid", "orig_id")
EDGE_PREFIX = "edge_"
#: what joins a per-type field's name and its type in a dataset name (``feat@paper``:
#: :func:`~hpcgnn.format.schema.typed_field_name`); no other field name may hold it
TYPED_SEPARATOR = "@"
#: the keys of meta.json's ``schema`` entry
SCHEMA_KEYS = ("node_types", "edge_types", "target", "type_counts", "relation_counts", "typed_fields")
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
#: every dtype a part file's dataset may have (native byte order): node and edge fields take
#: any of them, the id arrays int32 or int64
FIELD_DTYPES = tuple(np.dtype(name) for name in ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
                                                 "uint32", "uint64", "float16", "float32", "float64"))
ID_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))
#: the attributes of a part file's root group (:func:`hpcgnn.prep.part_files.write_part_file`)
PART_ATTRS = ("format", "version", "part_id", "num_parts", "node_start", "node_end", "edge_start")
# An attribute of a part file holds one number or a short name; a larger one is not ours.
ATTR_MAX_BYTES = 256
#: counts and ids are int64 in memory: a count in meta.json must be below this
COUNT_LIMIT = 2**63
#: a single-label ``label`` must be below this. A model gets one output per class up to the
#: largest label, so one label of 2e9 would ask for billions of outputs (hundreds of GB at any
#: hidden width); 2**20 classes at 256 hidden units is already a 1 GiB output layer.
LABEL_LIMIT = 1 << 20
#: meta.json is refused above this size (a dataset of 100,000 parts needs about 40 MB) ...
META_MAX_BYTES = 64 << 20
#: ... or nested deeper than this (the format's deepest entry is 3 levels down)
META_MAX_DEPTH = 32


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


def stored_dtype(name, dtype) -> np.dtype:
    """Local. The dtype a part file stores field ``name`` of ``dtype`` as: the same in native byte
    order; InputError naming the field when it is not one of :data:`FIELD_DTYPES`."""
    dtype = np.dtype(dtype)
    native = dtype.newbyteorder("=") if dtype.byteorder in "<>" else dtype
    if native not in FIELD_DTYPES:
        raise InputError(None, "a part file cannot store this dtype (it stores bool, integers up to 64 bits and "
                         "float16/32/64)", name, str(dtype))
    return native


def write_part(path, arrays: dict, attrs: dict, checksums: bool = True) -> None:
    """Local. Write one part file atomically with deterministic bytes (no timestamps).

    With ``checksums`` (the default) every non-empty dataset carries per-chunk fletcher32
    checksums (:func:`chunk_layout`); without, datasets are contiguous (the layout before
    checksums, kept for comparison). These, the dtypes of :func:`stored_dtype` and the
    attributes of :data:`PART_ATTRS` are all a part file may hold (:meth:`PartFile.check_objects`).
    """
    unknown = sorted(set(attrs) - set(PART_ATTRS))
    if unknown:
        raise ValueError(f"part file attributes {unknown} are not in ondisk.PART_ATTRS")
    with atomic_path(path, suffix=".h5") as tmp:
        with h5py.File(tmp, "w", libver=("earliest", "v110"), track_order=False) as h5:
            for key, value in attrs.items():
                h5.attrs[key] = value
            for name in sorted(arrays):
                value = np.asarray(arrays[name])
                value = value.astype(stored_dtype(name, value.dtype), copy=False)
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
    meta = parse_meta(path)
    validate_meta(meta, path, directory)
    return meta


# a JSON string (skipped whole, so brackets inside it do not count), or a bracket: group 1 opens, 2 closes
_JSON_NESTING = re.compile(r'"(?:[^"\\]|\\.)*+"|([\[{])|([\]}])', re.S)


def parse_meta(path):
    """Local. The JSON value in the ``meta.json`` at ``path``, parsed only when it is a regular file
    (:func:`~hpcgnn.runtime.files.open_regular`: a FIFO never blocks) of at most
    :data:`META_MAX_BYTES`, nested at most :data:`META_MAX_DEPTH` deep (one linear scan first),
    so a hostile file can exhaust neither memory nor the parser's recursion."""
    try:
        with open_regular(path) as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > META_MAX_BYTES:
                raise InputError(path, f"larger than {META_MAX_BYTES} bytes: not a meta.json hpcgnn writes",
                                 value=size)
            text = fh.read(META_MAX_BYTES + 1).decode("utf-8")
    except OSError as exc:
        raise InputError(path, f"unreadable ({_one_line(exc)})") from None
    except UnicodeDecodeError as exc:
        raise InputError(path, f"unreadable JSON ({_one_line(exc)})") from None
    depth = 0
    for match in _JSON_NESTING.finditer(text):
        if match.group(1):
            depth += 1
            if depth > META_MAX_DEPTH:
                raise InputError(path, f"nested deeper than {META_MAX_DEPTH} levels: not a meta.json hpcgnn "
                                 "writes", value=f"byte {match.start()}")
        elif match.group(2):
            depth -= 1
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InputError(path, f"unreadable JSON ({_one_line(exc)})") from None


def _is_int(value) -> bool:
    # JSON true/false arrive as bool, a subclass of int; 3.0 is not a count either
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _is_count(value, minimum=0) -> bool:
    """An integer in ``[minimum, COUNT_LIMIT)``: what int64 arrays can hold."""
    return _is_int(value) and minimum <= value < COUNT_LIMIT


def validate_meta(meta, path, directory) -> None:
    """Local. Refuse a ``meta.json`` (already parsed, at ``path``) that hpcgnn must not act on.

    Checked: format and version; counts are integers below :data:`COUNT_LIMIT` (int64), non-negative
    (``num_parts`` positive); ``node_starts`` and ``edge_starts`` are ``num_parts + 1`` integers
    rising from 0 to ``num_nodes`` / ``num_edges``; one ``parts`` entry per part, each naming a
    plain file inside ``directory`` (symlinks resolved), its counts (when listed) equal to the
    starts'; node and edge fields have plain names, a dtype of :data:`FIELD_DTYPES` and a shape of
    positive integers, the node fields the kind the trainer reads (``label`` integer, masks bool,
    ``feat`` [N, width]: :func:`hpcgnn.format.fields.check_node_field`), and no node field uses the
    reserved ``edge_`` or ``link_`` prefixes; ``source`` and ``partitioner``, when present, are
    objects; version 1 or 2, and a ``link`` entry (version 2 only) with its keys' types and
    per-part ``link_val``/``link_test`` counts summing to ``num_val``/``num_test``; a ``schema``
    entry (a typed dataset) with a valid schema (:meth:`~hpcgnn.format.schema.Schema.from_meta`),
    only its own keys, ``type_counts`` ``[P][T]`` whose rows sum to the parts' node counts,
    ``relation_counts`` [R] summing to ``num_edges``, ``typed_fields`` of declared types with
    field specs as above, an integer edge field ``etype`` and no node field name holding ``@``.
    Raises InputError.
    """
    if not isinstance(meta, dict):
        raise InputError(path, "must be a JSON object", value=type(meta).__name__)
    if meta.get("format") != FORMAT_NAME:
        raise InputError(path, f"not a {FORMAT_NAME} dataset", "format", meta.get("format"))
    if not _is_int(meta.get("version")) or meta["version"] not in READABLE_VERSIONS:
        readable = ", ".join(str(v) for v in READABLE_VERSIONS[:-1]) + f" and {READABLE_VERSIONS[-1]}"
        raise InputError(path, f"unsupported version (this hpcgnn reads {readable})", "version", meta.get("version"))
    for key in ("num_nodes", "num_edges", "num_parts", "node_starts", "edge_starts", "parts", "node_fields"):
        if key not in meta:
            raise InputError(path, "missing field", key)
    for key in ("num_nodes", "num_edges", "num_parts"):
        if not _is_count(meta[key], 1 if key == "num_parts" else 0):
            raise InputError(path, "must be a " + ("positive" if key == "num_parts" else "non-negative")
                             + " integer below 2**63", key, meta[key])
    for key in ("source", "partitioner"):
        if meta.get(key) is not None and not isinstance(meta[key], dict):
            raise InputError(path, "must be an object", key, meta[key])
    num_parts = meta["num_parts"]
    for key, total_key in (("node_starts", "num_nodes"), ("edge_starts", "num_edges")):
        _check_starts(path, meta[key], key, num_parts, meta[total_key], total_key)
    parts = meta["parts"]
    if not isinstance(parts, list) or len(parts) != num_parts:  # so num_parts is bounded by the file's size
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
    if meta.get("schema") is not None:
        _check_schema(path, meta)


def dataset_schema(meta) -> Schema:
    """Local. The :class:`~hpcgnn.format.schema.Schema` of a validated ``meta.json``:
    ``Schema.homogeneous()`` for a dataset without a ``schema`` entry."""
    entry = meta.get("schema")
    return Schema.homogeneous() if entry is None else Schema.from_meta(entry, None)


def typed_datasets(meta) -> dict:
    """Local. ``{dataset name: (type index, field, spec)}`` of every per-type node field of a
    validated ``meta.json`` (empty without a ``schema`` entry)."""
    entry = meta.get("schema")
    if entry is None:
        return {}
    types = entry["node_types"]
    return {typed_field_name(node_type, field): (types.index(node_type), field, spec)
            for node_type, fields in entry.get("typed_fields", {}).items() for field, spec in fields.items()}


def _check_schema(path, meta):
    """Refuse a ``schema`` entry (a typed dataset) that is malformed or disagrees with the counts."""
    entry = meta["schema"]
    if meta["version"] < TYPED_VERSION:
        raise InputError(path, f"a typed dataset (schema) needs format version {TYPED_VERSION}", "version",
                         meta["version"])
    schema = Schema.from_meta(entry, path)
    unknown = sorted(set(entry) - set(SCHEMA_KEYS))
    if unknown:
        raise InputError(path, f"is not a key of the schema entry (the keys are {', '.join(SCHEMA_KEYS)})",
                         f"schema.{_shown(unknown[0])}")
    num_parts, num_types, node_starts = meta["num_parts"], schema.num_types, meta["node_starts"]
    counts = entry.get("type_counts")
    if not isinstance(counts, list) or len(counts) != num_parts \
            or not all(isinstance(row, list) and len(row) == num_types for row in counts):
        raise InputError(path, f"must be num_parts x num_node_types ({num_parts} x {num_types}) lists of node counts",
                         "schema.type_counts", counts)
    for part_id, row in enumerate(counts):
        for type_index, count in enumerate(row):
            if not _is_count(count):
                raise InputError(path, "must be a non-negative integer below 2**63",
                                 f"schema.type_counts[{part_id}][{type_index}]", count)
        want = node_starts[part_id + 1] - node_starts[part_id]
        if sum(row) != want:
            raise InputError(path, f"part {part_id}'s node counts per type sum to {sum(row)}, not the part's "
                             f"{want} nodes", f"schema.type_counts[{part_id}]", row)
    relation_counts = entry.get("relation_counts")
    if not isinstance(relation_counts, list) or len(relation_counts) != schema.num_relations \
            or not all(_is_count(x) for x in relation_counts):
        raise InputError(path, f"must list the edge count of each of the {schema.num_relations} relations",
                         "schema.relation_counts", relation_counts)
    if sum(relation_counts) != meta["num_edges"]:
        raise InputError(path, f"the relations' edge counts sum to {sum(relation_counts)}, not num_edges "
                         f"{meta['num_edges']}", "schema.relation_counts", relation_counts)
    typed_fields = entry.get("typed_fields", {})
    if not isinstance(typed_fields, dict):
        raise InputError(path, "must be an object of node type: {field: {dtype, shape}}", "schema.typed_fields",
                         typed_fields)
    for node_type, fields in typed_fields.items():
        if node_type not in schema.node_types:
            raise InputError(path, f"names an unknown node type (the types are {', '.join(schema.node_types)})",
                             "schema.typed_fields", node_type)
        key = f"schema.typed_fields.{node_type}"
        if not isinstance(fields, dict):
            raise InputError(path, "must be an object of field: {dtype, shape}", key, fields)
        for field in fields:
            check_name(path, key, field)
            if field == "label" or field in MASKS:
                raise InputError(path, "labels and masks are node fields of the whole graph (node_fields), not "
                                 "per-type fields", key, field)
        _check_fields(path, fields, key, "")
    for name in meta["node_fields"]:
        if TYPED_SEPARATOR in name:
            raise InputError(path, f"a node field name may not hold '{TYPED_SEPARATOR}' (it names per-type "
                             "datasets)", "node_fields", name)
    spec = meta.get("edge_fields", {}).get(ETYPE)
    if not isinstance(spec, dict) or np.dtype(spec["dtype"]).kind not in "iu" or spec["shape"] != []:
        raise InputError(path, f"a typed dataset needs edge field {ETYPE!r}, each edge's relation index (an "
                         "integer per edge)", f"edge_fields.{ETYPE}", spec)


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
    if not _is_count(link.get("eval_negatives"), 1):
        raise InputError(path, "must be a positive integer", "link.eval_negatives", link.get("eval_negatives"))
    if link.get("negatives") not in LINK_NEGATIVES:
        raise InputError(path, f"must be one of {', '.join(LINK_NEGATIVES)}", "link.negatives", link.get("negatives"))
    if link.get("negatives_kind", "corrupt") not in LINK_NEGATIVE_KINDS:
        raise InputError(path, f"must be one of {', '.join(LINK_NEGATIVE_KINDS)}", "link.negatives_kind",
                         link.get("negatives_kind"))
    for key in LINK_META_COUNTS:
        if not _is_count(link.get(key)):
            raise InputError(path, "must be a non-negative integer below 2**63", f"link.{key}", link.get(key))
    for split_name in LINK_SPLITS:
        key = f"{LINK_PREFIX}{split_name}"
        for part_id, info in enumerate(meta["parts"]):
            if not _is_count(info.get(key)):
                raise InputError(path, "must be a non-negative integer below 2**63", f"parts[{part_id}].{key}",
                                 info.get(key))
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
    # monotone from 0 to the total (checked below), so every entry is a count like the total
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
            dtype = np.dtype(spec["dtype"]) if len(spec["dtype"]) <= 16 else None
        except (TypeError, ValueError, SyntaxError):
            dtype = None
        if dtype is None or dtype not in FIELD_DTYPES:
            raise InputError(path, "dtype must be bool, an integer of up to 64 bits or float16/32/64 (native byte "
                             "order)", where + ".dtype", spec["dtype"])
        # a row of 0 values holds nothing (and a model of input width 0 cannot be built)
        if not all(_is_count(x, 1) for x in spec["shape"]) or len(spec["shape"]) > 8 \
                or math.prod(spec["shape"]) * dtype.itemsize >= COUNT_LIMIT:
            raise InputError(path, "shape must be a list of at most 8 positive integers (a row's shape)",
                             where + ".shape", spec["shape"])
        if not prefix:  # the kind of field the trainer reads under this name, as the readers require it
            try:
                check_node_field(path, name, np.empty((0, *spec["shape"]), dtype))
            except InputError as exc:
                raise InputError(path, exc.problem, where, spec["dtype"] if exc.field == name and
                                 isinstance(exc.value, np.dtype) else exc.value) from None
            if name == "label" and spec["shape"] and spec["shape"][0] > LABEL_LIMIT:
                raise InputError(path, f"a multi-label label may have at most {LABEL_LIMIT} columns", where + ".shape",
                                 spec["shape"])
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

    Opening turns a file HDF5 cannot open (truncated, not HDF5) into an InputError, and refuses
    a file holding anything the writer does not make (:meth:`check_objects`: links out of the
    file, external or virtual storage, unknown objects, types, layouts and filters);
    :meth:`problems` compares the file with ``meta.json``; :meth:`read` turns a failed read,
    above all a chunk whose fletcher32 checksum no longer matches its bytes, into an
    InputError naming the file and the dataset; :meth:`value_problems` checks what was read.
    Use as a context manager.

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
        try:
            self.check_objects()
        except BaseException:
            self.h5.close()
            raise

    def check_objects(self) -> None:
        """Local. Refuse (InputError naming the file and the object) anything :func:`write_part`
        does not make: the module docstring lists it. One walk over the root group's links and
        the datasets' metadata, before any data is read: nothing outside the file is opened and
        no filter runs."""
        expected, stored, name = self.expected(), 0, None
        try:
            for name in self.h5:  # the link names: resolving none of them yet
                stored += self._check_link(name, expected)
            name = None
            self._check_attributes(self.h5, PART_ATTRS)
        except (OSError, KeyError, TypeError, ValueError, RuntimeError) as exc:
            raise InputError(self.path, f"unreadable HDF5 metadata ({_one_line(exc)})",
                             None if name is None else _shown(name)) from None
        file_bytes = os.path.getsize(self.path)
        if stored > file_bytes:
            raise InputError(self.path, f"its datasets claim more stored bytes than the file's {file_bytes}",
                             value=stored)

    def _check_link(self, name, expected) -> int:
        """Refuse link ``name`` of the root group unless it is a hard link to a dataset ``meta.json``
        implies; the bytes its dataset stores."""
        link = self.h5.get(name, getlink=True)
        if isinstance(link, h5py.ExternalLink):
            raise InputError(self.path, "is an external link: a part file must hold its datasets itself",
                             _shown(name), f"{link.filename}:{link.path}")
        if not isinstance(link, h5py.HardLink):
            kind = "a soft link" if isinstance(link, h5py.SoftLink) else "a link of another kind"
            raise InputError(self.path, f"is {kind}: a part file holds no links", _shown(name),
                             getattr(link, "path", type(link).__name__))
        if name not in expected:
            raise InputError(self.path, "is not a dataset of the format (meta.json implies "
                             f"{', '.join(sorted(expected))})", _shown(name))
        dset = self.h5[name]
        if not isinstance(dset, h5py.Dataset):
            raise InputError(self.path, "must be a dataset", name, type(dset).__name__)
        return self._check_dataset(name, dset)

    def _check_dataset(self, name, dset) -> int:
        """Refuse dataset ``name`` unless it is stored in this file as :func:`write_part` stores it;
        the bytes it stores."""
        plist = dset.id.get_create_plist()
        if dset.is_virtual:
            raise InputError(self.path, "is a virtual dataset: its data would be read from other files", name)
        if plist.get_external_count():
            raise InputError(self.path, "keeps its data in an external file", name,
                             plist.get_external(0)[0].decode(errors="replace"))
        shape = dset.shape
        if not shape or dset.maxshape != shape:
            raise InputError(self.path, "must be an array of fixed shape", name,
                             f"shape {shape}, maximum {dset.maxshape}")
        dtype, stored_type = np.dtype(dset.dtype.str), dset.id.get_type()  # dtype: without h5py's enum metadata
        if dtype not in FIELD_DTYPES or not stored_type.equal(h5py.h5t.py_create(dtype, logical=True)):
            kind = type(stored_type).__name__.removeprefix("Type").removesuffix("ID").lower()
            raise InputError(self.path, "is stored in an HDF5 type the format does not write", name,
                             f"{dset.dtype} (HDF5 {kind})")
        self._check_attributes(dset, ())
        layout, nbytes, stored = plist.get_layout(), math.prod(shape) * dtype.itemsize, dset.id.get_storage_size()
        if layout == h5py.h5d.CHUNKED:
            filters = [plist.get_filter(i)[0] for i in range(plist.get_nfilters())]
            want = chunk_layout(shape, dtype).get("chunks")
            if filters != [h5py.h5z.FILTER_FLETCHER32]:
                raise InputError(self.path, "has filters other than the fletcher32 checksum (HDF5 filter ids)",
                                 name, filters)
            if dset.chunks != want:
                raise InputError(self.path, f"is chunked other than the format's {want}", name, dset.chunks)
            chunks, want_chunks = dset.id.get_num_chunks(), -(-shape[0] // want[0])
            if chunks != want_chunks or stored < nbytes:
                raise InputError(self.path, f"stores less than its shape holds ({chunks} of {want_chunks} chunks)",
                                 name, f"{stored} bytes for {nbytes}")
        elif layout != h5py.h5d.CONTIGUOUS:
            raise InputError(self.path, "must be stored contiguous or in the format's chunks", name,
                             {h5py.h5d.COMPACT: "compact"}.get(layout, layout))
        elif stored < nbytes:
            raise InputError(self.path, "has data missing", name, f"{stored} bytes for {nbytes}")
        return stored

    def _check_attributes(self, obj, allowed) -> None:
        """Refuse attributes of ``obj`` (the root group or a dataset) not named in ``allowed``, and any
        that is not one small value h5py can read."""
        for key in obj.attrs:
            where = _shown(key if obj.name == "/" else f"{obj.name.lstrip('/')}.{key}")
            if key not in allowed:
                raise InputError(self.path, "is an attribute the format does not define", where)
            attr = obj.attrs.get_id(key)
            if attr.shape != () or attr.get_storage_size() > ATTR_MAX_BYTES:
                raise InputError(self.path, "attribute must be a single small value", where,
                                 f"shape {attr.shape}, {attr.get_storage_size()} bytes")
            obj.attrs[key]  # h5py cannot read every HDF5 type: fail here, as one line

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
        for name, (type_index, _, spec) in typed_datasets(self.meta).items():
            rows = self.meta["schema"]["type_counts"][self.part_id][type_index]
            want[name] = ((rows, *spec["shape"]), np.dtype(spec["dtype"]))
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
            elif dtype is None and dset.dtype not in ID_DTYPES:
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


    def value_problems(self, arrays: dict) -> list:
        """Local. Every way this part's values break the format, as InputErrors (empty if none).

        ``arrays`` maps dataset names to what was read of them (any of ``indptr``, ``indices``,
        ``label``, the masks, the ``link_*`` sets, a typed dataset's ``edge_etype``). Checked: every
        relation index of ``edge_etype`` lies in ``[0, R)`` and, with ``indptr``, rises inside every
        node's row; ``indptr`` never decreases (that it
        runs from 0 to the part's edge count is :meth:`problems`' check), so with ``problems``
        every offset lies in ``[0, num_edges]``; every source id in ``indices`` and every id
        of the edge sets lies in ``[0, num_nodes)``, each edge-set destination in this part; a
        single-label ``label`` lies in ``[UNLABELLED, LABEL_LIMIT)``, a multi-label one in
        ``{UNLABELLED, 0, 1}``, and no node of a mask is unlabelled. One vectorised pass over each.
        """
        found = []

        def refuse(problem, name, value):
            found.append(InputError(self.path, problem, name, value))

        indptr = arrays.get("indptr")
        drops = np.flatnonzero(indptr[1:] < indptr[:-1]) if indptr is not None else ()
        if len(drops):  # its two ends are :meth:`problems`', read before the rest
            row = int(drops[0]) + 1
            refuse(f"must not decrease, but entry {row} is below entry {row - 1} ({int(indptr[row - 1])})",
                   "indptr", int(indptr[row]))
        num_nodes = self.meta["num_nodes"]
        for name, ids in arrays.items():
            if (name == "indices" or name.startswith(LINK_PREFIX)) and ids.size:
                bad = _first_outside(ids, 0, num_nodes)
                if bad is not None:
                    refuse(f"node id outside [0, {num_nodes})", name, bad)
                elif name.startswith(LINK_PREFIX) and name.endswith("_dst"):
                    bad = _first_outside(ids, *self.node_range)
                    if bad is not None:
                        refuse(f"destination outside this part's nodes [{self.node_range[0]}, {self.node_range[1]})",
                               name, bad)
        etype = arrays.get(EDGE_PREFIX + ETYPE)
        if etype is not None and etype.size and self.meta.get("schema") is not None:
            num_relations = len(self.meta["schema"]["edge_types"])
            bad = _first_outside(etype, 0, num_relations)
            if bad is not None:
                refuse(f"relation index outside [0, {num_relations})", EDGE_PREFIX + ETYPE, bad)
            elif indptr is not None and not len(drops):
                # each node's in-edges grouped by relation, ascending: the per-relation sampler finds a
                # relation's run by binary search, so a relation id may fall only where a row starts
                falls = np.flatnonzero(etype[1:] < etype[:-1]) + 1
                starts = np.searchsorted(indptr, falls)
                inside = falls[(starts >= indptr.shape[0]) | (indptr[np.minimum(starts, indptr.shape[0] - 1)] != falls)]
                if inside.size:
                    refuse(f"in-edges not grouped by relation in ascending order: edge {int(inside[0])} has a lower "
                           "relation than the edge before it in the same node's row", EDGE_PREFIX + ETYPE,
                           int(etype[inside[0]]))
        self._label_problems(arrays, refuse)
        return found

    def _label_problems(self, arrays, refuse):
        label = arrays.get("label")
        if label is None or not label.size:
            return
        top = LABEL_LIMIT if label.ndim == 1 else 2
        bad = _first_outside(label, UNLABELLED, top)
        if bad is not None:
            refuse(f"labels must be in [0, {top}), or {UNLABELLED} for an unlabelled node" +
                   (" (a model gets one output per class up to the largest label)" if label.ndim == 1 else ""),
                   "label", bad)
            return
        unlabelled = label < 0 if label.ndim == 1 else (label < 0).any(axis=1)
        for mask in MASKS:
            if mask in arrays and arrays[mask].shape == unlabelled.shape:
                inside = np.flatnonzero(arrays[mask] & unlabelled)
                if inside.size:
                    refuse(f"node {self.node_range[0] + int(inside[0])} is in {mask} but unlabelled "
                           f"({inside.size} such node(s) in this part)", "label", UNLABELLED)


def _first_outside(values, low, high):
    """The smallest value of ``values`` below ``low``, else the largest at or above ``high``, else None."""
    lowest, highest = values.min(), values.max()
    if lowest < low:
        return int(lowest)
    return int(highest) if highest >= high else None


def _shown(name) -> str:
    """An HDF5 name as one short line of a message."""
    name = " ".join(str(name).split())
    return name if len(name) <= 80 else name[:77] + "..."


def open_part(directory, meta: dict, part_id: int) -> PartFile:
    """Local. Part ``part_id`` opened and checked against ``meta.json`` (:meth:`PartFile.check`)."""
    return PartFile(directory, meta, part_id).check()


def read_part(directory, meta: dict, part_id: int, fields=None) -> dict:
    """Local. Load part ``part_id``'s arrays into memory (all fields, or those named)."""
    with open_part(directory, meta, part_id) as part:
        names = list(part.h5.keys()) if fields is None else [f for f in fields if f in part.h5]
        return {name: part.read(name) for name in names}
