"""The adapter from a sampler's :class:`~hpcgnn.sampling.Block` to what layers compute with:
torch views of its edges and degrees, and its adjacency as CSR matrices for the compiled
products of :mod:`hpcgnn.nn.aggregate`."""
from __future__ import annotations

import functools

import numpy as np
import torch

from hpcgnn.nn.aggregate import CSR, spmm


class BlockTensors:
    """Local. Torch views of a block: edge endpoints and degrees, built once per block."""

    def __init__(self, block, src_degree=None):
        self.num_src, self.num_dst = block.num_src, block.num_dst
        counts = torch.from_numpy(block.indptr).diff()
        self.src = torch.from_numpy(block.src_pos)
        self.in_degree = counts.to(torch.float32)
        # graph degrees for GCN's symmetric normalisation (block degrees when unknown)
        self.dst_graph_degree = (torch.from_numpy(block.dst_degree).to(torch.float32)
                                 if getattr(block, "dst_degree", None) is not None else self.in_degree)
        self._src_degree = src_degree
        #: constant source rows appended after the previous layer's output (a control variate's)
        self.extra_rows = getattr(block, "extra_rows", None)
        #: the previous layer's output is followed by the same rows before dropout
        self.with_expected = getattr(block, "with_expected", False)
        self._block = block
        self._matrices = {}

    @functools.cached_property
    def dst(self):
        """Destination of every edge."""
        return torch.repeat_interleave(torch.arange(self.num_dst), self.in_degree.long())

    @functools.cached_property
    def src_graph_degree(self):
        if self._src_degree is not None:
            return torch.as_tensor(self._src_degree, dtype=torch.float32)
        return torch.bincount(self.src, minlength=self.num_src).to(torch.float32)

    def _matrix(self, kind) -> CSR:
        """The block's adjacency for :func:`~hpcgnn.nn.aggregate.spmm`, values 1 ('sum') or
        1/in-degree ('mean'); a weighted block's edge weights for both (they sum to 1 per row: a
        weighted mean)."""
        if kind not in self._matrices:
            weight = getattr(self._block, "edge_weight", None)
            if weight is None and kind == "mean":
                weight = (1.0 / self.in_degree.clamp(min=1)).repeat_interleave(self.in_degree.long()).numpy()
            self._matrices[kind] = CSR(self._block.indptr, self._block.src_pos, weight, self.num_src)
        return self._matrices[kind]

    def derived(self, key, build):
        """Local. ``build(block)`` (a structure other layers derive from the sampled block, such as a
        relational layer's per-relation matrices), built on first use of ``key`` and kept with
        the block's own matrices."""
        if key not in self._matrices:
            self._matrices[key] = build(self._block)
        return self._matrices[key]

    @functools.cached_property
    def with_self_loops(self) -> CSR:
        """The block's adjacency with one more entry per destination, the edge from itself
        (after its in-edges), values 1: the neighbourhood attention runs over."""
        indptr = self._block.indptr + np.arange(self.num_dst + 1, dtype=np.int64)
        col = np.empty(indptr[-1], dtype=np.int64)
        loops = indptr[1:] - 1
        col[loops] = np.arange(self.num_dst)
        keep = np.ones(col.shape[0], dtype=bool)
        keep[loops] = False
        col[keep] = self._block.src_pos
        return CSR(indptr, col, None, self.num_src)

    def sum_neighbours(self, h_src):
        """Sum of source rows over each destination's in-edges (a compiled sparse-dense product,
        float32 or bfloat16 rows: no per-edge message tensor is materialised)."""
        return spmm(self._matrix("sum"), h_src)

    def mean_neighbours(self, h_src):
        """Mean of source rows over each destination's in-edges (0 for no in-edges)."""
        return spmm(self._matrix("mean"), h_src)


def as_block_tensors(blocks, input_degree=None):
    """Local. BlockTensors for a list of blocks (input side first)."""
    result = []
    for i, block in enumerate(blocks):
        src_degree = input_degree if i == 0 else getattr(blocks[i - 1], "dst_degree", None)
        result.append(block if isinstance(block, BlockTensors) else BlockTensors(block, src_degree))
    return result
