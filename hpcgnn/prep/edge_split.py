"""Held-out edge sets for link prediction, chosen once at partition time.

``hpcgnn partition --edge-split 0.85,0.05,0.1`` (train, validation, test fractions) or
``--edge-split dataset`` (the reader's own split, :attr:`Graph.link <hpcgnn.prep.graph.Graph>`,
e.g. an OGB link dataset's) holds validation and test edges out of the message-passing graph and
draws fixed evaluation negatives, so every run evaluates against the same corrupted edges.

Units. On a graph known to be symmetric (``Graph.symmetric``, set by ``--symmetrize``) a unit is
an undirected edge {u, v}: both directions go to the same split, and a held-out pair leaves the
graph in both directions; it is stored as one positive in a random orientation. Otherwise a unit
is a distinct directed pair (u, v), and repeats of a held-out pair leave with it. Self loops are
units that always stay in training. ``n_val = round(f_val * units)``, ``n_test`` likewise, drawn
from a seeded permutation of the non-loop units (stream ``edge_split`` of ``--split-seed``); the
other units train and stay in the graph with their edge fields. A fraction above 0 that rounds
to no edge, or a split that leaves no training unit, is refused ("graph too small to split").
With ``--edge-split dataset`` the reader's positives are used as given; any of them the graph
still holds is removed the same way (OGB's ``edge.csv`` holds none).

Negatives. For every validation and test positive (u, v): K negative pairs
(``--eval-negatives``, default :data:`DEFAULT_EVAL_NEGATIVES`) of the kind
``--eval-negatives-kind`` names (:data:`_NEGATIVE_KINDS`): ``corrupt`` (the default, OGB's
protocol) keeps the source, (u, n) with n uniform over all nodes; ``uniform`` draws both ends,
(m, n) (the graph auto-encoder's protocol: random pairs of unconnected nodes). A pair (a, b) is
rejected when a = b or when it is an edge of the full graph: the graph before the held-out
edges were removed plus the held-out edges (both directions on a symmetric graph).
Rejected draws are drawn again for up to :data:`NEGATIVE_ROUNDS` rounds; a draw still rejected
then is kept, so the array is always full: only a node adjacent to nearly every node can keep one
(meta.json counts them as ``negatives_kept_rejected``). The stream is ``eval_negatives`` of
``--split-seed`` (:func:`hpcgnn.runtime.rng.generator`). A reader's per-positive negatives are
used as given (``negatives: "dataset"``) unless ``--eval-negatives-kind uniform`` asks for
pairs (``dataset_negatives: "replaced"``); a reader's pool negatives (OGB ``edge_neg``, shared by
all positives) do not fit K per positive and are replaced by drawn ones (``dataset_negatives:
"pool"`` in meta.json).

On disk (:mod:`hpcgnn.format.ondisk`) each evaluation edge is stored by the part that owns its
destination, in the partitioned (new) ids: :class:`PartLinks`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from hpcgnn.format import ondisk
from hpcgnn.prep.graph import Graph
from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.rng import generator

DEFAULT_EVAL_NEGATIVES = 100
#: rounds of redrawing rejected negatives before a rejected draw is kept
NEGATIVE_ROUNDS = 10
#: negatives drawn per block, so the draw's temporaries stay a few hundred MiB on any graph
_NEGATIVE_BLOCK = 1 << 23
_FRACTION_TOLERANCE = 1e-6
#: ``--eval-negatives-kind``: which ends of a negative pair are drawn (see the module docstring)
_NEGATIVE_KINDS = ("corrupt", "uniform")
_EDGE_SPLIT_FORMAT = "expected 'dataset' or three fractions train,val,test (each >= 0, summing to 1, val + test > 0)"


@dataclass
class EvalEdges:
    """Local. One evaluation set: positives ``src[i] -> dst[i]`` (int64 node ids) and ``neg``
    [n, K]: the destinations of positive i's negatives; None before any are drawn, -1 marking an
    entry still to draw. ``neg_src`` [n, K] holds their sources for ``uniform`` pairs; None for
    ``corrupt`` ones, whose source is ``src[i]``."""

    src: np.ndarray
    dst: np.ndarray
    neg: np.ndarray | None = None
    neg_src: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.src.shape[0])

    def select(self, keep) -> EvalEdges:
        """Local. The positives ``keep`` selects (a mask or indices), with their negatives."""
        return EvalEdges(self.src[keep], self.dst[keep], *(None if a is None else a[keep]
                                                           for a in (self.neg, self.neg_src)))


@dataclass
class LinkSplit:
    """Local. The held-out edge sets of a graph, in its node ids (see the module docstring).

    Attributes
    ----------
    val, test : EvalEdges
    split : list of float or str
        ``[f_train, f_val, f_test]``, or ``"dataset"`` for a reader's split.
    negatives : str
        ``"uniform"`` (drawn here) or ``"dataset"`` (the reader's per-positive negatives).
    negatives_kind : str
        ``"corrupt"`` (negatives share the positive's source) or ``"uniform"`` (both ends drawn).
    num_train : int or None
        Training units left in the message-passing graph; set by :func:`hold_out_edges`.
    symmetric : bool
        Units are undirected pairs (the graph was symmetric when the edges were held out).
    seed : int
        The ``--split-seed`` of the split and the negatives.
    eval_negatives : int or None
        K, negatives per positive.
    notes : dict
        Extra ``meta.json`` ``link`` keys: ``split_scheme`` (a reader's), ``dataset_negatives``
        (``"pool"``: the reader's pool negatives were replaced; ``"partial"``: only one set had
        per-positive ones, so both were drawn), ``positives_dropped`` and ``negatives_redrawn``
        (by ``--largest-component``), ``negatives_kept_rejected``.
    """

    val: EvalEdges
    test: EvalEdges
    split: object = "dataset"
    negatives: str = "uniform"
    negatives_kind: str = "corrupt"
    num_train: int | None = None
    symmetric: bool = False
    seed: int = 0
    eval_negatives: int | None = None
    notes: dict = field(default_factory=dict)

    def sets(self) -> dict:
        """Local. ``{"val": EvalEdges, "test": EvalEdges}``."""
        return {"val": self.val, "test": self.test}

    def validate(self, where, num_nodes) -> LinkSplit:
        """Local. Check every id is in ``[0, num_nodes)`` (negatives may hold -1: still to draw)
        and each negatives array has one row per positive; InputError naming the set."""
        for name, edges in self.sets().items():
            for part, ids in (("src", edges.src), ("dst", edges.dst), ("neg", edges.neg), ("neg_src", edges.neg_src)):
                if ids is None or ids.size == 0:
                    continue
                low = -1 if part.startswith("neg") else 0
                if int(ids.min()) < low or int(ids.max()) >= num_nodes:
                    bad = int(ids.min()) if int(ids.min()) < low else int(ids.max())
                    raise InputError(where, f"node id out of range [0, {num_nodes})", f"{name}_{part}", bad)
            if edges.dst.shape != edges.src.shape or (edges.neg is not None and (
                    edges.neg.ndim != 2 or edges.neg.shape[0] != len(edges))):
                raise InputError(where, "src, dst and neg need one row per positive", f"{name}_dst",
                                 [len(edges), edges.dst.shape[0]])
        return self

    def renumber(self, new_id) -> LinkSplit:
        """Local. The split after the nodes were numbered anew: ``new_id[old]`` is a node's new id,
        -1 for a dropped node. A positive with a dropped end is dropped; a negative naming a dropped
        node becomes -1, drawn again by :func:`hold_out_edges`."""
        sets, dropped = {}, 0
        for name, edges in self.sets().items():
            keep = (new_id[edges.src] >= 0) & (new_id[edges.dst] >= 0)
            dropped += int((~keep).sum())
            kept = edges.select(keep)
            neg, neg_src = (None if a is None else new_id[a].astype(np.int64) for a in (kept.neg, kept.neg_src))
            if neg_src is not None:  # a pair with a dropped end is drawn again whole
                neg[neg_src < 0] = -1
                neg_src[neg < 0] = -1
            sets[name] = EvalEdges(new_id[kept.src].astype(np.int64), new_id[kept.dst].astype(np.int64), neg, neg_src)
        notes = dict(self.notes)
        if dropped:
            notes["positives_dropped"] = notes.get("positives_dropped", 0) + dropped
        return dataclasses.replace(self, notes=notes, **sets)

    def meta(self) -> dict:
        """Local. The ``link`` object of ``meta.json`` (see :mod:`hpcgnn.format.ondisk`)."""
        split = self.split if isinstance(self.split, str) else [float(x) for x in self.split]
        entry = {"symmetric": bool(self.symmetric), "split": split, "seed": int(self.seed),
                 "eval_negatives": int(self.eval_negatives), "negatives": self.negatives,
                 "negatives_kind": self.negatives_kind,
                 "num_train": int(self.num_train), "num_val": len(self.val), "num_test": len(self.test)}
        entry.update(self.notes)
        return entry


def parse_edge_split(text, where=None):
    """Local. ``--edge-split``: ``"dataset"``, or ``"T,V,E"`` as a tuple of three fractions.

    Each fraction is >= 0, they sum to 1 within :data:`_FRACTION_TOLERANCE` and ``V + E > 0``;
    anything else is a one-line InputError naming ``--edge-split`` and the value.
    """
    text = str(text).strip()
    if text == "dataset":
        return text
    try:
        fractions = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise InputError(where, _EDGE_SPLIT_FORMAT, "--edge-split", text) from None
    if len(fractions) != 3:
        raise InputError(where, f"{_EDGE_SPLIT_FORMAT}; got {len(fractions)} value(s)", "--edge-split", text)
    if not all(np.isfinite(fractions)) or min(fractions) < 0:
        raise InputError(where, "fractions must be finite and >= 0", "--edge-split", text)
    if abs(sum(fractions) - 1) > _FRACTION_TOLERANCE:
        raise InputError(where, f"fractions must sum to 1 (they sum to {sum(fractions):g})", "--edge-split", text)
    if fractions[1] + fractions[2] <= 0:
        raise InputError(where, "val + test must be above 0: nothing would be held out", "--edge-split", text)
    return fractions


def _parse_eval_negatives(text, where=None) -> int:
    """Local. ``--eval-negatives K``: an integer >= 1, else a one-line InputError."""
    try:
        value = int(text)
    except (TypeError, ValueError):
        value = 0
    if value < 1:
        raise InputError(where, "must be an integer >= 1 (negatives per evaluation edge)", "--eval-negatives", text)
    return value


def parse_negatives_kind(text, where=None) -> str:
    """Local. ``--eval-negatives-kind``: one of :data:`_NEGATIVE_KINDS`, else a one-line InputError."""
    if text not in _NEGATIVE_KINDS:
        raise InputError(where, f"must be one of {', '.join(_NEGATIVE_KINDS)}", "--eval-negatives-kind", text)
    return text


def unit_keys(src, dst, num_nodes, symmetric) -> np.ndarray:
    """Local. The int64 key ``u * num_nodes + v`` of each edge's unit: (u, v) itself, or on a
    symmetric graph the pair with ``u = min``, ``v = max``, which both directions share."""
    src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    if symmetric:
        src, dst = np.minimum(src, dst), np.maximum(src, dst)
    return src * np.int64(num_nodes) + dst


def _sorted_unique(keys) -> np.ndarray:
    """Local. The distinct values of an int64 array, ascending (``np.unique`` by a sort: numpy 2's
    hash-based ``np.unique`` took 5x longer on 10 million keys)."""
    keys = np.sort(keys)
    if keys.shape[0] < 2:
        return keys
    first = np.empty(keys.shape[0], dtype=bool)
    first[0] = True
    np.not_equal(keys[1:], keys[:-1], out=first[1:])
    return keys[first]


def _is_member(sorted_keys, keys) -> np.ndarray:
    """Local. Whether each of ``keys`` is in ``sorted_keys`` (ascending int64), by binary search."""
    if sorted_keys.shape[0] == 0:
        return np.zeros(np.shape(keys), dtype=bool)
    slot = np.searchsorted(sorted_keys, keys)
    np.minimum(slot, sorted_keys.shape[0] - 1, out=slot)
    return sorted_keys[slot] == keys


def _choose_held_out(units, num_nodes, fractions, seed, symmetric, where=None) -> LinkSplit:
    """Local. Draw the validation and test units of a random split (no negatives yet).

    Parameters
    ----------
    units : int64 array
        Every unit's key, sorted and distinct (:func:`_sorted_unique` of the graph's :func:`unit_keys`).
    num_nodes : int
    fractions : tuple of float
        ``(f_train, f_val, f_test)`` from :func:`parse_edge_split`.
    seed : int
    symmetric : bool
        A held-out pair is then stored in a random orientation.
    where : str, optional
        The input, for the error message.

    Raises
    ------
    InputError
        "graph too small to split" when a fraction above 0 gets no unit, no training unit is
        left, or there are fewer non-loop units than held-out ones.
    """
    n_val, n_test = (int(round(f * units.shape[0])) for f in fractions[1:])
    eligible = units[units // num_nodes != units % num_nodes]  # self loops always train
    if ((fractions[1] > 0 and n_val == 0) or (fractions[2] > 0 and n_test == 0)
            or units.shape[0] - n_val - n_test < 1 or n_val + n_test > eligible.shape[0]):
        raise InputError(where, f"graph too small to split: {units.shape[0]:,} edge units ({eligible.shape[0]:,} "
                         f"not self loops) give {n_val} validation and {n_test} test edges",
                         "--edge-split", ",".join(f"{f:g}" for f in fractions))
    rng = generator(seed, "edge_split")
    chosen = eligible[rng.permutation(eligible.shape[0])[:n_val + n_test]]
    flip = rng.random(chosen.shape[0]) < 0.5 if symmetric else np.zeros(chosen.shape[0], dtype=bool)
    sets = {}
    for name, keys, turn in (("val", chosen[:n_val], flip[:n_val]), ("test", chosen[n_val:], flip[n_val:])):
        order = np.argsort(keys)  # in (u, v) key order, so a part's arrays run in id order
        u, v = keys[order] // num_nodes, keys[order] % num_nodes
        turn = turn[order]
        sets[name] = EvalEdges(np.where(turn, v, u), np.where(turn, u, v))
    return LinkSplit(sets["val"], sets["test"], split=list(fractions), symmetric=symmetric, seed=seed)


def _draw_negatives(src, neg, num_nodes, edge_keys, rng, rounds=NEGATIVE_ROUNDS, neg_src=None) -> int:
    """Local. Fill every -1 of ``neg`` [n, K] (in place) with a uniform node n != ``src[i]``
    such that ``src[i] * num_nodes + n`` is not in ``edge_keys`` (sorted int64). With
    ``neg_src`` [n, K] (uniform pairs) the source of each such entry is drawn too, into
    ``neg_src``, and stands for ``src[i]``.

    Rejected draws are drawn again for up to ``rounds`` rounds, then kept. Entries are drawn in
    blocks of :data:`_NEGATIVE_BLOCK`, in order, so the result depends only on the inputs and
    ``rng``'s state. Returns the number of entries kept although rejected.
    """
    flat = neg.reshape(-1)  # a view: neg is C-contiguous
    flat_src = None if neg_src is None else neg_src.reshape(-1)
    k = neg.shape[1]
    kept_rejected = 0
    for begin in range(0, flat.shape[0], _NEGATIVE_BLOCK):
        holes = begin + np.flatnonzero(flat[begin:begin + _NEGATIVE_BLOCK] < 0)
        for _ in range(rounds):
            if holes.shape[0] == 0:
                break
            if flat_src is None:
                u = src[holes // k]
            else:
                u = rng.integers(0, num_nodes, holes.shape[0], dtype=np.int64)
                flat_src[holes] = u
            draw = rng.integers(0, num_nodes, holes.shape[0], dtype=np.int64)
            flat[holes] = draw
            bad = (draw == u) | _is_member(edge_keys, u * np.int64(num_nodes) + draw)
            holes = holes[bad]
        kept_rejected += int(holes.shape[0])
    return kept_rejected


def hold_out_edges(graph: Graph, spec, eval_negatives=DEFAULT_EVAL_NEGATIVES, seed=0, where=None,
                   negatives_kind="corrupt") -> Graph:
    """Local. Hold validation and test edges out of ``graph`` and draw their negatives.

    Parameters
    ----------
    graph : Graph
        The cleaned-up graph (after ``transform.prepare``). ``graph.symmetric`` chooses the unit.
    spec : tuple of float or "dataset"
        From :func:`parse_edge_split`: fractions of a seeded random split of the graph's edges
        (a reader's own split is then ignored), or ``"dataset"``: ``graph.link`` (the reader's
        split) as given.
    eval_negatives : int
        K, negatives per positive, when they are drawn here.
    seed : int
        ``--split-seed``: the split (stream ``edge_split``) and the negatives (``eval_negatives``).
    where : str, optional
        The input, for error messages.
    negatives_kind : str
        ``"corrupt"`` or ``"uniform"`` (:data:`_NEGATIVE_KINDS`): which ends of a negative are drawn.

    Returns
    -------
    Graph
        ``graph`` without the held-out edges (edge fields follow their edges), its ``link`` the
        completed :class:`LinkSplit`.

    Raises
    ------
    InputError
        ``dataset`` without a split of the reader's, a split too small (see
        :func:`_choose_held_out`), or one that leaves no training unit.
    """
    if seed < 0:  # the seed keys a SeedSequence, which takes no negative entropy
        raise InputError(where, "must be >= 0", "--split-seed", seed)
    n = graph.num_nodes
    symmetric = bool(graph.symmetric)
    edge_units = unit_keys(graph.src, graph.dst, n, symmetric)
    units = _sorted_unique(edge_units)
    if spec == "dataset":
        if graph.link is None:
            raise InputError(where, "the input has no edge split of its own (an OGB link dataset's "
                             "split/<scheme>/*.pt); give fractions, e.g. 0.85,0.05,0.1", "--edge-split", spec)
        given = graph.link  # copied: negatives are completed in place below, the reader's stay as read
        link = dataclasses.replace(given, val=dataclasses.replace(given.val), test=dataclasses.replace(given.test),
                                   split="dataset", symmetric=symmetric, seed=seed, notes=dict(given.notes))
    else:
        link = _choose_held_out(units, n, spec, seed, symmetric, where)
    positives = [link.val, link.test]
    held = _sorted_unique(np.concatenate([unit_keys(e.src, e.dst, n, symmetric) for e in positives]))
    held_in_graph = int(_is_member(held, units).sum())
    link.num_train = int(units.shape[0]) - held_in_graph
    if link.num_train < 1:
        raise InputError(where, "graph too small to split: no training edge would be left", "--edge-split",
                         spec if isinstance(spec, str) else ",".join(f"{f:g}" for f in spec))
    edge_keys = _full_graph_keys(graph, positives, symmetric)
    keep = np.flatnonzero(~_is_member(held, edge_units)) if held_in_graph else None
    del edge_units, units, held
    _complete_negatives(link, n, edge_keys, eval_negatives, seed, where, parse_negatives_kind(negatives_kind, where))
    del edge_keys
    if keep is None:
        return dataclasses.replace(graph, link=link)
    return dataclasses.replace(graph, src=graph.src[keep], dst=graph.dst[keep],
                               edata={k: v[keep] for k, v in graph.edata.items()}, link=link)


def _full_graph_keys(graph, positives, symmetric) -> np.ndarray:
    """Sorted distinct directed keys of the graph before removal plus every held-out positive
    (both directions on a symmetric graph): what a negative may not be."""
    n = np.int64(graph.num_nodes)
    pieces = [graph.src.astype(np.int64) * n + graph.dst]
    for edges in positives:
        pieces.append(edges.src * n + edges.dst)
        if symmetric:
            pieces.append(edges.dst * n + edges.src)
    return _sorted_unique(np.concatenate(pieces))


def _complete_negatives(link, num_nodes, edge_keys, eval_negatives, seed, where, kind):
    """Give every positive of ``link`` its K negatives of ``kind``: the reader's where given (holes
    drawn), else ``eval_negatives`` drawn ones."""
    given = [e.neg for e in (link.val, link.test) if e.neg is not None]
    if given and (len(given) < 2 or kind == "uniform"):  # drawn alike for both sets, as pairs if asked
        link.val.neg = link.test.neg = None
        link.notes.setdefault("dataset_negatives", "partial" if len(given) < 2 else "replaced")
        given = []
    link.negatives_kind = kind
    if given:
        widths = {g.shape[1] for g in given}
        if len(widths) > 1:
            raise InputError(where, "validation and test negatives differ in count per positive",
                             "target_node_neg", sorted(widths))
        link.eval_negatives, link.negatives = widths.pop(), "dataset"
    else:
        link.eval_negatives, link.negatives = int(eval_negatives), "uniform"
    rng = generator(seed, "eval_negatives")
    redrawn = kept = 0
    for edges in (link.val, link.test):
        if edges.neg is None:
            edges.neg = np.full((len(edges), link.eval_negatives), -1, dtype=np.int64)
        else:
            edges.neg = np.ascontiguousarray(edges.neg, dtype=np.int64)
            redrawn += int((edges.neg < 0).sum())
        if kind == "uniform" and edges.neg_src is None:
            edges.neg_src = np.full_like(edges.neg, -1)
        elif kind == "corrupt":
            edges.neg_src = None
        kept += _draw_negatives(edges.src, edges.neg, num_nodes, edge_keys, rng, neg_src=edges.neg_src)
    if redrawn:
        link.notes["negatives_redrawn"] = redrawn
    if kept:
        link.notes["negatives_kept_rejected"] = kept


class PartLinks:
    """Local. The evaluation sets in the partitioned ids, grouped by the part that owns each
    positive's destination (global order kept inside a part).

    Parameters
    ----------
    link : LinkSplit
        Completed by :func:`hold_out_edges`.
    new_id : array
        The partitioned id of every node (``Relabeling.new_id``).
    node_starts : array
        ``num_parts + 1`` starts: part p owns new ids ``[node_starts[p], node_starts[p+1])``.
    """

    def __init__(self, link: LinkSplit, new_id, node_starts):
        self.link = link
        self.sets = {}
        num_parts = len(node_starts) - 1
        for name, edges in link.sets().items():
            src, dst = new_id[edges.src].astype(np.int64), new_id[edges.dst].astype(np.int64)
            owner = np.searchsorted(node_starts, dst, side="right") - 1
            order = np.argsort(owner, kind="stable")
            bounds = np.searchsorted(owner[order], np.arange(num_parts + 1))
            arrays = {"src": src[order], "dst": dst[order], "neg": edges.neg, "neg_src": edges.neg_src}
            self.sets[name] = ({key: new_id[a[order]].astype(np.int64, copy=False) if key.startswith("neg") else a
                                for key, a in arrays.items() if a is not None}, bounds)

    def part_arrays(self, part_id) -> dict:
        """Local. Part ``part_id``'s datasets: ``link_<set>_src``/``_dst`` int64 [n_p] and
        ``link_<set>_neg`` (and for uniform pairs ``link_<set>_neg_src``) int64 [n_p, K], new
        global ids."""
        out = {}
        for name, (arrays, bounds) in self.sets.items():
            rows = slice(bounds[part_id], bounds[part_id + 1])
            out.update({f"{ondisk.LINK_PREFIX}{name}_{key}": np.ascontiguousarray(a[rows])
                        for key, a in arrays.items()})
        return out
