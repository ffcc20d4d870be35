"""The adapter from a sampler's :class:`~hpcgnn.sampling.Block` to what layers compute with:
torch tensors of its edges and degrees, and its adjacency as CSR matrices for the products of
:mod:`hpcgnn.nn.aggregate`, on the CPU or on the device the layers run on."""
from __future__ import annotations

import functools

import numpy as np
import torch

from hpcgnn.nn.aggregate import CSR, DeviceCSR, DeviceMatrix, normalised_device, spmm, to_device

#: the matrices the homogeneous layers aggregate with (SAGE's 'mean', GCN's and SAGE-gcn's 'sum',
#: GAT's 'with_self_loops'): a BlockTensors on a device asked for them builds them there at once
HOMOGENEOUS_MATRICES = ("sum", "mean", "with_self_loops")


class BlockTensors:
    """Local. Tensors of a block: edge endpoints and degrees, and its CSR matrices, built once per
    block.

    ``device`` (None: the CPU): where the tensors live. On a device other than the CPU, the
    constructor copies at once the edges, degrees and row offsets, and builds the matrices named
    in ``matrices`` (of :data:`HOMOGENEOUS_MATRICES`; none by default: a matrix is built on the
    device on its first use, by the layer that reads it), the transposes (backward passes)
    included, so that a caller can build it inside a side CUDA stream; with ``non_blocking`` the copies go
    from pinned host memory without waiting (the caller orders its streams). Structures of
    :meth:`derived` (relational layers') move on first use.
    """

    def __init__(self, block, src_degree=None, device=None, non_blocking=False, matrices=()):
        self.device = torch.device("cpu") if device is None else normalised_device(device)
        self.non_blocking = bool(non_blocking)
        self.num_src, self.num_dst = block.num_src, block.num_dst
        self._host_in_degree = np.diff(np.asarray(block.indptr)).astype(np.float32)
        self.src = self._move(block.src_pos)
        self.in_degree = self._move(self._host_in_degree)
        # graph degrees for GCN's symmetric normalisation (block degrees when unknown)
        dst_degree = getattr(block, "dst_degree", None)
        self.dst_graph_degree = (self._move(np.asarray(dst_degree, dtype=np.float32)) if dst_degree is not None
                                 else self.in_degree)
        self._src_degree = src_degree
        #: constant source rows appended after the previous layer's output (a control variate's)
        extra = getattr(block, "extra_rows", None)
        self.extra_rows = self._move(extra) if extra is not None else None
        #: the previous layer's output is followed by the same rows before dropout
        self.with_expected = getattr(block, "with_expected", False)
        self._block = block
        #: the matrices and derived structures built so far, by key (shared with moved copies: :meth:`to`)
        self.built = {}
        #: row offsets on the device (None on the CPU): a device's matrices are built from them there
        self.indptr = None
        if self.device.type != "cpu":
            self.indptr = self._move(block.indptr)
            self.src_graph_degree  # noqa: B018 (built now, on the device)
            for kind in matrices:
                self.matrix(kind).transposed  # noqa: B018 (built now, on the device)

    def _move(self, value) -> torch.Tensor:
        """A numpy array or tensor on this block's device (a CPU one as it is)."""
        if isinstance(value, torch.Tensor):
            if value.device == self.device:
                return value
            if self.non_blocking and self.device.type == "cuda" and value.device.type == "cpu":
                value = value.pin_memory()  # the pinned allocator keeps it until the transfer is done
            return value.to(self.device, non_blocking=self.non_blocking)
        return to_device(np.asarray(value), self.device, self.non_blocking)

    def to(self, device, non_blocking=False) -> BlockTensors:
        """Local. These block tensors on ``device`` (itself when already there); the host matrices
        and their device copies are shared."""
        device = normalised_device(device)
        if device == self.device:
            return self
        moved = BlockTensors(self._block, self._src_degree, device, non_blocking, matrices=())
        if device.type == "cpu":
            moved.built = {key: value for key, value in self.built.items() if isinstance(value, CSR)}
        else:  # the homogeneous matrices are rebuilt there from the block's tensors; derived ones move on use
            moved.built = {key: value for key, value in self.built.items() if key not in HOMOGENEOUS_MATRICES}
        return moved

    def device_tensors(self) -> list:
        """Local. Every tensor of this block on its device built so far, its matrices' included (a
        caller that built them in a side CUDA stream marks them with ``record_stream`` for the
        stream that computes with them); empty on the CPU."""
        if self.device.type == "cpu":
            return []
        found = [self.src, self.indptr, self.in_degree, self.dst_graph_degree, self.__dict__.get("src_graph_degree"),
                 self.__dict__.get("dst"), self.extra_rows]
        for structure in self.built.values():
            if isinstance(structure, (CSR, DeviceMatrix)):
                for matrix in (structure, structure.__dict__.get("transposed")):
                    if matrix is not None and self.device in matrix.placed:
                        found.extend(matrix.on(self.device).tensors())
        return [t for t in found if isinstance(t, torch.Tensor) and t.device == self.device]

    @functools.cached_property
    def dst(self):
        """Destination of every edge."""
        return torch.repeat_interleave(torch.arange(self.num_dst, device=self.device), self.in_degree.long(),
                                       output_size=int(self.src.shape[0]))

    @functools.cached_property
    def src_graph_degree(self):
        if self._src_degree is not None:
            degree = self._src_degree
            if not isinstance(degree, torch.Tensor):
                degree = np.asarray(degree, dtype=np.float32)
            return self._move(degree).to(torch.float32)
        return self._move(np.bincount(np.asarray(self._block.src_pos), minlength=self.num_src).astype(np.float32))

    def matrix(self, kind) -> CSR:
        """Local. The block's adjacency ``kind`` (a name of :data:`HOMOGENEOUS_MATRICES`) for
        :func:`~hpcgnn.nn.aggregate.spmm`: values 1 ('sum') or 1/in-degree ('mean'), a weighted
        block's edge weights for both (they sum to 1 per row: a weighted mean); 'with_self_loops'
        as :attr:`with_self_loops`."""
        if kind not in self.built and self.device.type != "cpu":
            self.built[kind] = self._device_matrix(kind)
        if kind not in self.built:
            if kind == "with_self_loops":
                self.built[kind] = self._self_loops()
            elif kind in ("sum", "mean"):
                weight = getattr(self._block, "edge_weight", None)
                if weight is None and kind == "mean":
                    degree = self._host_in_degree
                    weight = np.repeat(1.0 / np.maximum(degree, 1), degree.astype(np.int64)).astype(np.float32)
                self.built[kind] = CSR(self._block.indptr, self._block.src_pos, weight, self.num_src)
            else:
                raise ValueError(f"unknown block matrix {kind!r} ({', '.join(HOMOGENEOUS_MATRICES)})")
        return self.built[kind]

    def derived(self, key, build):
        """Local. ``build(block)`` (a structure other layers derive from the sampled block, such as a
        relational layer's per-relation matrices), built on first use of ``key`` and kept with
        the block's own matrices."""
        if key not in self.built:
            self.built[key] = build(self._block)
        return self.built[key]

    def _device_matrix(self, kind) -> DeviceMatrix:
        weight = getattr(self._block, "edge_weight", None)
        if weight is not None:
            weight = self._move(np.asarray(weight, dtype=np.float32))
        return matrix_of_tensors(kind, self.indptr, self.src, self.num_src, weight)

    def _self_loops(self) -> CSR:
        indptr = np.asarray(self._block.indptr, dtype=np.int64) + np.arange(self.num_dst + 1, dtype=np.int64)
        col = np.empty(indptr[-1], dtype=np.int64)
        loops = indptr[1:] - 1
        col[loops] = np.arange(self.num_dst)
        keep = np.ones(col.shape[0], dtype=bool)
        keep[loops] = False
        col[keep] = self._block.src_pos
        return CSR(indptr, col, None, self.num_src)

    @property
    def with_self_loops(self) -> CSR:
        """The block's adjacency with one more entry per destination, the edge from itself
        (after its in-edges), values 1: the neighbourhood attention runs over."""
        return self.matrix("with_self_loops")

    def sum_neighbours(self, h_src):
        """Sum of source rows over each destination's in-edges (a sparse-dense product, float32 or
        bfloat16 rows: no per-edge message tensor is materialised)."""
        return spmm(self.matrix("sum"), h_src)

    def mean_neighbours(self, h_src):
        """Mean of source rows over each destination's in-edges (0 for no in-edges)."""
        return spmm(self.matrix("mean"), h_src)


def matrix_of_tensors(kind, indptr, src, num_src, edge_weight=None) -> DeviceMatrix:
    """Local. The block matrix ``kind`` (a name of :data:`HOMOGENEOUS_MATRICES`) of row offsets
    ``indptr`` and sources ``src``, built where those tensors are, entry for entry what
    :meth:`BlockTensors.matrix` makes on the host: a GPU step builds its matrices on the GPU."""
    if kind not in HOMOGENEOUS_MATRICES:
        raise ValueError(f"unknown block matrix {kind!r} ({', '.join(HOMOGENEOUS_MATRICES)})")
    indptr, src = indptr.long(), src.long()
    device, num_dst, edges = indptr.device, int(indptr.shape[0]) - 1, int(src.shape[0])
    counts = indptr.diff()
    dst_ids = torch.arange(num_dst, device=device)
    row = torch.repeat_interleave(dst_ids, counts, output_size=edges)
    if kind == "with_self_loops":
        # entry e of row r moves down by the r loops before it; row r's loop closes the row
        loop_indptr = indptr + torch.arange(num_dst + 1, device=device)
        col = torch.empty(edges + num_dst, dtype=torch.int64, device=device)
        col[torch.arange(edges, device=device) + row] = src
        col[loop_indptr[1:] - 1] = dst_ids
        loop_row = torch.repeat_interleave(dst_ids, counts + 1, output_size=edges + num_dst)
        return DeviceMatrix(DeviceCSR.of_tensors(loop_indptr, col, None, num_src, row=loop_row))
    weight = edge_weight
    if weight is None and kind == "mean":
        weight = (1.0 / counts.clamp(min=1).to(torch.float32))[row]
    return DeviceMatrix(DeviceCSR.of_tensors(indptr, src, weight, num_src, row=row))


def as_block_tensors(blocks, input_degree=None, device=None, non_blocking=False, matrices=()):
    """Local. BlockTensors for a list of blocks (input side first), on ``device`` (None: the CPU)
    with what :class:`BlockTensors` says of ``device``, ``non_blocking`` and ``matrices``; block
    tensors given as such are moved there when they are elsewhere."""
    result = []
    for i, block in enumerate(blocks):
        if isinstance(block, BlockTensors):
            result.append(block if device is None else block.to(device, non_blocking))
            continue
        src_degree = input_degree if i == 0 else getattr(blocks[i - 1], "dst_degree", None)
        result.append(BlockTensors(block, src_degree, device, non_blocking, matrices))
    return result
