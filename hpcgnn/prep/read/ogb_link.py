"""OGB link-property datasets (ogbl-collab, -ppa, -ddi, -citation2) in their downloaded raw
layout, without the ``ogb`` package.

Expected under the dataset directory (e.g. ``ogbl_collab/``)::

    raw/edge.csv.gz            src,dst per line, no header: the message-passing graph  (required)
    raw/num-node-list.csv.gz   one line: the node count          (optional: else largest id + 1)
    raw/node-feat.csv.gz       one row of floats per node                             (optional -> feat)
    split/<scheme>/train.pt    the training edges                 (required; marks the layout)
    split/<scheme>/valid.pt    validation edges, with negatives   (required -> Graph.link.val)
    split/<scheme>/test.pt     test edges, with negatives         (required -> Graph.link.test)

The ``.pt`` files are dicts saved by ``torch.save``, in one of two styles: ``edge`` [n, 2] (plus
``edge_neg`` [m, 2] in valid/test: a pool of negative edges shared by all positives; collab,
ppa, ddi), or ``source_node``/``target_node`` [n] (plus ``target_node_neg`` [n, K]: K negative
destinations per positive; citation2). They are loaded with ``torch.load(weights_only=True)``,
which builds tensors and plain containers only and never runs code from the file; anything
else is refused. The graph's edges are ``edge.csv`` as listed (OGB stores an undirected graph's
edges once; ``--symmetrize`` adds the reverses) and hold OGB's training edges, so ``train.pt``
is not read: the training positives are the graph's own edges. The validation and test
positives become ``Graph.link`` (:class:`~hpcgnn.prep.edge_split.LinkSplit`), used by
``hpcgnn partition --edge-split dataset``: per-positive negatives as given, pool negatives
replaced by uniform ones drawn at partition time (see :mod:`hpcgnn.prep.edge_split`).
"""
from __future__ import annotations

import os

import numpy as np

from hpcgnn.prep.edge_split import EvalEdges, LinkSplit
from hpcgnn.prep.graph import Graph, as_index_array, check_memory
from hpcgnn.prep.read.ogb import dataset_root, find_file, node_features, read_ogb, single_count, split_schemes
from hpcgnn.prep.read.text import DEFAULT_CHUNK_BYTES, read_numeric_table
from hpcgnn.runtime.errors import InputError

#: the split files of a scheme, and the evaluation set each one holds
SPLIT_FILES = (("valid", "val"), ("test", "test"))


def _link_schemes(directory) -> list:
    """Local. Split schemes of ``directory`` holding a ``train.pt`` (an OGB link layout), sorted."""
    return [scheme for scheme in split_schemes(directory)
            if os.path.isfile(os.path.join(os.fspath(directory), "split", scheme, "train.pt"))]


def is_ogb_link(directory) -> bool:
    """Local. Whether ``directory`` (or its parent, given its ``raw/``) is an OGB link dataset:
    some ``split/<scheme>/train.pt`` rather than a node split's ``train.csv.gz``."""
    directory = dataset_root(directory)
    return bool(_link_schemes(directory))


def read_ogb_any(directory, split=None, name=None, chunk_bytes=DEFAULT_CHUNK_BYTES) -> Graph:
    """Local. Read an OGB raw dataset directory of either kind: :func:`read_ogb_link` for a link
    dataset (:func:`is_ogb_link`), else the node-property reader ``read_ogb`` (same options)."""
    reader = read_ogb_link if is_ogb_link(directory) else read_ogb
    return reader(directory, split=split, name=name, chunk_bytes=chunk_bytes)


def _load_split_file(path) -> dict:
    """Local. An OGB ``.pt`` split file as ``{key: numpy array}``, loaded with
    ``torch.load(weights_only=True)``; InputError naming the file for anything but a dict of
    tensors or arrays."""
    import torch  # deferred: heavy, and only OGB link datasets need it

    try:
        content = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a corrupt or crafted file can fail in any step of the restricted unpickler
        detail = " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
        raise InputError(path, f"cannot be read with torch.load(weights_only=True) ({detail})", "format",
                         "ogb link split") from None
    if not isinstance(content, dict):
        raise InputError(path, "must hold a dict of tensors", "format", type(content).__name__)
    arrays = {}
    for key, value in content.items():
        if isinstance(value, torch.Tensor):
            arrays[key] = value.numpy()
        elif isinstance(value, np.ndarray):
            arrays[key] = value
    return arrays


def _pairs(path, arrays, key) -> np.ndarray:
    values = as_index_array(path, key, arrays[key])
    if values.ndim != 2 or values.shape[1] != 2:
        raise InputError(path, "must be an [n, 2] array of node id pairs", key, list(values.shape))
    return values


def _eval_set(path, arrays):
    """``(EvalEdges, pool)`` of one valid/test file: positives, per-positive negatives if given,
    and whether it had pool negatives instead."""
    if "edge" in arrays:
        edges = _pairs(path, arrays, "edge")
        src, dst = edges[:, 0].copy(), edges[:, 1].copy()
    elif "source_node" in arrays and "target_node" in arrays:
        src = as_index_array(path, "source_node", arrays["source_node"]).reshape(-1)
        dst = as_index_array(path, "target_node", arrays["target_node"]).reshape(-1)
        if src.shape != dst.shape:
            raise InputError(path, "source_node and target_node lengths differ", "target_node",
                             f"{dst.shape[0]} vs {src.shape[0]}")
    else:
        raise InputError(path, "holds neither 'edge' nor 'source_node'/'target_node'", "keys", sorted(arrays))
    neg = None
    if "target_node_neg" in arrays:
        neg = as_index_array(path, "target_node_neg", arrays["target_node_neg"])
        if neg.ndim == 1:
            neg = neg.reshape(-1, 1)
        if neg.ndim != 2 or neg.shape[0] != src.shape[0] or neg.shape[1] < 1:
            raise InputError(path, f"must be [n, K] with one row per positive ({src.shape[0]})", "target_node_neg",
                             list(neg.shape))
    elif "edge_neg" in arrays:
        _pairs(path, arrays, "edge_neg")
    return EvalEdges(src, dst, neg), "edge_neg" in arrays and neg is None


def _read_link_split(directory, scheme=None):
    """Local. The validation and test edges of ``split/<scheme>`` as a LinkSplit (no training
    count, no drawn negatives yet). Default scheme: the only one, else the first sorted."""
    schemes = _link_schemes(directory)
    if scheme is None:
        scheme = schemes[0]
    elif scheme not in schemes:
        raise InputError(os.path.join(directory, "split"), f"no such split scheme (have {schemes})", "split", scheme)
    sets, pools = {}, []
    for stem, name in SPLIT_FILES:
        path = os.path.join(directory, "split", scheme, f"{stem}.pt")
        if not os.path.isfile(path):
            raise InputError(path, "required OGB split file missing", stem, "<absent>")
        sets[name], pool = _eval_set(path, _load_split_file(path))
        pools.append(pool)
    link = LinkSplit(sets["val"], sets["test"], split="dataset",
                     negatives="dataset" if all(s.neg is not None for s in sets.values()) else "uniform")
    if any(pools):
        link.notes["dataset_negatives"] = "pool"
    link.notes["split_scheme"] = scheme
    return link


def read_ogb_link(directory, split=None, name=None, chunk_bytes=DEFAULT_CHUNK_BYTES) -> Graph:
    """Local. Read an OGB link-property dataset directory (raw layout, see module docstring).

    Parameters
    ----------
    directory : str or os.PathLike
        The dataset directory holding ``raw/`` and ``split/``; its ``raw/`` is accepted too.
    split : str, optional
        Split scheme under ``split/`` (``time``, ``throughput``, ``target``, ...). Default: the
        only one, or the first in sorted order.
    name : str, optional
        Graph name; default is the directory name.
    chunk_bytes : int
        Block size for parsing the csv files.

    Returns
    -------
    Graph
        Validated graph: the edges of ``edge.csv`` as listed, optional ``feat`` (float32
        [N, F]), and ``link``: the validation and test positives with their per-positive
        negatives (``target_node_neg``) if the dataset has them.
    """
    directory = dataset_root(directory)
    if not os.path.isdir(directory):
        raise InputError(directory, "OGB dataset directory not found")
    raw = os.path.join(directory, "raw")
    edge_path = find_file(raw, "edge")
    if edge_path is None:
        raise InputError(os.path.join(raw, "edge.csv.gz"), "required OGB file missing", "edge", "<absent>")
    edges = read_numeric_table(edge_path, np.int64, names=["src", "dst"], order="F", chunk_bytes=chunk_bytes)
    src, dst = edges[:, 0], edges[:, 1]
    link = _read_link_split(directory, split)
    count_path = find_file(raw, "num-node-list")
    num_nodes = single_count(count_path, "num_nodes") if count_path else 1 + max(
        int(ids.max()) for ids in (src, dst, link.val.src, link.val.dst, link.test.src, link.test.dst) if ids.size)
    where = count_path or edge_path
    # Features below have num_nodes rows: refuse an impossible count first.
    check_memory(where, num_nodes, src.shape[0], "num_nodes", num_nodes)
    ndata = node_features(raw, num_nodes, chunk_bytes)
    link.validate(os.path.join(directory, "split", link.notes["split_scheme"]), num_nodes)
    graph = Graph(num_nodes, src, dst, ndata, {}, name=name or os.path.basename(os.path.abspath(directory)),
                  source=directory, link=link)
    return graph.validate()

