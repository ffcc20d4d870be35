"""What a sampler produces: ``Block`` (one sampled layer) and ``MiniBatch`` (the blocks of a batch
of seeds plus, once loaded, their features and labels), and the ``Sampler`` protocol."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np


@dataclass
class Block:
    """Local. One sampled layer as a bipartite graph, CSR over its destination nodes.

    The in-edges of destination ``i`` are ``indptr[i]:indptr[i+1]``; ``src_pos`` indexes the
    block's source node list (whose first ``num_dst`` entries are the destinations
    themselves), ``eids`` are the global edge ids of the sampled edges.
    """

    num_src: int
    num_dst: int
    indptr: np.ndarray
    src_pos: np.ndarray
    eids: np.ndarray
    #: in-degree of each destination in the whole graph (GCN normalises by it)
    dst_degree: np.ndarray = None
    #: float32 weight of each edge (a weighted sampler's; each row's sum is 1), None: unweighted
    edge_weight: np.ndarray = None
    #: values of the last sources, constant rows appended to the layer's input (a float tensor, set
    #: just before the forward pass: VR-GCN's history terms, :mod:`hpcgnn.sampling.vr`); None: none
    extra_rows: object = None
    #: the sources are the previous layer's output, then the same rows before dropout (their mean;
    #: VR-GCN's CVD estimator), then ``extra_rows``
    with_expected: bool = False
    #: int64 relation id of each edge (a typed graph's per-relation sampler: each destination's
    #: edges grouped by relation, ascending), None: not sampled by relation
    etype: np.ndarray = None

    @property
    def num_edges(self) -> int:
        return int(self.src_pos.shape[0])

    def dst_index(self) -> np.ndarray:
        """Local. Destination of every edge (expanded from ``indptr``)."""
        return np.repeat(np.arange(self.num_dst, dtype=np.int64), np.diff(self.indptr))


@dataclass
class MiniBatch:
    """Local. Sampled blocks (input side first) and, once loaded, input features and labels.

    ``input_gids`` are the global ids of the first block's source nodes (the rows of
    ``feat``); ``seed_gids`` the output nodes (the rows of ``label``).
    """

    seed_gids: np.ndarray
    input_gids: np.ndarray
    blocks: list
    #: in-degree of every input node in the whole graph, when the sampler was asked for it
    input_degree: np.ndarray = None
    feat: object = None
    label: object = None
    extra: dict = field(default_factory=dict)
    #: the factor of this batch's mean loss that makes the ranks' mean gradient the one over all the
    #: step's seeds (a rank training a larger share of them weighs more: --step-balance speed)
    loss_weight: float = 1.0

    @property
    def num_sampled_edges(self) -> int:
        return sum(b.num_edges for b in self.blocks)


class Sampler(Protocol):
    """What the loaders need of a sampler: one call per batch, deterministic for its ``seed``.

    ``seed`` is an integer (the loader derives one per rank, epoch and batch); a sampler
    derives its own streams from it, so the same seed gives the same batch on any rank count.
    A new sampler is a new module of this package implementing this method.
    """

    def sample(self, graph, seed_gids, seed=None) -> MiniBatch:
        """Local. The blocks of ``seed_gids`` (unique global ids) sampled from ``graph``."""
        ...
