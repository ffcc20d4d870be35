"""Samplers by name: what ``--sampler NAME`` builds, its options and what it needs of the run.

A sampler is a module that defines the sampler class and ends with one :func:`register_sampler`
call; its options dataclass (fields made with :func:`hpcgnn.runtime.options.option`) becomes its
flags and config keys, and nothing else in the package names it::

    register_sampler(SamplerSpec("mine", MyOptions, build=lambda graph, options, run: MySampler(...),
                                 summary="what a batch is"))

Options that several samplers declare under one name (a walk length) are one flag. A flag of a
sampler other than the run's, set away from its default, is refused, never silently ignored.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hpcgnn.runtime.options import declared
from hpcgnn.runtime.registry import Registry


@dataclass(frozen=True)
class SamplerRun:
    """Local. What a sampler is built for besides its options: the model's depth, the run's seed,
    and whether the model's input layer needs its nodes' in-degrees (GCN's normalisation)."""

    layers: int
    seed: int
    input_degrees: bool = False


@dataclass(frozen=True)
class SamplerSpec:
    """Local. One ``--sampler`` choice.

    Attributes
    ----------
    name : str
        The ``--sampler`` value.
    options : type
        Its frozen options dataclass (may be shared with other samplers); ``None``: no options.
    build : callable
        ``build(graph, options, run: SamplerRun) -> Sampler`` (collective where the sampler's
        construction is, e.g. Cluster-GCN's METIS on each rank's part).
    summary : str
        One sentence for ``--sampler``'s help.
    layers : callable, optional
        ``layers(options) -> int``: the model depth its options imply (one fanout per layer); with
        ``layers_flag`` the option that a different ``--layers`` contradicts. ``None``: the depth
        is ``--layers`` (2 when not given).
    requires : tuple
        ``(setting, value, why)`` triples: the run's other settings it needs (refused otherwise).
    subgraph : bool
        Batches are subgraphs of the rank's part that the sampler draws (``sampler.loader_seeds()``
        gives the loader's seeds and seeds per batch), not batches of training nodes.
    history : bool
        Keeps every node's historical activations (VR-GCN's control variate).
    inference : callable, optional
        ``inference(options, seed) -> Sampler``: the one-layer neighbourhood full-graph inference
        aggregates over; ``None``: every in-neighbour.
    describe : callable, optional
        ``describe(options) -> str``: the start line's words for the sampler (a built sampler's
        own ``describe()`` wins).
    """

    name: str
    options: type | None
    build: Callable
    summary: str
    layers: Callable | None = None
    layers_flag: str | None = None
    requires: tuple = ()
    subgraph: bool = False
    history: bool = False
    inference: Callable | None = None
    describe: Callable | None = None


#: the value of a ``requires`` entry meaning "left at its default"
AT_DEFAULT = "(its default)"
#: what samplers whose blocks are weighted means need of the model
WEIGHTED_MEAN = (("model", "sage", "its blocks are weighted means: GraphSAGE with the mean aggregator"),
                 ("aggregator", "mean", "its blocks are weighted means: GraphSAGE with the mean aggregator"))
#: what samplers whose batches are subgraphs of a rank's part need of the run
SUBGRAPH_BATCHES = tuple((setting, value, "a batch is a subgraph of the rank's part, for node tasks")
                         for setting, value in (("batch_size", AT_DEFAULT), ("cache_mb", AT_DEFAULT), ("task", "node")))

#: name -> SamplerSpec, in registration order (the order of ``--sampler``'s choices)
SAMPLERS = Registry("sampler")


def register_sampler(spec: SamplerSpec) -> SamplerSpec:
    """Local. Make ``spec`` available as ``--sampler spec.name``."""
    return SAMPLERS.add(spec.name, spec)


def sampler_spec(name) -> SamplerSpec:
    """Local. The registered sampler ``name`` (KeyError naming the choices if none)."""
    return SAMPLERS.named(name)


def option_owners() -> dict:
    """Local. ``option name -> (options class, [sampler names])``: each sampler option and the
    samplers that declare it (the first declaration gives its flag's default and domain)."""
    owners = {}
    for spec in SAMPLERS.values():
        if spec.options is None:
            continue
        for f, _ in declared(spec.options):
            owners.setdefault(f.name, (spec.options, []))[1].append(spec.name)
    return owners
