"""Graph clean-up and splits applied between reading and partitioning.

Every transform returns a new :class:`~hpcgnn.prep.graph.Graph`; edge fields follow their edges
and node fields their nodes, and a reader's held-out edge sets (``Graph.link``) are kept. Only
:func:`largest_component` numbers the nodes anew (held-out edges too, dropping those it cannot
name any more); it keeps each node's input-file id in node field
:data:`~hpcgnn.format.fields.ORIG_ID`, so the part files and every output name the nodes as the
input file does. A typed graph (:mod:`hpcgnn.prep.typed`) keeps its types through the transforms
that keep its nodes and its edges' order (self loops, splits); the others refuse it in one line
naming their flag. The heavy ones (dedup, symmetrize) use the compiled CSR kernels, which are
linear in the edge count apart from sorting each node's own neighbour list.
"""
from __future__ import annotations

import re

import numpy as np
from scipy.sparse import coo_matrix, diags
from scipy.sparse.csgraph import connected_components

from hpcgnn import _csr
from hpcgnn.format.fields import MASKS, ORIG_ID
from hpcgnn.prep.graph import Graph
from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.stages import silent


def _typed_like(new: Graph, old: Graph) -> Graph:
    """``new`` with ``old``'s node types (a transform that keeps the nodes and the edges' order
    keeps a typed graph typed)."""
    new.schema, new.type_offsets, new.typed_fields = old.schema, old.type_offsets, old.typed_fields
    return new


#: why each clean-up flag is refused on a typed graph (the serial and the spread clean-up's)
TYPED_REFUSALS = {
    "--dedup": "edges of different relations between the same two nodes are distinct",
    "--symmetrize": "a reverse edge needs a relation of its own; read the graph with --add-reverse, which adds "
                    "relation rev_<r> for every relation r",
    "--largest-component": "it would renumber the nodes of every type",
    "--normalize-features": "its features are per node type",
}


def refuse_typed(graph, flag: str):
    """Local. Refuse the transform of ``flag`` on a typed graph (a :class:`Graph` or a spread
    graph with ``schema`` set): it would renumber or drop nodes or edges across types."""
    if graph.schema is not None:
        raise InputError(graph.source, f"not applied to a typed graph: {TYPED_REFUSALS[flag]}", flag, graph.name)


def _with_edges(graph, keep=None, src=None, dst=None, edata=None, symmetric=None):
    """Copy of ``graph`` with a new edge set (``keep`` selects or reorders existing edges)."""
    if keep is not None:
        src, dst = graph.src[keep], graph.dst[keep]
        edata = {k: v[keep] for k, v in graph.edata.items()}
    symmetric = graph.symmetric if symmetric is None else symmetric
    return _typed_like(Graph(graph.num_nodes, src, dst, dict(graph.ndata), edata, graph.name, graph.source,
                             symmetric, link=graph.link), graph)


def remove_self_loops(graph: Graph) -> Graph:
    """Local. Drop every edge ``v -> v`` (edge order kept)."""
    keep = graph.src != graph.dst
    return graph if keep.all() else _with_edges(graph, keep=np.flatnonzero(keep))


def dedup(graph: Graph) -> Graph:
    """Local. Keep one edge per (src, dst) pair: the first in input order, input order kept.
    Refused on a typed graph (edges of two relations between the same nodes are not repeats)."""
    refuse_typed(graph, "--dedup")
    _, _, eids = _unique_in_edges(graph.dst, graph.src, graph.num_nodes)
    if eids.shape[0] == graph.num_edges:
        return graph
    keep = np.zeros(graph.num_edges, dtype=bool)
    keep[eids] = True
    return _with_edges(graph, keep=np.flatnonzero(keep))


def _unique_in_edges(dst, src, num_nodes):
    indptr, cols, eids = _csr.coo_to_csr(dst, src, num_nodes)
    indptr = _csr.dedup_rows(indptr, cols, eids)
    nnz = int(indptr[-1])
    return indptr, cols[:nnz], eids[:nnz]


def symmetrize(graph: Graph) -> Graph:
    """Local. Add the reverse of every edge and remove repeats (a simple bidirected graph).

    The reverse of edge ``e`` carries ``e``'s edge fields. Like DGL's ``to_bidirected``, the
    result has each ordered pair once, so multi-edges of the input collapse too. Edges come
    out grouped by destination, sources ascending (CSC order), which makes the partitioner's
    own CSC build a sequential pass. Refused on a typed graph (a reverse edge belongs to a
    reverse relation: the typed readers' ``--add-reverse`` adds them).
    """
    refuse_typed(graph, "--symmetrize")
    n = graph.num_edges
    both_src = np.concatenate([graph.src, graph.dst])
    both_dst = np.concatenate([graph.dst, graph.src])
    indptr, src, eids = _unique_in_edges(both_dst, both_src, graph.num_nodes)
    del both_src, both_dst
    dst = np.repeat(np.arange(graph.num_nodes, dtype=np.int64), np.diff(indptr))
    edata = {}
    if graph.edata:
        origin = np.where(eids < n, eids, eids - n)
        edata = {k: v[origin] for k, v in graph.edata.items()}
    return _with_edges(graph, src=src.copy(), dst=dst, edata=edata, symmetric=True)


def largest_component(graph: Graph) -> Graph:
    """Local. Restrict to the largest weakly connected component, ids renumbered in order.

    Node field ``orig_id`` (:data:`~hpcgnn.format.fields.ORIG_ID`) keeps each kept node's id in the
    input file: the reader's when it renumbered the file's ids, else the id before this step.
    Held-out edges (``graph.link``) are renumbered too: one with an end outside the component is
    dropped, and a negative outside it is drawn again at ``--edge-split`` time. Refused on a
    typed graph (its ids are numbered type by type).
    """
    refuse_typed(graph, "--largest-component")
    n = graph.num_nodes
    ones = np.ones(graph.num_edges, dtype=np.int8)
    adjacency = coo_matrix((ones, (graph.src, graph.dst)), shape=(n, n)).tocsr()
    _, component = connected_components(adjacency, directed=True, connection="weak")
    biggest = np.bincount(component).argmax()
    keep_nodes = component == biggest
    if keep_nodes.all():
        return graph
    new_id = np.cumsum(keep_nodes) - 1
    keep_edges = np.flatnonzero(keep_nodes[graph.src])  # an edge's ends share a component
    kept = np.flatnonzero(keep_nodes)
    ndata = {k: v[kept] for k, v in graph.ndata.items()}
    ndata.setdefault(ORIG_ID, kept)
    edata = {k: v[keep_edges] for k, v in graph.edata.items()}
    # held-out edges and negatives with a dropped end cannot be named any more (LinkSplit.renumber)
    link = None if graph.link is None else graph.link.renumber(np.where(keep_nodes, new_id, -1))
    return Graph(int(keep_nodes.sum()), new_id[graph.src[keep_edges]], new_id[graph.dst[keep_edges]],
                 ndata, edata, graph.name, graph.source, graph.symmetric, link=link)


def apply_split(graph: Graph, spec: str | None, seed: int = 0) -> Graph:
    """Local. Set ``train_mask``/``val_mask``/``test_mask`` from a split spec.

    Parameters
    ----------
    spec : str or None
        ``None`` or ``"dataset"`` keeps the dataset's own masks. ``"0.6,0.2,0.2"`` draws a
        seeded random split of the labelled nodes with these fractions (they may sum to less
        than 1). ``"per-class:20,30"`` is the Shchur protocol: per class 20 training and 30
        validation nodes, every other labelled node is a test node.
    seed : int
        Seed of the random draw; the same seed always gives the same masks.
    """
    if spec is None or spec == "dataset":
        return graph
    label = graph.ndata.get("label")
    if label is None:
        raise InputError(graph.source, "a split needs node labels", "label", None)
    labelled = np.flatnonzero(label >= 0 if label.ndim == 1 else (label >= 0).all(axis=1))
    rng = np.random.default_rng(seed)
    train, val, test = (np.zeros(graph.num_nodes, dtype=bool) for _ in range(3))
    per_class = re.fullmatch(r"per-class:(\d+),(\d+)", spec)
    if per_class and label.ndim != 1:
        raise InputError(graph.source, "a per-class split needs one class per node, not multi-label [N, C] "
                         "labels (use fractions, e.g. 0.6,0.2,0.2)", "--split", spec)
    if per_class:
        n_train, n_val = int(per_class.group(1)), int(per_class.group(2))
        for cls in np.unique(label[labelled]):
            members = rng.permutation(labelled[label[labelled] == cls])
            train[members[:n_train]] = True
            val[members[n_train:n_train + n_val]] = True
            test[members[n_train + n_val:]] = True
    else:
        try:
            fractions = [float(x) for x in spec.split(",")]
        except ValueError:
            fractions = []
        if len(fractions) != 3 or min(fractions) < 0 or sum(fractions) > 1 + 1e-9:
            raise InputError(None, "expected 'dataset', 'a,b,c' fractions summing to at most 1, "
                             "or 'per-class:T,V'", "--split", spec)
        order = rng.permutation(labelled)
        cut1 = int(round(fractions[0] * len(order)))
        cut2 = cut1 + int(round(fractions[1] * len(order)))
        cut3 = cut2 + int(round(fractions[2] * len(order)))
        train[order[:cut1]], val[order[cut1:cut2]], test[order[cut2:cut3]] = True, True, True
    ndata = dict(graph.ndata)
    ndata.update(zip(MASKS, (train, val, test)))
    return _typed_like(Graph(graph.num_nodes, graph.src, graph.dst, ndata, graph.edata, graph.name, graph.source,
                             graph.symmetric, link=graph.link), graph)


def normalize_features(graph: Graph, field="feat") -> Graph:
    """Local. Scale every feature row to sum 1 (rows summing to 0 are left alone), as Kipf &
    Welling preprocess the Planetoid datasets; sparse features stay sparse. A typed graph's
    per-type features live in ``graph.typed_fields``, outside this transform."""
    refuse_typed(graph, "--normalize-features")
    feat = graph.ndata[field]
    sums = np.asarray(abs(feat).sum(axis=1)).reshape(-1).astype(np.float64)
    scale = np.where(sums > 0, 1.0 / np.where(sums > 0, sums, 1.0), 1.0).astype(np.float32)
    if hasattr(feat, "tocsr"):
        scaled = (diags(scale) @ feat).tocsr().astype(np.float32)
    else:
        scaled = (feat * scale[:, None]).astype(np.float32)
    ndata = dict(graph.ndata)
    ndata[field] = scaled
    return Graph(graph.num_nodes, graph.src, graph.dst, ndata, graph.edata, graph.name, graph.source,
                 graph.symmetric, link=graph.link)


def prepare(graph: Graph, symmetrize_edges=False, drop_self_loops=False, dedup_edges=False,
            largest_cc=False, split=None, split_seed=0, normalize=False, log=silent) -> Graph:
    """Local. Apply the command-line clean-up options in a fixed, documented order.

    Order: self loops, symmetrize (which implies dedup), dedup, largest component, split,
    feature normalisation. ``log(line)`` is called after each step that ran (a
    :class:`~hpcgnn.runtime.stages.StageLog` prints it with the step's time).
    """
    if drop_self_loops:
        graph = remove_self_loops(graph)
        log(f"remove self loops: {graph.num_edges:,} edges left")
    if symmetrize_edges:
        graph = symmetrize(graph)
        log(f"symmetrize: {graph.num_edges:,} edges")
    elif dedup_edges:
        graph = dedup(graph)
        log(f"dedup: {graph.num_edges:,} edges left")
    if largest_cc:
        graph = largest_component(graph)
        log(f"largest component: {graph.num_nodes:,} nodes, {graph.num_edges:,} edges")
    if split is not None and split != "dataset":
        graph = apply_split(graph, split, split_seed)
        log(f"split {split}: " + ", ".join(f"{int(graph.ndata[m].sum()):,} {m[:-5]}" for m in MASKS))
    if normalize and (graph.schema is not None or "feat" in graph.ndata):
        graph = normalize_features(graph)
        log("normalize features")
    return graph
