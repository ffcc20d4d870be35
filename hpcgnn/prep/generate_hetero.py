"""Synthetic typed graphs with the schema of IGBH (MLPerf Training's GNN benchmark), at any scale.

Schema
------
Node types ``paper``, ``author``, ``institute``, ``fos`` (field of study); relations
``cites`` (paper -> paper), ``written_by`` (paper -> author), ``affiliated_to``
(author -> institute) and ``topic`` (paper -> fos), plus by default their reverses
``rev_cites``, ``rev_written_by``, ``rev_affiliated_to`` and ``rev_topic`` (IGBH's training
adds them too). ``paper`` is the labelled type.

Proportions
-----------
Node and edge counts are IGBH-large's shares (IGB's published counts), scaled to ``num_nodes``
and ``num_edges`` (the edges of the four relations, before reverses)::

    type        IGBH-large     share      relation        IGBH-large      share
    paper      100,000,000    45.95 %     cites        1,223,571,364    61.03 %
    author     116,959,896    53.74 %     written_by     289,502,107    14.44 %
    institute       26,524     0.012 %    affiliated_to   34,099,660     1.70 %
    fos            649,707     0.30 %     topic          457,577,294    22.82 %

Every type gets at least ``num_classes`` nodes (``paper`` takes what the others leave) and
every relation at least one edge (``cites`` takes the rounding remainder).

What is planted
---------------
Every node gets a class in ``[0, num_classes)``: papers uniformly at random (these are the
labels), the other types in equal shares. Every relation is an RMAT-like draw (the quadrant
tables of :mod:`hpcgnn.prep.generate`: heavy-tailed degrees on both ends, ends of different
sizes scaled each to its own type) in which, with probability ``homophily``, an edge's
destination moves to the node of the source's class at the same popularity rank; ``cites`` is
exactly :func:`hpcgnn.prep.generate.rmat_edges` on the papers. Repeats are dropped and each
relation keeps exactly its edge count, with the drawn fraction of same-class edges (so about
``h + (1 - h) / num_classes`` of every relation's edges join two nodes of one class). Every
type has ``feat`` of width ``feat_dim``: ``feat_signal * centroid[class] + N(0, 1)``, each
type with its own centroids (its own feature space). A paper's own features are therefore
weakly predictive of its label, and its cited papers, authors and fields of study, whose
classes mostly equal its own, add signal a relational model can use (an author's or a field's
features are near its class centroid, which is its papers' class with probability ``h``).
Paper train/val/test masks are a seeded permutation split by ``fractions``.

Every draw comes from a stream keyed by the seed and the relation or node type, so a graph is
the same bit for bit for a seed, whatever ``chunk_edges``.

Command line: ``hpcgnn generate hetero ...`` (:mod:`hpcgnn.cli.generate`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hpcgnn.format.schema import ETYPE
from hpcgnn.prep.generate import (
    EDGE_BLOCK,
    ClassPeers,
    LocalDraw,
    check_rmat,
    node_fields,
    quadrant_tables,
    rmat_edges,
    rmat_in_weight,
    rmat_unique_keys,
    select_keys,
    split_pairs,
)
from hpcgnn.prep.graph import Graph
from hpcgnn.prep.typed import typed_graph
from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.files import atomic_path

#: IGBH-large's node counts, in type-id order; ``paper`` (first) is the labelled type
IGBH_NODES = {"paper": 100_000_000, "author": 116_959_896, "institute": 26_524, "fos": 649_707}
#: IGBH-large's relations ``(src_type, relation, dst_type, edges)``, in relation-id order
IGBH_RELATIONS = (("paper", "cites", "paper", 1_223_571_364),
                  ("paper", "written_by", "author", 289_502_107),
                  ("author", "affiliated_to", "institute", 34_099_660),
                  ("paper", "topic", "fos", 457_577_294))
TARGET = "paper"
_RELATION_KEY, _TYPE_KEY = 0, 1
_CLASSES, _PERM, _EDGES = range(3)


def _stream(seed, *key):
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=key))


def _sub_seed(seed, *key) -> int:
    """An integer seed of its own for one relation or node type (the homogeneous generators
    take an integer seed)."""
    high, low = np.random.SeedSequence(seed, spawn_key=key).generate_state(2, dtype=np.uint32)
    return (int(high) << 32) | int(low)


def type_counts(num_nodes, num_classes) -> dict:
    """Local. Nodes of every type: IGBH-large's shares of ``num_nodes``, each type at least
    ``num_classes`` (so every class has nodes of every type), ``paper`` taking the remainder."""
    total = sum(IGBH_NODES.values())
    counts = {t: max(num_classes, round(num_nodes * n / total)) for t, n in IGBH_NODES.items() if t != TARGET}
    papers = num_nodes - sum(counts.values())
    if papers < max(num_classes, 2):
        smallest = next(n for n in range(num_nodes, 2**40)
                        if n - sum(max(num_classes, round(n * c / total)) for t, c in IGBH_NODES.items()
                                   if t != TARGET) >= max(num_classes, 2))
        raise InputError(None, f"too few nodes for {num_classes} classes: every node type needs at least "
                         f"one node per class (at least {smallest:,} nodes)", "num_nodes", num_nodes)
    return {TARGET: papers, **counts}


def relation_counts(num_edges, counts) -> list:
    """Local. Edges of every relation: IGBH-large's shares of ``num_edges``, each at least one,
    ``cites`` taking the remainder; refused where a relation asks more edges than its pairs."""
    total = sum(e for *_, e in IGBH_RELATIONS)
    edges = [max(1, round(num_edges * e / total)) for *_, e in IGBH_RELATIONS[1:]]
    edges.insert(0, num_edges - sum(edges))
    for (src_type, rel, dst_type, _), count in zip(IGBH_RELATIONS, edges):
        pairs = counts[src_type] * (counts[dst_type] - (src_type == dst_type))
        if count < 1 or count > pairs:
            ends = (f"{counts[src_type]:,} {src_type}" if src_type == dst_type
                    else f"{counts[src_type]:,} {src_type} and {counts[dst_type]:,} {dst_type}")
            raise InputError(None, f"gives relation {rel} {count:,} edges, but {ends} nodes allow 1 to {pairs:,} "
                             "(ask for fewer edges or more nodes)", "num_edges", num_edges)
    return edges


def check_hetero(num_nodes, num_edges, num_classes, homophily, feat_dim, feat_signal, fractions, seed, chunk_edges):
    """Local. :func:`hetero_graph`'s parameters checked (one-line errors naming the parameter),
    with the node count of every type and the edge count of every relation.

    Returns ``(params, counts, edges)``: the checked parameters in the order given, ``{type: nodes}``
    and the edges of each of :data:`IGBH_RELATIONS`.
    """
    # the homogeneous checks of every shared parameter (num_edges against the whole graph)
    params = check_rmat(num_nodes, num_edges, num_classes, homophily, feat_dim, feat_signal, fractions, seed,
                        chunk_edges)
    num_nodes, num_edges, num_classes = params[:3]
    counts = type_counts(num_nodes, num_classes)
    edges = relation_counts(num_edges, counts)
    return params, counts, edges


@dataclass(frozen=True)
class _RelationDraw:
    """What drawing one relation's edge keys needs (the ``spec`` of :func:`_relation_chunk_keys`)."""

    num_src: int
    num_dst: int
    src_scale: int
    dst_scale: int
    plan: tuple          # per 16-bit word: (levels, src table or None, dst table or None)
    homophily: float
    src_classes: np.ndarray  # by generation id
    peers: ClassPeers        # the destination type's nodes by class and popularity (generation ids)
    src_perm: np.ndarray     # generation id -> final id, per end
    dst_perm: np.ndarray
    seed: int


def _word_plan(src_scale, dst_scale) -> tuple:
    """RMAT levels word by word: the top ``min`` levels of both ends from the joint quadrant
    table, the longer end's remaining levels from its marginal bits of the same tables."""
    def words(levels):
        return [quadrant_tables(2)] * (levels // 2) + [quadrant_tables(1)] * (levels % 2)

    joint = min(src_scale, dst_scale)
    plan = [(levels, src_table, dst_table) for levels, src_table, dst_table in words(joint)]
    for levels, src_table, dst_table in words(abs(src_scale - dst_scale)):
        plan.append((levels, src_table, None) if src_scale > dst_scale else (levels, None, dst_table))
    return tuple(plan)


def _relation_chunk_keys(blocks, draw: _RelationDraw):
    """Keys ``(src * num_dst + dst) * 2 + is_inter`` of one relation's raw-edge blocks, plus
    (edges drawn, same-class edges drawn), as :func:`~hpcgnn.prep.generate.rmat_unique_keys` takes them."""
    size = len(blocks) * EDGE_BLOCK
    src = np.zeros(size, dtype=np.uint32)
    dst = np.zeros(size, dtype=np.uint32)
    redirect = np.empty(size, dtype=bool)
    for i, block in enumerate(blocks):
        rng = _stream(draw.seed, _EDGES, block)
        words = rng.integers(0, 1 << 64, size=len(draw.plan) * EDGE_BLOCK // 4, dtype=np.uint64)
        words = words.view(np.uint16).reshape(len(draw.plan), EDGE_BLOCK)
        part = slice(i * EDGE_BLOCK, (i + 1) * EDGE_BLOCK)
        block_src, block_dst = src[part], dst[part]
        for word, (levels, src_table, dst_table) in zip(words, draw.plan):
            if src_table is not None:
                block_src <<= levels
                block_src |= src_table[word]
            if dst_table is not None:
                block_dst <<= levels
                block_dst |= dst_table[word]
        redirect[part] = rng.random(EDGE_BLOCK) < draw.homophily
    src = (src.astype(np.int64) * draw.num_src) >> draw.src_scale
    dst = (dst.astype(np.int64) * draw.num_dst) >> draw.dst_scale
    moved = np.flatnonzero(redirect)
    dst[moved] = draw.peers.in_classes(dst[moved], draw.src_classes[src[moved]])
    is_inter = draw.src_classes[src] != draw.peers.labels[dst]
    keys = draw.src_perm[src]
    keys *= draw.num_dst
    keys += draw.dst_perm[dst]
    keys *= 2
    keys += is_inter
    return keys, keys.shape[0], keys.shape[0] - int(np.count_nonzero(is_inter))


def relation_edges(src_classes, dst_classes, num_edges, num_classes, homophily, seed, chunk_edges, draw=None):
    """Local (collective over the ranks of ``draw``). One bipartite relation's ``(src, dst)``
    (ids of each end's type, sorted by (src, dst)): ``num_edges`` distinct RMAT-like pairs, the
    fraction ``homophily`` planted inside the source's class (module docstring). Every class
    needs destination nodes. ``draw``: :class:`~hpcgnn.prep.generate.LocalDraw` (default), or
    :class:`~hpcgnn.prep.dist.generate.SpreadDraw` over the source type, whose ranks then each
    return the pairs of their block of sources."""
    draw = LocalDraw() if draw is None else draw
    num_src, num_dst = src_classes.shape[0], dst_classes.shape[0]
    src_scale, dst_scale = (max(0, math.ceil(math.log2(n))) for n in (num_src, num_dst))
    src_perm = _stream(seed, _PERM, 0).permutation(num_src)
    dst_perm = _stream(seed, _PERM, 1).permutation(num_dst)
    spec = _RelationDraw(num_src, num_dst, src_scale, dst_scale, _word_plan(src_scale, dst_scale), homophily,
                         src_classes[src_perm], ClassPeers(dst_classes[dst_perm], rmat_in_weight(num_dst, dst_scale),
                                                           num_classes),
                         src_perm, dst_perm, seed)
    unique, keep_intra = rmat_unique_keys(num_edges, chunk_edges, spec, draw, chunk_keys=_relation_chunk_keys)
    del spec
    pairs = select_keys(unique, keep_intra, num_edges, seed, draw)
    del unique
    pairs >>= 1
    return split_pairs(pairs, num_dst)


def _balanced_classes(count, num_classes, seed):
    """Classes of ``count`` nodes in equal shares (every class present when count >= classes)."""
    classes = np.arange(count, dtype=np.int64) % num_classes
    _stream(seed, _CLASSES).shuffle(classes)
    return classes


def hetero_graph(num_nodes, num_edges, feat_dim=128, num_classes=19, homophily=0.7, feat_signal=0.15,
                 fractions=(0.6, 0.2, 0.2), seed=0, add_reverse=True, chunk_edges=4_000_000) -> Graph:
    """Local. A typed graph with IGBH's schema, planted classes and paper labels (module docstring).

    Parameters
    ----------
    num_nodes : int
        Nodes over all four types (IGBH-large's shares; each type at least ``num_classes``).
    num_edges : int
        Edges over the four relations, before reverses (IGBH-large's shares).
    feat_dim, num_classes : int
        Feature width of every type (IGBH's is 1024) and number of classes (IGBH's small label set has 19).
    homophily : float
        Probability in [0, 1] that an edge of any relation is planted inside its source's class.
    feat_signal : float
        Scale of the class centroids (``N(0, I)``) added to unit Gaussian noise, every type.
    fractions : (float, float, float)
        Train, val and test fractions of the papers.
    seed : int
        Everything is a deterministic function of the seed, independent of ``chunk_edges``.
    add_reverse : bool
        Add ``rev_<relation>`` (dst_type -> src_type) for every relation.
    chunk_edges : int
        Raw edges drawn per vectorised step; bounds the working memory.

    Returns
    -------
    Graph
        From :func:`hpcgnn.prep.typed.typed_graph`: ``graph.schema``, ``graph.type_offsets``,
        ``graph.typed_fields[type]["feat"]``, ``label`` and masks on papers, edge field ``etype``.
    """
    params, counts, edges = check_hetero(num_nodes, num_edges, num_classes, homophily, feat_dim, feat_signal,
                                         fractions, seed, chunk_edges)
    _, _, num_classes, homophily, feat_dim, feat_signal, fractions, chunk_edges = params
    classes, relations = draw_relations(counts, edges, num_classes, homophily, seed, chunk_edges, num_edges,
                                        lambda num_src, num_dst: LocalDraw())
    fields = {node_type: type_fields(node_type, classes[node_type], num_classes, feat_dim, feat_signal, fractions,
                                     seed)
              for node_type in IGBH_NODES}
    paper = fields[TARGET]
    masks = {name: paper.pop(name) for name in ("train_mask", "val_mask", "test_mask")}
    label = paper.pop("label")
    return typed_graph(counts, relations, {t: {"feat": f["feat"]} for t, f in fields.items()}, target=TARGET,
                       label=label, masks=masks, name="hetero", source=f"<hetero seed={seed}>",
                       add_reverse=add_reverse, notes=hetero_notes(num_classes, homophily, seed))


def hetero_notes(num_classes, homophily, seed) -> dict:
    """Local. What a hetero graph records of its draw (meta.json's ``source.reader``)."""
    return {"generator": "hetero", "num_classes": num_classes, "homophily": homophily, "seed": seed}


def draw_relations(counts, edges, num_classes, homophily, seed, chunk_edges, num_edges, draw_for):
    """Local (collective over the ranks of the draws). Every node type's classes and every
    relation's ``(src_type, rel, dst_type, src, dst)`` (ids of each end's type), parameters
    already checked (:func:`check_hetero`).

    ``draw_for(num_src, num_dst)`` gives the draw of a relation between so many nodes
    (:class:`~hpcgnn.prep.generate.LocalDraw`, or a spread draw: each rank then gets the
    edges of its block of sources, sorted, and the same classes as every rank)."""
    classes, relations = {}, []
    for index, ((src_type, rel, dst_type, _), count) in enumerate(zip(IGBH_RELATIONS, edges)):
        rel_seed = _sub_seed(seed, _RELATION_KEY, index)
        for node_type in (src_type, dst_type):
            if node_type not in classes and node_type != TARGET:
                type_seed = _sub_seed(seed, _TYPE_KEY, list(IGBH_NODES).index(node_type))
                classes[node_type] = _balanced_classes(counts[node_type], num_classes, type_seed)
        draw = draw_for(counts[src_type], counts[dst_type])
        try:
            if src_type == dst_type == TARGET:
                # the paper labels are those of the citation graph's planted classes
                classes[TARGET], src, dst = rmat_edges(counts[TARGET], count, num_classes, homophily, rel_seed,
                                                       chunk_edges, draw)
            else:
                src, dst = relation_edges(classes[src_type], classes[dst_type], count, num_classes, homophily,
                                          rel_seed, chunk_edges, draw)
        except InputError as exc:
            raise InputError(None, f"gives relation {rel} {count:,} edges, more distinct pairs than an RMAT draw "
                             f"over {counts[src_type]:,} x {counts[dst_type]:,} nodes reaches (ask for fewer "
                             "edges or more nodes, or lower homophily)", "num_edges", num_edges) from exc
        relations.append((src_type, rel, dst_type, src, dst))
    return classes, relations


def type_fields(node_type, classes, num_classes, feat_dim, feat_signal, fractions, seed, first=0, end=None) -> dict:
    """Local. Node fields of type ``node_type``'s ids ``[first, end)`` (default: all): ``feat``,
    and ``label`` and split masks (all false off the labelled type); a range is the same rows
    whoever draws it (:func:`~hpcgnn.prep.generate.node_fields`)."""
    type_seed = _sub_seed(seed, _TYPE_KEY, list(IGBH_NODES).index(node_type))
    own = fractions if node_type == TARGET else (0.0, 0.0, 0.0)
    return node_fields(classes, num_classes, feat_dim, feat_signal, own, type_seed, first, end)


def write_typed_npz(graph: Graph, path, compress=False) -> None:
    """Local. Write a typed graph (:func:`hpcgnn.prep.typed.typed_graph`'s) as the typed ``.npz``
    layout :mod:`hpcgnn.prep.read.typed_npz` reads back (every relation it has, reverses
    included), atomically."""
    schema, offsets = graph.schema, graph.type_offsets
    arrays = {f"num_nodes/{t}": np.int64(offsets[i + 1] - offsets[i]) for i, t in enumerate(schema.node_types)}
    etype = graph.edata[ETYPE]
    for index, (src_type, rel, dst_type) in enumerate(schema.relations):
        pick = np.flatnonzero(etype == index)
        ends = np.empty((pick.shape[0], 2), dtype=np.int64)
        np.subtract(graph.src[pick], offsets[schema.type_index(src_type)], out=ends[:, 0])
        np.subtract(graph.dst[pick], offsets[schema.type_index(dst_type)], out=ends[:, 1])
        arrays[f"edges/{src_type}/{rel}/{dst_type}"] = ends
    for node_type, fields in graph.typed_fields.items():
        for field, values in fields.items():
            arrays[f"{field}/{node_type}"] = values
    if schema.target is not None:
        first, end = (int(offsets[schema.type_index(schema.target) + k]) for k in (0, 1))
        for field in ("label", "train_mask", "val_mask", "test_mask"):
            if field in graph.ndata:
                arrays[f"{field}/{schema.target}"] = graph.ndata[field][first:end]
    save = np.savez_compressed if compress else np.savez
    with atomic_path(path, suffix=".npz") as tmp, open(tmp, "wb") as fh:
        save(fh, **arrays)


def hetero_summary(graph: Graph) -> dict:
    """Local. What ``hpcgnn generate hetero`` reports: nodes per type, and per relation its
    edges and the fraction joining two nodes of one class (the planted classes, not stored
    beyond papers: measured on ``cites``, whose both ends are papers)."""
    schema, offsets = graph.schema, graph.type_offsets
    relation_edges_ = np.bincount(graph.edata[ETYPE], minlength=schema.num_relations)
    cites = graph.edata[ETYPE] == schema.relation_index("cites")
    label = graph.ndata["label"]
    return {"nodes": {t: int(offsets[i + 1] - offsets[i]) for i, t in enumerate(schema.node_types)},
            "edges": {r: int(n) for r, n in zip(schema.relation_names, relation_edges_)},
            "cites_homophily": float(np.mean(label[graph.src[cites]] == label[graph.dst[cites]]))}
