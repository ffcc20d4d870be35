"""Multi-layer neighbour sampling of a typed graph, with a fanout per relation and layer.

Each hop picks up to ``fanout[r]`` in-neighbours of every node along every relation ``r``
(:func:`~hpcgnn.graph.typed_sampling.sample_neighbors_by_relation`), so a node whose in-edges
span more relations than the fanout is still sampled along each of them. The blocks are those of
:class:`~hpcgnn.sampling.neighbor.NeighborSampler` (the same relabel kernel, seeds first) plus
``Block.etype``: the relation of every sampled edge, each destination's edges grouped by relation
ascending. On a graph of one relation the blocks equal the neighbour sampler's bit for bit.

``--fanouts 15,10,5`` is every relation's fanout per layer; ``--relation-fanouts`` (a config key
like every flag) overrides it for relations named in it::

    relation_fanouts = "cites=5,10;writes=all"

one fanout per layer (input layer first, as ``--fanouts``), or one for every layer; ``all`` (-1)
takes every in-edge of the relation, 0 none.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hpcgnn import _sample
from hpcgnn.format.schema import NAME_PATTERN, Schema
from hpcgnn.graph.typed_sampling import sample_neighbors_by_relation
from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.flags import MAX_COUNT, MAX_LAYERS
from hpcgnn.runtime.options import option
from hpcgnn.runtime.rng import derive_seed
from hpcgnn.sampling.block import Block, MiniBatch
from hpcgnn.sampling.neighbor import NeighborOptions
from hpcgnn.sampling.registry import SamplerSpec, register_sampler

FLAG = "--relation-fanouts"


class RelationalSampler:
    """Local. Sample ``fanouts[l][r]`` in-neighbours per node along each relation ``r`` for each layer ``l``.

    Parameters
    ----------
    fanouts : sequence
        One entry per layer, DGL's order (``fanouts[-1]`` is sampled from the seeds): an int for
        every relation, or a sequence with one fanout per relation id; -1 takes every in-edge of
        a relation, 0 none.
    replace : bool
        Sample with replacement.
    seed : int
        Base seed; :meth:`sample` also takes a per-batch ``seed`` so batches differ.
    input_degrees : bool
        Also read the graph in-degree of every input node (``MiniBatch.input_degree``).
    """

    def __init__(self, fanouts, replace=False, seed=0, input_degrees=False):
        self.fanouts = [int(f) if np.ndim(f) == 0 else np.ascontiguousarray(f, dtype=np.int64) for f in fanouts]
        if not self.fanouts or any(np.any(np.asarray(f) < -1) for f in self.fanouts):
            raise ValueError(f"fanouts must be >= 0 or -1, got {fanouts}")
        self.replace = bool(replace)
        self.seed = int(seed)
        self.input_degrees = bool(input_degrees)

    def sample(self, graph, seed_gids, seed=None) -> MiniBatch:
        """Local. Sample the blocks of ``seed_gids`` (unique global ids) from ``graph``."""
        seeds = np.ascontiguousarray(seed_gids, dtype=np.int64).reshape(-1)  # repeats: relabel raises ValueError
        base = self.seed if seed is None else int(seed)
        nodes, blocks = seeds, []
        for hop, fanout in enumerate(reversed(self.fanouts)):
            picked, etype = sample_neighbors_by_relation(graph, nodes, fanout, self.replace,
                                                         derive_seed(base, "hop", hop))
            next_nodes, src_pos = _sample.relabel(nodes, picked.src)
            indptr = np.zeros(nodes.shape[0] + 1, dtype=np.int64)
            np.cumsum(picked.counts, out=indptr[1:])
            blocks.append(Block(int(next_nodes.shape[0]), int(nodes.shape[0]), indptr, src_pos, picked.eids,
                                picked.degree, etype=etype))
            nodes = next_nodes
        blocks.reverse()
        input_degree = graph.in_degrees(nodes) if self.input_degrees else None
        return MiniBatch(seed_gids=seeds, input_gids=nodes, blocks=blocks, input_degree=input_degree)


def _relation_fanout(text, value):
    word = text.strip()
    if word == "all":
        return -1
    try:
        fanout = int(word)
    except ValueError:
        fanout = None
    if fanout is None or fanout < -1 or fanout > MAX_COUNT:
        raise InputError(None, f"a relation's fanouts are integers from 0 to {MAX_COUNT}, or all (-1)", FLAG, value)
    return fanout


def parse_relation_fanouts(text) -> tuple:
    """Local. ``--relation-fanouts``: ``"REL=F1,F2,...;REL=F;..."`` as ``((relation, (fanouts...)), ...)``
    in the order given, else a one-line InputError naming the flag."""
    text = str(text).strip()
    if not text:
        return ()
    parsed, seen = [], set()
    for entry in text.split(";"):
        name, sep, values = entry.partition("=")
        name = name.strip()
        if not sep or not NAME_PATTERN.fullmatch(name):
            raise InputError(None, "must be RELATION=F1,F2,... entries separated by ';' (relation names as the "
                             "dataset's schema gives them)", FLAG, entry.strip() or text)
        if name in seen:
            raise InputError(None, "names a relation twice", FLAG, name)
        seen.add(name)
        fanouts = tuple(_relation_fanout(v, entry.strip()) for v in values.split(","))
        if len(fanouts) > MAX_LAYERS:
            raise InputError(None, f"at most {MAX_LAYERS} fanouts per relation", FLAG, entry.strip())
        parsed.append((name, fanouts))
    return tuple(parsed)


def check_relation_fanouts(text) -> str:
    """Local. ``--relation-fanouts``'s value checked (a one-line InputError otherwise), kept as its
    text so that the config stores and restores it as given."""
    parse_relation_fanouts(text)
    return str(text).strip()


def layer_fanouts(schema: Schema, fanouts, relation_fanouts) -> list:
    """Local. Per layer (input layer first), the int64 fanout of every relation of ``schema``:
    ``fanouts[l]`` for every relation, except those ``relation_fanouts`` names (a
    :func:`parse_relation_fanouts` result, or its text); an unknown relation name is a one-line
    InputError naming the flag and the dataset's relations."""
    if isinstance(relation_fanouts, str):
        relation_fanouts = parse_relation_fanouts(relation_fanouts)
    layers = [np.full(schema.num_relations, int(f), dtype=np.int64) for f in fanouts]
    names = schema.relation_names
    for name, values in relation_fanouts:
        if name not in names:
            raise InputError(None, f"the dataset has no relation {name!r} (its relations are {', '.join(names)})",
                             FLAG, name)
        _check_layer_count(name, values, len(layers))
        for layer, value in zip(layers, values if len(values) > 1 else values * len(layers)):
            layer[names.index(name)] = value
    return layers


def _check_layer_count(name, values, num_layers):
    if len(values) not in (1, num_layers):
        shown = ",".join("all" if v == -1 else str(v) for v in values)
        raise InputError(None, f"needs one fanout per layer ({num_layers}, as --fanouts) or one for every layer",
                         FLAG, f"{name}={shown}")


@dataclass(frozen=True)
class RelationalOptions(NeighborOptions):
    """Local. ``--sampler relational``: in-neighbours per layer (``--fanouts``) and relation."""

    relation_fanouts: str = option("", "per-relation fanouts by name, replacing --fanouts for the relations named: "
                                   "'cites=5,10;writes=all' (one fanout per layer, input layer first, or one for "
                                   "every layer; all = every in-edge, 0 = none)", type=check_relation_fanouts,
                                   metavar="REL=F1,F2;...")

    def __post_init__(self):
        for name, values in parse_relation_fanouts(self.relation_fanouts):
            _check_layer_count(name, values, len(self.fanouts))


def _graph_schema(graph) -> Schema:
    schema = getattr(graph, "schema", None)
    return schema if schema is not None else Schema.homogeneous()


def _build(graph, options, run):
    fanouts = layer_fanouts(_graph_schema(graph), options.fanouts, options.relation_fanouts)
    return RelationalSampler(fanouts, seed=run.seed, input_degrees=run.input_degrees)


def _inference(options, seed):
    """Every in-edge of every relation, with its relation id."""
    return RelationalSampler([-1], seed=derive_seed(seed, "inference"))


def _describe(options):
    extra = f", per relation {options.relation_fanouts}" if options.relation_fanouts else ""
    return f"fanouts {list(options.fanouts)}{extra}"


register_sampler(SamplerSpec(
    "relational", RelationalOptions, build=_build,
    summary="--fanouts neighbours per node, layer and relation of a typed graph (--relation-fanouts by name); "
            "blocks carry each edge's relation",
    layers=lambda options: len(options.fanouts), layers_flag="--fanouts",
    inference=_inference, describe=_describe))
