"""OGB node-property datasets in their downloaded raw layout, without the ``ogb`` package.

Expected under the dataset directory (e.g. ``ogbn_arxiv/``)::

    raw/edge.csv.gz           src,dst per line, no header              (required)
    raw/num-node-list.csv.gz  one line: the node count                 (required)
    raw/num-edge-list.csv.gz  one line: the edge count                 (optional, a check)
    raw/node-feat.csv.gz      one row of floats per node               (optional -> feat)
    raw/node-label.csv.gz     one row per node, NaN = unlabelled       (optional -> label)
    raw/edge-feat.csv.gz      one row of floats per edge               (optional -> edata feat)
    split/<scheme>/{train,valid,test}.csv.gz   node ids                (optional -> masks)

Uncompressed ``.csv`` files are accepted too. Edges are returned as listed: OGB stores an
undirected graph's edges once, and adding the reverse direction is left to the caller.
"""
from __future__ import annotations

import os

import numpy as np

from hpcgnn.prep.graph import Graph, check_memory
from hpcgnn.prep.read.text import DEFAULT_CHUNK_BYTES, read_numeric_table
from hpcgnn.runtime.errors import InputError

SPLIT_FILES = (("train", "train_mask"), ("valid", "val_mask"), ("test", "test_mask"))


def find_file(directory, stem):
    """Local. ``directory/stem.csv.gz`` or ``stem.csv``, whichever exists; None if neither."""
    for suffix in (".csv.gz", ".csv"):
        candidate = os.path.join(directory, stem + suffix)
        if os.path.isfile(candidate):
            return candidate
    return None


def require_file(directory, stem):
    """Local. :func:`find_file`, or an InputError naming the missing file."""
    found = find_file(directory, stem)
    if found is None:
        raise InputError(os.path.join(directory, stem + ".csv.gz"), "required OGB file missing", stem,
                         "<absent>")
    return found


def single_count(path, what):
    """Local. The one positive count of a ``num-node-list``/``num-edge-list`` file (one graph)."""
    counts = read_numeric_table(path, np.int64, names=[what])
    if counts.shape[0] != 1:
        raise InputError(path, "expected one graph, found several", what, counts.shape[0])
    if counts[0, 0] <= 0:
        raise InputError(path, "must be positive", what, int(counts[0, 0]))
    return int(counts[0, 0])


def dataset_root(directory) -> str:
    """Local. The dataset directory, also when given its ``raw/`` (which holds ``edge.csv``)."""
    directory = os.fspath(directory).rstrip("/") or "/"
    if os.path.basename(directory) == "raw" and find_file(directory, "edge"):
        directory = os.path.dirname(directory) or "."
    return directory


def node_features(raw, num_nodes, chunk_bytes) -> dict:
    """Local. ``{"feat": float32 [num_nodes, F]}`` from ``raw/node-feat.csv(.gz)``; empty without one."""
    path = find_file(raw, "node-feat")
    if path is None:
        return {}
    return {"feat": read_numeric_table(path, np.float32, expected_rows=num_nodes,
                                       expected_from="nodes in num-node-list", chunk_bytes=chunk_bytes)}


def split_schemes(directory):
    """Local. Names of the split schemes under ``<directory>/split``, sorted (empty if none).

    Parameters
    ----------
    directory : str or os.PathLike
        OGB dataset directory.

    Returns
    -------
    list of str
    """
    split_dir = os.path.join(os.fspath(directory), "split")
    if not os.path.isdir(split_dir):
        return []
    return sorted(entry for entry in os.listdir(split_dir) if os.path.isdir(os.path.join(split_dir, entry)))


def _labels(path, num_nodes, chunk_bytes):
    # Float parse so "nan" (unlabelled, e.g. ogbn-papers100M) is legal; then back to int64.
    values = read_numeric_table(path, np.float64, expected_rows=num_nodes,
                                expected_from="nodes in num-node-list", chunk_bytes=chunk_bytes)
    return label_values(path, values)


def label_values(path, values):
    """Local. int64 labels from the float rows of ``node-label.csv`` (NaN: unlabelled, -1); a
    1-column table becomes a vector."""
    known = ~np.isnan(values)
    whole = np.where(known, values, 0.0)
    bad = np.isinf(values) | (whole != np.round(whole))
    if bad.any():
        raise InputError(path, "labels must be whole numbers or NaN", "label", float(values[bad][0]))
    labels = np.where(known, values, -1).astype(np.int64)
    return labels[:, 0].copy() if labels.shape[1] == 1 else labels


def scheme_dir(directory, scheme):
    """Local. The directory of split ``scheme`` (None: the first in sorted order); None when the
    dataset has no split."""
    schemes = split_schemes(directory)
    if scheme is None:
        if not schemes:
            return None
        scheme = schemes[0]
    elif scheme not in schemes:
        raise InputError(os.path.join(directory, "split"), f"no such split scheme (have {schemes})",
                         "split", scheme)
    return os.path.join(directory, "split", scheme)


def dataset_counts(directory):
    """Local. ``(dataset dir, raw dir, edge file, num_nodes, num_edges or None)`` of an OGB
    dataset, the counts read from ``num-node-list`` / ``num-edge-list``."""
    directory = dataset_root(directory)
    if not os.path.isdir(directory):
        raise InputError(directory, "OGB dataset directory not found")
    raw = os.path.join(directory, "raw")
    edge_path = require_file(raw, "edge")
    num_nodes = single_count(require_file(raw, "num-node-list"), "num_nodes")
    edge_count_path = find_file(raw, "num-edge-list")
    num_edges = single_count(edge_count_path, "num_edges") if edge_count_path else None
    return directory, raw, edge_path, num_nodes, num_edges


def _masks(directory, scheme, num_nodes, chunk_bytes):
    split_dir = scheme_dir(directory, scheme)
    if split_dir is None:
        return {}
    masks = {}
    for stem, mask_name in SPLIT_FILES:
        path = require_file(split_dir, stem)
        ids = read_numeric_table(path, np.int64, names=[stem], allow_empty=True, chunk_bytes=chunk_bytes)[:, 0]
        if ids.size and (ids.min() < 0 or ids.max() >= num_nodes):
            bad = int(ids.min()) if ids.min() < 0 else int(ids.max())
            raise InputError(path, f"node id out of range [0, {num_nodes})", stem, bad)
        mask = np.zeros(num_nodes, dtype=bool)
        mask[ids] = True
        masks[mask_name] = mask
    return masks


def read_ogb(directory, split=None, name=None, chunk_bytes=DEFAULT_CHUNK_BYTES) -> Graph:
    """Local. Read an OGB node-property dataset directory (raw csv.gz layout, see module docstring).

    Parameters
    ----------
    directory : str or os.PathLike
        The dataset directory holding ``raw/`` (and usually ``split/``); its ``raw/``
        subdirectory is accepted too.
    split : str, optional
        Split scheme under ``split/`` (``time``, ``sales_ranking``, ...). Default: the only
        one, or the first in sorted order; no masks if there is no ``split/``.
    name : str, optional
        Graph name; default is the directory name.
    chunk_bytes : int
        Block size for parsing the csv files.

    Returns
    -------
    Graph
        Validated graph with int64 edges as listed, optional ``feat`` (float32 [N, F]),
        ``label`` (int64, -1 where NaN; [N, T] for multi-task labels), ``edata['feat']``
        and boolean ``train_mask`` / ``val_mask`` / ``test_mask``.
    """
    directory, raw, edge_path, num_nodes, num_edges = dataset_counts(directory)
    # Fortran order makes each column a contiguous array, so src/dst need no extra copy.
    edges = read_numeric_table(edge_path, np.int64, names=["src", "dst"], expected_rows=num_edges,
                               expected_from="edges in num-edge-list", order="F", chunk_bytes=chunk_bytes)
    src, dst = edges[:, 0], edges[:, 1]
    for field, ids in (("src", src), ("dst", dst)):
        if ids.min() < 0 or ids.max() >= num_nodes:
            bad = int(ids.min()) if ids.min() < 0 else int(ids.max())
            raise InputError(edge_path, f"node id out of range [0, {num_nodes})", field, bad)
    # Features, labels and masks below have num_nodes rows: refuse an impossible count first.
    check_memory(require_file(raw, "num-node-list"), num_nodes, src.shape[0], "num_nodes", num_nodes)
    ndata, edata = {}, {}
    ndata.update(node_features(raw, num_nodes, chunk_bytes))
    label_path = find_file(raw, "node-label")
    if label_path:
        ndata["label"] = _labels(label_path, num_nodes, chunk_bytes)
    edge_feat_path = find_file(raw, "edge-feat")
    if edge_feat_path:
        edata["feat"] = read_numeric_table(edge_feat_path, np.float32, expected_rows=src.shape[0],
                                           expected_from="edges in edge.csv", chunk_bytes=chunk_bytes)
    ndata.update(_masks(directory, split, num_nodes, chunk_bytes))
    graph = Graph(num_nodes, src, dst, ndata, edata,
                  name=name or os.path.basename(os.path.abspath(directory)), source=directory)
    return graph.validate()
