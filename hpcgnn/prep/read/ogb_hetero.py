"""OGB's heterogeneous node-property datasets (ogbn-mag) in their downloaded raw layout, without
the ``ogb`` package.

Expected under the dataset directory (e.g. ``ogbn_mag/``)::

    raw/num-node-dict.csv.gz        a header of node type names, one row of their counts  (required)
    raw/triplet-type-list.csv.gz    'src_type,relation,dst_type' per line   (optional: else the
                                    directories under raw/relations/)
    raw/relations/<src>___<rel>___<dst>/edge.csv.gz       src,dst per line, ids local to each type
    raw/relations/<src>___<rel>___<dst>/num-edge-list.csv.gz   the edge count (optional, a check)
    raw/node-feat/<type>/node-feat.csv.gz     one row of floats per node of <type>  (optional)
    raw/node-label/<type>/node-label.csv.gz   one row per node of <type>, NaN: unlabelled
    split/<scheme>/<type>/{train,valid,test}.csv.gz   ids of <type>'s nodes (``--ogb-split``
                                    chooses the scheme; default the only or first one)

Uncompressed ``.csv`` files are accepted too. Node types and relations are taken in sorted
order, as OGB numbers them. The labelled type is the one with a ``node-label`` file
(``--target-type`` when several have). OGB stores each relation in one direction (ogbn-mag's
``cites``, ``writes``, ``affiliated_with``, ``has_topic``; ``--add-reverse`` and the reader's
other arguments: :mod:`~hpcgnn.prep.read.typed_common`). Other files (``node_year``, ``edge_reltype``) are not read.
"""
from __future__ import annotations

import io
import os

import numpy as np

from hpcgnn.prep.graph import Graph
from hpcgnn.prep.read.ogb import SPLIT_FILES, find_file, label_values, require_file, scheme_dir, single_count
from hpcgnn.prep.read.text import DEFAULT_CHUNK_BYTES, open_binary, read_numeric_table
from hpcgnn.prep.read.typed_common import masks_from_ids
from hpcgnn.prep.typed import typed_graph
from hpcgnn.runtime.errors import InputError

SEPARATOR = "___"


def hetero_root(path) -> str | None:
    """Local. The dataset directory of ``path`` (itself, or the parent of its ``raw/``) when it
    holds ``raw/num-node-dict.csv(.gz)``; else None."""
    path = os.fspath(path).rstrip("/") or "/"
    if os.path.basename(path) == "raw" and find_file(path, "num-node-dict"):
        path = os.path.dirname(path) or "."
    return path if os.path.isdir(path) and find_file(os.path.join(path, "raw"), "num-node-dict") else None


def _text_lines(path):
    with open_binary(path) as raw, io.TextIOWrapper(raw, encoding="utf-8", errors="surrogateescape") as text:
        return [(number, line.strip()) for number, line in enumerate(text, 1) if line.strip()]


def _node_counts(path):
    lines = _text_lines(path)
    if len(lines) != 2:
        raise InputError(path, "expected a header of node type names and one row of counts (one graph)", "rows",
                         len(lines))
    names = [name.strip() for name in lines[0][1].split(",")]
    values = [value.strip() for value in lines[1][1].split(",")]
    if len(values) != len(names):
        raise InputError(path, f"{len(values)} counts for {len(names)} node types", "line 2", lines[1][1])
    counts = {}
    for name, value in zip(names, values):
        if not value.isdigit():
            raise InputError(path, "a node count is a non-negative integer", name, value)
        if name in counts:
            raise InputError(path, "node type named twice", "header", name)
        counts[name] = int(value)
    return {name: counts[name] for name in sorted(counts)}


def _triplets(raw):
    listed = find_file(raw, "triplet-type-list")
    if listed is not None:
        triplets = []
        for number, line in _text_lines(listed):
            parts = [part.strip() for part in line.split(",")]
            if len(parts) != 3:
                raise InputError(listed, "lines are 'src_type,relation,dst_type'", f"line {number}", line)
            triplets.append(tuple(parts))
        return listed, sorted(triplets)
    directory = os.path.join(raw, "relations")
    if not os.path.isdir(directory):
        raise InputError(directory, "no relations: neither raw/triplet-type-list.csv.gz nor raw/relations/",
                         "relations", "<absent>")
    triplets = []
    for entry in sorted(os.listdir(directory)):
        parts = entry.split(SEPARATOR)
        if len(parts) != 3:
            raise InputError(os.path.join(directory, entry), f"a relation directory is named "
                             f"<src>{SEPARATOR}<rel>{SEPARATOR}<dst>", "relations", entry)
        triplets.append(tuple(parts))
    return directory, triplets


def _check_range(path, field, ids, count, type_name):
    if ids.size:
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= count:
            raise InputError(path, f"node id beyond type {type_name}'s range [0, {count})", field, lo if lo < 0 else hi)


def read_ogb_hetero(path, split=None, target_type=None, add_reverse=False, name=None,
                    chunk_bytes=DEFAULT_CHUNK_BYTES) -> Graph:
    """Local. Read an OGB heterogeneous node-property dataset (layout: module docstring).

    Parameters
    ----------
    path : str or os.PathLike
        The dataset directory (or its ``raw/``).
    split : str, optional
        Split scheme under ``split/`` (``--ogb-split``).
    target_type, add_reverse, name :
        As every typed reader takes them (:mod:`~hpcgnn.prep.read.typed_common`).

    Returns
    -------
    Graph
        A typed graph (:func:`~hpcgnn.prep.typed.typed_graph`).
    """
    root = hetero_root(path)
    if root is None:
        raise InputError(path, "not an OGB heterogeneous dataset (needs raw/num-node-dict.csv.gz)", "format",
                         "ogb_hetero")
    raw = os.path.join(root, "raw")
    counts_path = require_file(raw, "num-node-dict")
    counts = _node_counts(counts_path)
    where, triplets = _triplets(raw)
    seen = {}
    for src_type, rel, dst_type in triplets:
        for end in (src_type, dst_type):
            if end not in counts:
                raise InputError(where, f"relation {rel!r} names an unknown node type (num-node-dict has "
                                 f"{', '.join(counts)})", SEPARATOR.join((src_type, rel, dst_type)), end)
        if rel in seen:
            raise InputError(where, f"relation named twice ({SEPARATOR.join(seen[rel])} and "
                             f"{SEPARATOR.join((src_type, rel, dst_type))}): relation names must be distinct",
                             "relation", rel)
        seen[rel] = (src_type, rel, dst_type)
    labelled = [t for t in counts if find_file(os.path.join(raw, "node-label", t), "node-label")]
    if target_type is not None:
        if target_type not in counts:
            raise InputError(counts_path, f"no such node type (the types are {', '.join(counts)})", "--target-type",
                             target_type)
        if target_type not in labelled:
            raise InputError(os.path.join(raw, "node-label", target_type, "node-label.csv.gz"),
                             "the labelled type has no label file", "--target-type", target_type)
    elif len(labelled) > 1:
        raise InputError(os.path.join(raw, "node-label"), f"several node types have labels ({', '.join(labelled)}); "
                         "choose one with --target-type TYPE", "--target-type", None)
    target = target_type or (labelled[0] if labelled else None)
    split_dir = scheme_dir(root, split)
    masks = label = None
    if target is not None:
        type_split = os.path.join(split_dir, target) if split_dir is not None else None
        if type_split is None or not os.path.isdir(type_split):
            raise InputError(os.path.join(root, "split", split or "<scheme>", target), f"type {target} has labels "
                             "but no split (split/<scheme>/<type>/train.csv.gz); --ogb-split names the scheme",
                             f"{target}.train_mask", None)
        splits = {}
        for stem, mask_name in SPLIT_FILES:
            split_path = require_file(type_split, stem)
            ids = read_numeric_table(split_path, np.int64, names=[stem], allow_empty=True, chunk_bytes=chunk_bytes)
            _check_range(split_path, stem, ids, counts[target], target)
            splits[mask_name] = ids[:, 0]
        masks = masks_from_ids(type_split, counts[target], splits)
    typed_fields = {}
    for t, count in counts.items():
        feat_path = find_file(os.path.join(raw, "node-feat", t), "node-feat")
        if feat_path is not None:
            typed_fields[t] = {"feat": read_numeric_table(feat_path, np.float32, expected_rows=count,
                                                          expected_from=f"{t} nodes in num-node-dict",
                                                          chunk_bytes=chunk_bytes)}
    if target is not None:
        label_path = require_file(os.path.join(raw, "node-label", target), "node-label")
        label = label_values(label_path, read_numeric_table(label_path, np.float64, expected_rows=counts[target],
                                                            expected_from=f"{target} nodes in num-node-dict",
                                                            chunk_bytes=chunk_bytes))
    relations = []
    for src_type, rel, dst_type in triplets:
        directory = os.path.join(raw, "relations", SEPARATOR.join((src_type, rel, dst_type)))
        edge_path = require_file(directory, "edge")
        edges = read_numeric_table(edge_path, np.int64, names=["src", "dst"], allow_empty=True, order="F",
                                   chunk_bytes=chunk_bytes)
        if edges.shape[1] != 2:  # an empty file: no edges
            edges = np.empty((0, 2), dtype=np.int64, order="F")
        count_path = find_file(directory, "num-edge-list")
        if count_path is not None and single_count(count_path, "num_edges") != edges.shape[0]:
            raise InputError(edge_path, f"has {edges.shape[0]} edges but num-edge-list says "
                             f"{single_count(count_path, 'num_edges')}", "rows", edges.shape[0])
        _check_range(edge_path, "src", edges[:, 0], counts[src_type], src_type)
        _check_range(edge_path, "dst", edges[:, 1], counts[dst_type], dst_type)
        relations.append((src_type, rel, dst_type, edges[:, 0], edges[:, 1]))
    notes = {"split": os.path.basename(split_dir)} if split_dir is not None and target is not None else {}
    return typed_graph(counts, relations, typed_fields, target=target, label=label, masks=masks,
                       name=name or os.path.basename(os.path.abspath(root)), source=root, add_reverse=add_reverse,
                       notes=notes)
