"""The adapter from a sampler's :class:`~hpcgnn.sampling.Block` to what layers compute with:
torch views of its edges and degrees, and its adjacency as sparse CSR matrices."""
from __future__ import annotations

import functools
import warnings

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

    def _matrix(self, kind):
        """The block's adjacency as a sparse CSR matrix, values 1 ('sum') or 1/in-degree ('mean');
        a weighted block's edge weights for both (they sum to 1 per row: a weighted mean)."""
        if kind not in self._matrices:
            weight = getattr(self._block, "edge_weight", None)
            if weight is not None:
                values = torch.from_numpy(weight).to(torch.float32)
            elif kind == "sum":
                values = torch.ones(self.src.shape[0])
            else:
                values = (1.0 / self.in_degree.clamp(min=1)).repeat_interleave(self.in_degree.long())
            with warnings.catch_warnings():  # torch flags sparse CSR as beta on every construction
                warnings.simplefilter("ignore", UserWarning)
                self._matrices[kind] = torch.sparse_csr_tensor(
                    torch.from_numpy(self._block.indptr), self.src, values, size=(self.num_dst, self.num_src))
        return self._matrices[kind]

    def _compiled(self, kind) -> CSR:
        """The same matrix for :func:`~hpcgnn.nn.aggregate.spmm` (bfloat16 rows)."""
        key = "compiled_" + kind
        if key not in self._matrices:
            matrix = self._matrix(kind)
            self._matrices[key] = CSR(self._block.indptr, self._block.src_pos, matrix.values().numpy(), self.num_src)
        return self._matrices[key]

    def _product(self, kind, h_src):
        # torch has no bfloat16 sparse CSR product (and autocast would ask it for one)
        if h_src.dtype == torch.bfloat16 or torch.is_autocast_enabled("cpu"):
            return spmm(self._compiled(kind), h_src.to(torch.bfloat16))
        return self._matrix(kind) @ h_src

    def sum_neighbours(self, h_src):
        """Sum of source rows over each destination's in-edges (a sparse-dense matmul: no
        per-edge message tensor is materialised)."""
        return self._product("sum", h_src)

    def mean_neighbours(self, h_src):
        """Mean of source rows over each destination's in-edges (0 for no in-edges)."""
        return self._product("mean", h_src)


def as_block_tensors(blocks, input_degree=None):
    """Local. BlockTensors for a list of blocks (input side first)."""
    result = []
    for i, block in enumerate(blocks):
        src_degree = input_degree if i == 0 else getattr(blocks[i - 1], "dst_degree", None)
        result.append(block if isinstance(block, BlockTensors) else BlockTensors(block, src_degree))
    return result
