"""Synthetic node-classification graphs: RMAT with planted communities, and a stochastic block model.

Both generators return a :class:`hpcgnn.graph.Graph` with unique directed edges (no self loops), int64
``label``, float32 ``feat`` = ``feat_signal * centroid[label] + N(0, 1)`` noise and boolean
``train_mask`` / ``val_mask`` / ``test_mask``. Node ids are randomly permuted, so an id says
nothing about degree or class, and edges come sorted by (src, dst).

Every random draw comes from a stream keyed by ``(seed, purpose, block index)``: RMAT edges in
blocks of ``EDGE_BLOCK`` raw edges, features in blocks of ``_NODE_BLOCK`` rows. A graph is
therefore the same bit for bit for a seed whatever ``chunk_edges`` is; the chunk only sets how
many blocks are vectorised together, i.e. the working memory.

Command line: ``hpcgnn generate rmat|sbm ...`` (:mod:`hpcgnn.generate`).
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from hpcgnn.prep.graph import Graph
from hpcgnn.runtime.errors import InputError

RMAT_PROBS = (0.57, 0.19, 0.19, 0.05)  # quadrants a, b, c, d: (src bit, dst bit) = 00, 01, 10, 11
MAX_NODES = 2**31 - 1  # keeps (src * N + dst) * 2 + flag inside int64
EDGE_BLOCK = 1 << 16
_NODE_BLOCK = 1 << 14
_TOPUP_ROUNDS = 12
_STRATIFIED_ROUNDS = 3
_MIN_YIELD = 0.02  # below this many new unique edges per raw edge, RMAT cannot reach the count
_LABELS, _PERM, _CENTROIDS, _FEATURES, _MASKS, _EDGES, _SUBSET, _SBM = range(8)


def _stream(seed, *key):
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=key))


# ----------------------------------------------------------------------------------------- checks

def _check_int(name, value, low, high=None):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InputError(None, "must be an integer", name, value)
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise InputError(None, f"must be {bound}", name, value)
    return int(value)


def _check_real(name, value, low, high=None):
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise InputError(None, "must be a number", name, value) from None
    if not math.isfinite(value) or value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise InputError(None, f"must be a finite number {bound}", name, value)
    return value


def _check_common(num_nodes, num_classes, homophily, feat_dim, feat_signal, fractions, seed):
    num_nodes = _check_int("num_nodes", num_nodes, 1, MAX_NODES)
    num_classes = _check_int("num_classes", num_classes, 1, num_nodes)
    homophily = _check_real("homophily", homophily, 0.0, 1.0)
    feat_dim = _check_int("feat_dim", feat_dim, 1)
    feat_signal = _check_real("feat_signal", feat_signal, 0.0)
    _check_int("seed", seed, 0)
    try:
        fractions = tuple(float(f) for f in fractions)
    except (TypeError, ValueError):
        raise InputError(None, "must be three numbers (train, val, test)", "fractions", fractions) from None
    if (len(fractions) != 3 or not all(math.isfinite(f) and f >= 0 for f in fractions)
            or sum(fractions) > 1 + 1e-9):
        raise InputError(None, "must be three numbers >= 0 (train, val, test) summing to at most 1",
                         "fractions", fractions)
    return num_nodes, num_classes, homophily, feat_dim, feat_signal, fractions


# ------------------------------------------------------------------------------------ node fields

def node_fields(labels, num_classes, feat_dim, feat_signal, fractions, seed, first=0, end=None):
    """Local. Features, labels and split masks of nodes ``[first, end)`` (default: all).

    Features come block by block, each block of ``_NODE_BLOCK`` rows its own stream, so a
    range is the same rows whoever generates it; ``labels`` are every node's.
    """
    num_nodes = labels.shape[0]
    end = num_nodes if end is None else end
    centroids = (feat_signal * _stream(seed, _CENTROIDS).standard_normal((num_classes, feat_dim)))
    centroids = centroids.astype(np.float32)
    # whole blocks are drawn (the range's first and last ones in part), so a row's value
    # never depends on where a range starts
    first_block = first // _NODE_BLOCK
    block_lo = first_block * _NODE_BLOCK
    block_hi = min(num_nodes, -(-end // _NODE_BLOCK) * _NODE_BLOCK)
    covered = np.empty((max(0, block_hi - block_lo), feat_dim), dtype=np.float32)
    for block, lo in enumerate(range(block_lo, block_hi, _NODE_BLOCK), start=first_block):
        rows = covered[lo - block_lo:lo - block_lo + _NODE_BLOCK]
        _stream(seed, _FEATURES, block).standard_normal(rows.shape, dtype=np.float32, out=rows)
        rows += centroids[labels[lo:lo + _NODE_BLOCK]]
    feat = covered if (first, end) == (block_lo, block_hi) else covered[first - block_lo:end - block_lo].copy()
    order = _stream(seed, _MASKS).permutation(num_nodes)
    bounds = np.minimum(np.round(np.cumsum((0.0,) + fractions) * num_nodes).astype(np.int64), num_nodes)
    ndata = {"feat": feat, "label": labels[first:end]}
    for name, lo, hi in zip(("train_mask", "val_mask", "test_mask"), bounds[:-1], bounds[1:]):
        mask = np.zeros(num_nodes, dtype=bool)
        mask[order[lo:hi]] = True
        ndata[name] = mask[first:end]
    return ndata


# ------------------------------------------------------------------------------------------- RMAT

def quadrant_tables(levels):
    """Tables turning one uniform 16-bit word into ``levels`` RMAT levels of src and dst bits."""
    outcomes = np.array(list(itertools.product(range(4), repeat=levels)), dtype=np.int64)
    exact = np.prod(np.asarray(RMAT_PROBS)[outcomes], axis=1) * 65536
    counts = np.floor(exact).astype(np.int64)
    # largest-remainder rounding keeps each outcome within 1/65536 of its probability
    counts[np.argsort(counts - exact, kind="stable")[:65536 - counts.sum()]] += 1
    weights = 1 << np.arange(levels - 1, -1, -1)
    src_bits = ((outcomes >> 1) * weights).sum(axis=1).astype(np.uint8)
    dst_bits = ((outcomes & 1) * weights).sum(axis=1).astype(np.uint8)
    return levels, np.repeat(src_bits, counts), np.repeat(dst_bits, counts)


def rmat_in_weight(num_nodes, scale):
    """Expected RMAT in-degree of each node (up to a constant), after the id scaling."""
    ratio = (RMAT_PROBS[1] + RMAT_PROBS[3]) / (RMAT_PROBS[0] + RMAT_PROBS[2])
    nodes = np.arange(num_nodes + 1, dtype=np.int64)
    first_raw = -(-(nodes << scale) // num_nodes)  # smallest raw id with floor(r * N / 2^s) == node
    weight = ratio ** np.bitwise_count(first_raw[:-1]).astype(np.float64)
    has_second = np.flatnonzero(first_raw[1:] - first_raw[:-1] == 2)
    weight[has_second] += ratio ** np.bitwise_count(first_raw[has_second] + 1).astype(np.float64)
    return weight


class ClassPeers:
    """Nodes of each class ordered by expected in-degree, to move an edge end into another class.

    A node at relative popularity rank q in its own class maps to the node at the same relative
    rank in the target class, so redirected edges still favour hubs and the tail stays heavy.
    """

    def __init__(self, labels, weight, num_classes):
        # narrow dtypes: these are gathered at random once per edge, so cache footprint is speed
        labels = labels.astype(np.min_scalar_type(-num_classes))
        by_popularity = np.argsort(-weight, kind="stable").astype(np.int32)
        self.members = by_popularity[np.argsort(labels[by_popularity], kind="stable")]
        self.size = np.bincount(labels, minlength=num_classes).astype(np.int64)
        self.start = np.concatenate(([0], np.cumsum(self.size)[:-1]))
        self.rank = np.empty(labels.shape[0], dtype=np.int32)
        self.rank[self.members] = np.arange(labels.shape[0]) - self.start[labels[self.members]]
        self.labels = labels

    def in_classes(self, nodes, target_class):
        """Local. The peer of each of ``nodes`` in class ``target_class`` (one per node; every
        target class must have members): the node at the same relative popularity rank."""
        target_rank = self.rank[nodes] * self.size[target_class] // self.size[self.labels[nodes]]
        return self.members[self.start[target_class] + target_rank]

    def move(self, nodes, sources):
        """Peers of ``nodes`` in the classes of ``sources``, never the source itself if avoidable."""
        target_class = self.labels[sources]
        target_size = self.size[target_class]
        peers = self.in_classes(nodes, target_class)
        # hub-to-hub edges are the most frequent, and a hub's peer in its own class is itself;
        # dropping those self loops would lose planted edges, so take the next-ranked peer
        clash = np.flatnonzero(peers == sources)
        target_rank = (self.rank[peers[clash]] + 1) % target_size[clash]
        peers[clash] = self.members[self.start[target_class[clash]] + target_rank]
        return peers


def _rmat_chunk_keys(blocks, spec):
    """Edge keys ``(src * N + dst) * 2 + is_inter`` of the given raw-edge blocks, plus counts.

    Returns (keys, non-loop edges drawn, intra-class non-loop edges drawn).
    """
    num_nodes, scale, homophily, word_tables, peers, perm, seed = spec
    size = len(blocks) * EDGE_BLOCK
    src = np.zeros(size, dtype=np.uint32)  # scale <= 31 bits
    dst = np.zeros(size, dtype=np.uint32)
    redirect = np.empty(size, dtype=bool)
    for i, block in enumerate(blocks):
        rng = _stream(seed, _EDGES, block)
        words = rng.integers(0, 1 << 64, size=len(word_tables) * EDGE_BLOCK // 4, dtype=np.uint64)
        words = words.view(np.uint16).reshape(len(word_tables), EDGE_BLOCK)
        part = slice(i * EDGE_BLOCK, (i + 1) * EDGE_BLOCK)
        block_src, block_dst = src[part], dst[part]
        for word, (levels, src_table, dst_table) in zip(words, word_tables):
            block_src <<= levels
            block_src |= src_table[word]
            block_dst <<= levels
            block_dst |= dst_table[word]
        redirect[part] = rng.random(EDGE_BLOCK) < homophily
    # floor(r * N / 2^s): scaling rather than folding keeps the RMAT skew over all N nodes
    src = (src.astype(np.int64) * num_nodes) >> scale
    dst = (dst.astype(np.int64) * num_nodes) >> scale
    moved = np.flatnonzero(redirect)
    dst[moved] = peers.move(dst[moved], src[moved])
    keep = src != dst
    src, dst = src[keep], dst[keep]
    is_inter = peers.labels[src] != peers.labels[dst]
    keys = perm[src]
    keys *= num_nodes
    keys += perm[dst]
    keys *= 2
    keys += is_inter
    return keys, keys.shape[0], keys.shape[0] - int(np.count_nonzero(is_inter))


def _sort_unique(values):
    """Sorted distinct values; sorts ``values`` in place (np.unique's hashing is slower here)."""
    values.sort()
    first_of_run = np.empty(values.shape[0], dtype=bool)
    first_of_run[:1] = True
    np.not_equal(values[1:], values[:-1], out=first_of_run[1:])
    return values[first_of_run]


class LocalDraw:
    """Local. How one process draws an RMAT graph: every raw-edge block, all keys kept here.

    The distributed generator (:class:`hpcgnn.prep.dist.generate.SpreadDraw`) has the same
    four methods over MPI; the rounds below are the same code for both, which is what makes
    the graph of a seed the same whatever the number of ranks.
    """

    def chunks(self, first, stop, chunk_blocks):
        """This process's raw-edge blocks of ``[first, stop)``, in ranges of at most
        ``chunk_blocks``; every process gets the same number of ranges (some maybe empty)."""
        return [range(lo, min(lo + chunk_blocks, stop)) for lo in range(first, stop, chunk_blocks)]

    def route(self, keys):
        """Keys to the process that keeps them (here: this one)."""
        return keys

    def total(self, *counts):
        """Sums over the processes."""
        return counts

    def kth_smallest(self, values, k):
        """The k-th smallest (1-based) of the values held by all processes; values are distinct."""
        return np.partition(values, k - 1)[k - 1]


def rmat_unique_keys(num_edges, chunk_edges, spec, draw, chunk_keys=None):
    """Local (collective over the ranks of ``draw``). Draw raw edges in rounds until both
    intra- and inter-class edges have enough unique keys.

    ``chunk_keys(blocks, spec)`` draws the keys of some raw-edge blocks of ``EDGE_BLOCK`` edges
    (default: the RMAT draw of :func:`rmat_setup`'s ``spec``); a typed generator passes its
    own draw of one relation (:mod:`hpcgnn.prep.generate_hetero`).

    Dedup would otherwise eat more intra-class edges (fewer candidate pairs, more collisions)
    and pull the edge homophily below what was drawn; keeping the drawn intra fraction exact
    among the kept edges avoids that. Returns (this process's sorted unique keys, intra-class
    edges to keep over all processes).
    """
    chunk_blocks = max(1, -(-chunk_edges // EDGE_BLOCK))
    unique = np.empty(0, dtype=np.int64)
    next_block, drawn, drawn_intra, total_unique = 0, 0, 0, 0
    new_blocks = -(-int(num_edges * 1.05 + 1024) // EDGE_BLOCK)
    for round_ in range(_TOPUP_ROUNDS):
        before, drawn_before = total_unique, drawn
        parts, round_drawn, round_intra = [unique], 0, 0
        del unique
        for blocks in draw.chunks(next_block, next_block + new_blocks, chunk_blocks):
            keys, count, intra = (chunk_keys or _rmat_chunk_keys)(blocks, spec)
            parts.append(draw.route(keys))
            round_drawn, round_intra = round_drawn + count, round_intra + intra
        next_block += new_blocks
        unique = _sort_unique(np.concatenate(parts))
        del parts
        local_inter = int(np.count_nonzero(_inter_flags(unique)))
        round_drawn, round_intra, total_unique, unique_inter = draw.total(
            round_drawn, round_intra, unique.shape[0], local_inter)
        drawn, drawn_intra = drawn + round_drawn, drawn_intra + round_intra
        unique_intra = total_unique - unique_inter
        keep_intra = round(num_edges * drawn_intra / max(drawn, 1))
        short_intra = keep_intra - unique_intra
        short_inter = num_edges - keep_intra - unique_inter
        if short_intra <= 0 and short_inter <= 0:
            return unique, keep_intra
        stalled = total_unique - before < _MIN_YIELD * (drawn - drawn_before)
        if total_unique >= num_edges and (stalled or round_ >= _STRATIFIED_ROUNDS):
            # dense graphs or many small classes may have fewer distinct same-class pairs within
            # reach than the drawn fraction asks; keep as close to it as the pairs allow
            return unique, min(max(keep_intra, num_edges - unique_inter), unique_intra)
        if stalled:
            break
        # the next draw is sized from the average unique yield so far, padded because the
        # marginal yield is lower; a hopeless request stops after a bounded number of rounds
        need_intra = short_intra / max(unique_intra, 1) * max(drawn_intra, 1)
        need_inter = short_inter / max(unique_inter, 1) * max(drawn - drawn_intra, 1)
        new_blocks = -(-int(1.5 * max(need_intra, need_inter) + 1024) // EDGE_BLOCK)
        new_blocks = min(new_blocks, -(-4 * num_edges // EDGE_BLOCK))
    raise InputError(None, "too many edges for an RMAT graph of this size: repeated edges dominate "
                     "(ask for fewer edges, lower homophily, or use sbm)", "num_edges", num_edges)


def _priorities(keys, seed):
    """A seeded bijective hash of each key (SplitMix64's finaliser): distinct keys get distinct,
    uniformly spread priorities, each a function of its key alone."""
    offset = np.uint64(_stream(seed, _SUBSET).integers(0, 1 << 63, dtype=np.int64))
    z = keys.view(np.uint64) + offset
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def select_keys(unique, keep_intra, num_edges, seed, draw):
    """Local (collective over the ranks of ``draw``). ``unique`` minus a seeded uniform subset,
    leaving ``keep_intra`` intra-class and ``num_edges - keep_intra`` inter-class keys over all
    processes: those of the smallest priorities in each group (:func:`_priorities`)."""
    is_inter = _inter_flags(unique)
    keep = np.zeros(unique.shape[0], dtype=bool)
    with np.errstate(over="ignore"):
        for group, count in ((~is_inter, keep_intra), (is_inter, num_edges - keep_intra)):
            members = np.flatnonzero(group)
            priority = _priorities(unique[members], seed)
            if count > 0:
                threshold = draw.kth_smallest(priority, count)
                keep[members[priority <= threshold]] = True
    return unique[keep]


def check_rmat(num_nodes, num_edges, num_classes, homophily, feat_dim, feat_signal, fractions, seed, chunk_edges):
    """Local. :func:`rmat_graph`'s parameters checked (one-line errors naming the parameter)."""
    num_nodes, num_classes, homophily, feat_dim, feat_signal, fractions = _check_common(
        num_nodes, num_classes, homophily, feat_dim, feat_signal, fractions, seed)
    num_edges = _check_int("num_edges", num_edges, 1)
    if num_edges > num_nodes * (num_nodes - 1):
        raise InputError(None, f"more than the {num_nodes * (num_nodes - 1):,} possible directed edges "
                         f"of {num_nodes:,} nodes without self loops", "num_edges", num_edges)
    chunk_edges = _check_int("chunk_edges", chunk_edges, 1)
    return num_nodes, num_edges, num_classes, homophily, feat_dim, feat_signal, fractions, chunk_edges


def rmat_setup(num_nodes, num_classes, homophily, seed):
    """Local. Every node's label and what drawing the edge keys needs (``spec``)."""
    labels = _stream(seed, _LABELS).integers(0, num_classes, size=num_nodes, dtype=np.int64)
    perm = _stream(seed, _PERM).permutation(num_nodes)  # generation id -> final id
    scale = max(0, math.ceil(math.log2(num_nodes)))
    word_tables = [quadrant_tables(2)] * (scale // 2) + [quadrant_tables(1)] * (scale % 2)
    peers = ClassPeers(labels[perm], rmat_in_weight(num_nodes, scale), num_classes)
    return labels, (num_nodes, scale, homophily, word_tables, peers, perm, seed)


def rmat_edges(num_nodes, num_edges, num_classes, homophily, seed, chunk_edges, draw):
    """Local (collective over the ranks of ``draw``). Every node's label, and the edges
    ``(src, dst)`` this process keeps, sorted by (src, dst); parameters already checked."""
    labels, spec = rmat_setup(num_nodes, num_classes, homophily, seed)
    unique, keep_intra = rmat_unique_keys(num_edges, chunk_edges, spec, draw)
    del spec
    pairs = select_keys(unique, keep_intra, num_edges, seed, draw)
    del unique
    pairs >>= 1
    src, dst = split_pairs(pairs, num_nodes)
    return labels, src, dst


def rmat_graph(num_nodes, num_edges, feat_dim=64, num_classes=10, homophily=0.7, feat_signal=0.15,
               fractions=(0.6, 0.2, 0.2), seed=0, chunk_edges=4_000_000) -> Graph:
    """Local. Power-law RMAT graph with planted classes, features and split masks.

    Edges follow RMAT (a, b, c, d = 0.57, 0.19, 0.19, 0.05) over ``2**ceil(log2 N)`` ids scaled
    down to N nodes. Every node gets a uniform random class; with probability ``homophily`` an
    edge's destination moves to the node of the source's class at the same relative popularity
    rank, so hubs stay hubs. Self loops and repeats are dropped and exactly ``num_edges`` unique
    edges are kept (a seeded subset of an over-sampled draw that keeps the drawn fraction of
    same-class edges), so the edge homophily is about ``h + (1 - h) / num_classes``; it falls
    short when distinct same-class pairs are scarce (dense graphs, many small classes).

    Parameters
    ----------
    num_nodes, num_edges : int
        Graph size; ``num_edges <= N * (N - 1)`` and ``num_nodes < 2**31``.
    feat_dim, num_classes : int
        Feature width and number of classes.
    homophily : float
        Probability in [0, 1] that an edge is planted inside the source's class.
    feat_signal : float
        Scale of the class centroids (``N(0, I)``) added to unit Gaussian noise. The default
        leaves features alone weakly predictive; a neighbour mean makes labels clearly learnable.
    fractions : (float, float, float)
        Train, val and test fractions of the nodes (a seeded permutation, disjoint masks).
    seed : int
        Everything is a deterministic function of the seed, independent of ``chunk_edges``.
    chunk_edges : int
        Raw edges generated per vectorised step; bounds the working memory (roughly 64 bytes each).

    Returns
    -------
    Graph
        ``src``/``dst`` int64 sorted by (src, dst); ``ndata``: feat, label, train/val/test_mask.
    """
    num_nodes, num_edges, num_classes, homophily, feat_dim, feat_signal, fractions, chunk_edges = check_rmat(
        num_nodes, num_edges, num_classes, homophily, feat_dim, feat_signal, fractions, seed, chunk_edges)
    labels, src, dst = rmat_edges(num_nodes, num_edges, num_classes, homophily, seed, chunk_edges, LocalDraw())
    ndata = node_fields(labels, num_classes, feat_dim, feat_signal, fractions, seed)
    return Graph(num_nodes, src, dst, ndata, name="rmat", source=f"<rmat seed={seed}>").validate()


def split_pairs(pairs, num_nodes, step=1 << 20):
    """Local. ``src * N + dst`` -> (src, dst), in place and in steps so no temporary edge array is made."""
    src = np.empty_like(pairs)
    for lo in range(0, pairs.shape[0], step):
        part, part_src = pairs[lo:lo + step], src[lo:lo + step]
        np.floor_divide(part, num_nodes, out=part_src)
        part -= part_src * num_nodes
    return src, pairs


def _inter_flags(keys):
    """Low bit of each key as booleans, without an int64 temporary."""
    return np.bitwise_and(keys, 1, out=np.empty(keys.shape[0], dtype=bool), casting="unsafe")


# -------------------------------------------------------------------------------------------- SBM

def _distinct_sample(rng, population, count):
    """Sorted ``count`` distinct integers drawn uniformly from ``[0, population)``.

    Memory is O(count) for sparse samples and at most 16 bytes per picked value for dense ones.
    """
    if 2 * count > population:
        excluded = np.zeros(population, dtype=bool)
        excluded[_distinct_sample(rng, population, population - count)] = True
        return np.flatnonzero(~excluded)
    if population <= 16 * count:
        # dense: a bitmap dedups each draw in O(draw) where re-sorting would cost O(count log count)
        chosen = np.zeros(population, dtype=bool)
        have = 0
        while have < count:
            draws = int((count - have) * population / (population - have)) + 16
            chosen[rng.integers(0, population, size=draws)] = True
            have = int(np.count_nonzero(chosen))
        picked = np.flatnonzero(chosen)
    else:
        picked = np.empty(0, dtype=np.int64)
        while picked.shape[0] < count:
            draw = rng.integers(0, population, size=int(1.1 * (count - picked.shape[0])) + 16)
            picked = _sort_unique(np.concatenate((picked, draw)))
    surplus = picked.shape[0] - count
    return np.delete(picked, rng.choice(picked.shape[0], surplus, replace=False)) if surplus else picked


def sbm_graph(num_nodes, num_classes=10, avg_degree=10.0, homophily=0.7, feat_dim=64, feat_signal=0.15,
              fractions=(0.6, 0.2, 0.2), seed=0) -> Graph:
    """Local. Stochastic block model graph: equal-size blocks are the classes.

    ``round(avg_degree * N)`` unique directed edges (no self loops): exactly
    ``round(homophily * E)`` of them inside blocks, the rest between blocks, each set a uniform
    sample of its possible pairs, so block pairs get edges in proportion to their size. Features,
    labels and masks follow the same scheme as :func:`rmat_graph`; ids are randomly permuted.

    Parameters
    ----------
    num_nodes, num_classes : int
        Graph size and number of blocks (block sizes differ by at most one).
    avg_degree : float
        Directed edges per node (the mean out-degree, also the mean in-degree).
    homophily : float
        Fraction of edges inside a block, which here equals the edge homophily of the labels.
    feat_dim, feat_signal, fractions, seed
        As in :func:`rmat_graph`.

    Returns
    -------
    Graph
        ``src``/``dst`` int64 sorted by (src, dst); ``ndata``: feat, label, train/val/test_mask.
    """
    num_nodes, num_classes, homophily, feat_dim, feat_signal, fractions = _check_common(
        num_nodes, num_classes, homophily, feat_dim, feat_signal, fractions, seed)
    avg_degree = _check_real("avg_degree", avg_degree, 0.0)
    num_edges = round(avg_degree * num_nodes)
    if not 1 <= num_edges <= num_nodes * (num_nodes - 1):
        raise InputError(None, f"gives {num_edges:,} edges; {num_nodes:,} nodes allow 1 to "
                         f"{num_nodes * (num_nodes - 1):,}", "avg_degree", avg_degree)
    sizes = np.full(num_classes, num_nodes // num_classes, dtype=np.int64)
    sizes[:num_nodes % num_classes] += 1
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    intra_pairs, inter_pairs = sizes * (sizes - 1), sizes * (num_nodes - sizes)
    num_intra = round(homophily * num_edges)
    if num_intra > intra_pairs.sum() or num_edges - num_intra > inter_pairs.sum():
        raise InputError(None, f"needs {num_intra:,} edges inside and {num_edges - num_intra:,} between "
                         f"blocks, but only {intra_pairs.sum():,} and {inter_pairs.sum():,} pairs exist",
                         "homophily", homophily)
    rng = _stream(seed, _SBM)
    src_parts, dst_parts = [], []
    for pairs_per_block, count, inside in ((intra_pairs, num_intra, True),
                                           (inter_pairs, num_edges - num_intra, False)):
        offsets = np.concatenate(([0], np.cumsum(pairs_per_block)))
        index = _distinct_sample(rng, int(offsets[-1]), count)
        block = np.searchsorted(offsets, index, side="right") - 1
        local, size, start = index - offsets[block], sizes[block], starts[block]
        targets = size - 1 if inside else num_nodes - size
        row, col = local // targets, local % targets
        # skip the source itself (inside) or the source's own block (between)
        col += (col >= row) if inside else size * (col >= start)
        src_parts.append(start + row)
        dst_parts.append(col + start if inside else col)
    perm = _stream(seed, _PERM).permutation(num_nodes)
    labels = np.empty(num_nodes, dtype=np.int64)
    labels[perm] = np.repeat(np.arange(num_classes), sizes)
    pairs = perm[np.concatenate(src_parts)] * num_nodes + perm[np.concatenate(dst_parts)]
    del src_parts, dst_parts
    pairs.sort()
    src, dst = split_pairs(pairs, num_nodes)
    ndata = node_fields(labels, num_classes, feat_dim, feat_signal, fractions, seed)
    return Graph(num_nodes, src, dst, ndata, name="sbm", source=f"<sbm seed={seed}>").validate()


def graph_summary(graph: Graph) -> dict:
    """Local. What ``hpcgnn generate`` reports of a graph: nodes, edges, edge homophily (the
    fraction of edges inside a class) and max degree (in plus out), as
    :func:`hpcgnn.prep.dist.generate.generate_rmat_file` returns them for a spread graph."""
    label = graph.ndata["label"]
    degree = np.bincount(graph.src, minlength=graph.num_nodes)
    degree += np.bincount(graph.dst, minlength=graph.num_nodes)
    return {"num_nodes": graph.num_nodes, "num_edges": graph.num_edges,
            "homophily": float(np.mean(label[graph.src] == label[graph.dst])), "max_degree": int(degree.max())}
