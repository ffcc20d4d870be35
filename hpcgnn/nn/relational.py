"""Relational layers on typed blocks: R-GCN and R-GAT convolutions, and the per-relation
adjacency both compute over.

A typed block carries the relation id of every sampled edge (``Block.etype``, each destination's
edges grouped by relation). :class:`RelationalAdjacency` regroups the edges once per block into
*pairs*: one row per (relation, destination) that has edges of that relation, rows ordered by
relation and then destination, so the rows of one relation are one contiguous run. Every
relation's aggregation is then one compiled product over all pairs (no Python loop over edges or
relations), the per-relation dense maps are one GEMM per relation present on that relation's
run of rows, and a second compiled product (:attr:`RelationalAdjacency.gather`, values 1) sums
each destination's pairs into its output row. A block without ``etype`` is the one-relation
case: every edge is relation 0.
"""
from __future__ import annotations

import functools
import math

import numpy as np
import torch
from torch import nn

from hpcgnn.nn.aggregate import CSR, spmm
from hpcgnn.nn.attention import edge_softmax, head_spmm
from hpcgnn.nn.block_tensors import BlockTensors
from hpcgnn.nn.dropout import Dropout
from hpcgnn.nn.gemm import linear, linear_maps

#: how an R-GCN layer parametrises its per-relation weights
REGULARIZERS = ("basis", "block", "none")


class RelationalAdjacency:
    """Local. A block's edges regrouped by (relation, destination), as CSR matrices.

    Attributes
    ----------
    num_relations, num_src, num_dst : int
    pair_dst, pair_rel : torch int64 [P]
        Destination and relation of every pair row (relation-major, destinations ascending).
    relation_rows : list[int]
        Number of pair rows of every relation (the destinations that have its edges).
    present : list[int]
        The relations with at least one edge in the block.
    row_indptr : numpy int64 [P + 1]; edge_src, edge_rel : numpy int64 [E]; edge_weight : numpy float32 [E]
        The edges in pair-row order: pair row ``k``'s are ``row_indptr[k]:row_indptr[k + 1]``,
        with their source positions, relations and mean weights ``1 / c_{i,r}``.
    mean : CSR [P x num_src]
        Pair row ``(r, i)``'s entries are destination ``i``'s ``r``-edges, values ``1 / c_{i,r}``
        (``c_{i,r}``: its sampled ``r``-edges): R-GCN's per-relation mean.
    gather : CSR [num_dst x P]
        Values 1: a destination's row sums its pair rows.
    """

    def __init__(self, block, num_relations):
        self.num_relations = int(num_relations)
        self.num_src, self.num_dst = int(block.num_src), int(block.num_dst)
        indptr = np.asarray(block.indptr, dtype=np.int64)
        src = np.asarray(block.src_pos, dtype=np.int64)
        edges = src.shape[0]
        etype = getattr(block, "etype", None)
        etype = np.zeros(edges, dtype=np.int64) if etype is None else np.asarray(etype, dtype=np.int64)
        if etype.shape != (edges,):
            raise ValueError(f"a block of {edges} edges with {etype.shape} relation ids")
        if edges and (etype.min() < 0 or etype.max() >= self.num_relations):
            bad = etype[(etype < 0) | (etype >= self.num_relations)][0]
            raise ValueError(f"an edge of relation {bad} in a model of {self.num_relations} relations")
        dst = np.repeat(np.arange(self.num_dst, dtype=np.int64), np.diff(indptr))
        key = dst * self.num_relations + etype
        # a sampler groups each destination's edges by relation, ascending; anything else is sorted here
        order = None if edges < 2 or bool((key[1:] >= key[:-1]).all()) else np.argsort(key, kind="stable")
        if order is not None:
            key, src = key[order], src[order]
        starts = np.flatnonzero(np.concatenate([[True], key[1:] != key[:-1]])) if edges else np.zeros(0, np.int64)
        counts = np.diff(np.append(starts, edges))
        pair_dst, pair_rel = np.divmod(key[starts], self.num_relations)
        by_relation = np.argsort(pair_rel, kind="stable")  # destinations stay ascending within a relation
        counts_sorted = counts[by_relation]
        rows_indptr = np.concatenate([[0], np.cumsum(counts_sorted)]).astype(np.int64)
        # the edges of sorted pair k are starts[by_relation[k]] + 0, 1, ...: one vectorised permutation
        edge_order = np.repeat(starts[by_relation] - rows_indptr[:-1], counts_sorted) + np.arange(edges)
        self.edge_src = src[edge_order]
        self.edge_rel = np.repeat(pair_rel[by_relation], counts_sorted)
        self.row_indptr = rows_indptr
        self.pair_dst = torch.from_numpy(pair_dst[by_relation])
        self.pair_rel = torch.from_numpy(pair_rel[by_relation])
        self.num_pairs = int(starts.shape[0])
        self.relation_rows = np.bincount(pair_rel, minlength=self.num_relations).tolist()
        self.present = [r for r, n in enumerate(self.relation_rows) if n]
        self.edge_weight = np.repeat((1.0 / np.maximum(counts_sorted, 1)).astype(np.float32), counts_sorted)
        self.mean = CSR(rows_indptr, self.edge_src, self.edge_weight, self.num_src)
        self._position = np.empty(self.num_pairs, dtype=np.int64)
        self._position[by_relation] = np.arange(self.num_pairs)
        self._pair_dst = pair_dst  # destination-major, as the positions
        gather_indptr = np.concatenate([[0], np.cumsum(np.bincount(pair_dst, minlength=self.num_dst))])
        self.gather = CSR(gather_indptr, self._position, None, self.num_pairs)

    @functools.cached_property
    def with_self(self) -> tuple[CSR, CSR]:
        """``(mean, gather)`` with ``num_dst`` more pair rows after the relations' (destination
        ``i``'s own row, one entry of value 1): a layer's self term then reads its rows through
        the same product, and no slice of the source rows (whose gradient is a zero-filled copy
        of all of them) enters the graph."""
        num_dst, loops = self.num_dst, np.arange(self.num_dst, dtype=np.int64)
        indptr = np.concatenate([self.row_indptr, self.row_indptr[-1] + 1 + loops])
        mean = CSR(indptr, np.concatenate([self.edge_src, loops]),
                   np.concatenate([self.edge_weight, np.ones(num_dst, np.float32)]), self.num_src)
        # every destination's pairs, then its own row
        order = np.argsort(np.concatenate([2 * self._pair_dst, 2 * loops + 1]), kind="stable")
        col = np.concatenate([self._position, self.num_pairs + loops])[order]
        counts = np.bincount(self._pair_dst, minlength=num_dst) + 1
        gather = CSR(np.concatenate([[0], np.cumsum(counts)]), col, None, self.num_pairs + num_dst)
        return mean, gather

    @functools.cached_property
    def _relation_sources(self):
        # every (relation, source) that some edge reads, relation-major: an attention layer
        # projects each source once per relation that uses it
        # (a mark per source, not a sort of the edges: one pass over the edges and one scan of
        # the marks per relation)
        marked = np.zeros(self.num_src, dtype=bool)
        local = np.empty(self.num_src, dtype=np.int64)
        column = np.empty(self.edge_src.shape[0], dtype=np.int64)
        edge_bounds = self.row_indptr[np.concatenate([[0], np.cumsum(self.relation_rows)])]
        sources, counts = [], []
        for r in range(self.num_relations):
            lo, hi = edge_bounds[r], edge_bounds[r + 1]
            src = self.edge_src[lo:hi]
            marked[src] = True
            used = np.flatnonzero(marked)
            marked[used] = False
            local[used] = np.arange(used.shape[0])
            column[lo:hi] = local[src] + sum(counts)
            sources.append(used)
            counts.append(int(used.shape[0]))
        return (torch.from_numpy(np.concatenate(sources)), counts,
                CSR(self.row_indptr, column, None, sum(counts)))

    @property
    def sources(self) -> torch.Tensor:
        """The source positions each relation reads (relation-major, ascending within one)."""
        return self._relation_sources[0]

    @property
    def source_counts(self) -> list:
        """Number of those sources per relation."""
        return self._relation_sources[1]

    @property
    def attention(self) -> CSR:
        """[P x relation sources], values 1: pair row ``(r, i)``'s entries are the columns of the
        sources of ``i``'s ``r``-edges (block-diagonal by relation), for the edge softmax."""
        return self._relation_sources[2]


def relational_adjacency(block, num_relations) -> RelationalAdjacency:
    """Local. ``block``'s :class:`RelationalAdjacency` (a :class:`BlockTensors` keeps it, so every
    layer and pass over the same block tensors builds it once)."""
    if isinstance(block, BlockTensors):
        return block.derived(("relations", int(num_relations)), lambda b: RelationalAdjacency(b, num_relations))
    return RelationalAdjacency(block, num_relations)


def _glorot(tensor, gain=1.0):
    """Xavier-uniform init of every trailing ``[out, in]`` matrix of ``tensor`` on its own (torch's
    fans of a 3-D or 4-D tensor count the leading dimensions)."""
    fan_out, fan_in = tensor.shape[-2], tensor.shape[-1]
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    with torch.no_grad():
        tensor.uniform_(-bound, bound)
    return tensor


class RGCNConv(nn.Module):
    """R-GCN layer (Schlichtkrull et al.): ``h_i' = W_0 h_i + b + sum_r sum_{j in N_r(i)} W_r h_j / c_{i,r}``.

    Each relation's mean is aggregated first and then mapped (``agg_r = A_r h``, then
    ``agg_r W_r^T``). ``regularizer``: 'basis' (``W_r = sum_b a_rb V_b`` over ``num_bases``
    shared bases; 0: one per relation), 'block' (``W_r`` block-diagonal of ``num_bases`` blocks,
    which must divide both widths) or 'none' (a full ``W_r`` per relation). ``self_loop``: the
    ``W_0 h_i`` term.
    """

    def __init__(self, in_dim, out_dim, num_relations, regularizer="basis", num_bases=0, self_loop=True, bias=True):
        super().__init__()
        if regularizer not in REGULARIZERS:
            raise ValueError(f"unknown regularizer {regularizer!r} ({', '.join(REGULARIZERS)})")
        if num_relations < 1:
            raise ValueError(f"{num_relations} relations (at least 1)")
        self.in_features, self.out_features = in_dim, out_dim
        self.num_relations, self.regularizer = num_relations, regularizer
        gain = nn.init.calculate_gain("relu")
        if regularizer == "basis":
            self.num_bases = num_bases or num_relations
            self.bases = nn.Parameter(_glorot(torch.empty(self.num_bases, out_dim, in_dim), gain))
            self.coefficients = nn.Parameter(_glorot(torch.empty(num_relations, self.num_bases)))
        elif regularizer == "block":
            if num_bases < 1 or in_dim % num_bases or out_dim % num_bases:
                raise ValueError(f"{num_bases} blocks for widths {in_dim} -> {out_dim} (the count must divide both)")
            self.num_bases = num_bases
            self.blocks = nn.Parameter(_glorot(
                torch.empty(num_relations, num_bases, out_dim // num_bases, in_dim // num_bases), gain))
        else:
            self.num_bases = 0
            self.weight = nn.Parameter(_glorot(torch.empty(num_relations, out_dim, in_dim), gain))
        self.loop_weight = nn.Parameter(_glorot(torch.empty(out_dim, in_dim), gain)) if self_loop else None
        self.bias = nn.Parameter(torch.zeros(out_dim)) if bias else None

    def relation_weights(self) -> torch.Tensor:
        """Local. Every relation's dense ``W_r``, float32 ``[relations, out, in]`` (autocast casts it per use)."""
        with torch.autocast("cpu", enabled=False):
            if self.regularizer == "basis":
                return torch.einsum("rb,boi->roi", self.coefficients, self.bases)
            if self.regularizer == "block":
                blocks = self.num_bases
                eye = torch.eye(blocks, dtype=self.blocks.dtype)
                # W_r[b * ob + o, c * ib + i] = Q_rb[o, i] when b == c, else 0
                dense = torch.einsum("rboi,bc->rboci", self.blocks, eye)
                return dense.reshape(self.num_relations, self.out_features, self.in_features)
            return self.weight

    def forward(self, block, h_src):
        if isinstance(h_src, ProjectedRows) and h_src.relational_types:
            return self._forward_featureless(block, h_src)
        if isinstance(h_src, ProjectedRows):
            out = self._forward_projected(block, h_src)
            if out is not None:
                return out
            h_src = h_src.dense()
        adj = relational_adjacency(block, self.num_relations)
        if self.loop_weight is None and not adj.num_pairs:
            dtype = torch.bfloat16 if torch.is_autocast_enabled("cpu") else h_src.dtype
            out = torch.zeros(adj.num_dst, self.out_features, dtype=dtype)
        else:
            # the self term is one more run of pair rows (each destination's own row), mapped by W_0
            mean, gather = adj.with_self if self.loop_weight is not None else (adj.mean, adj.gather)
            rows = adj.relation_rows + ([adj.num_dst] if self.loop_weight is not None else [])
            aggregated = spmm(mean, h_src).split(rows)
            weights = self.relation_weights()
            mapped = [linear(aggregated[r], weights[r]) for r in adj.present]
            if self.loop_weight is not None:
                mapped.append(linear(aggregated[-1], self.loop_weight))
            out = spmm(gather, torch.cat(mapped))
        return out if self.bias is None else out + self.bias.to(out.dtype)

    def _forward_projected(self, block, x):
        """The layer on rows not yet projected (``x`` a :class:`ProjectedRows`), or None when some
        relation's edges read sources of more than one node type (the caller projects then).

        Relation ``r``'s edges read sources of one type ``t``, whose rows are ``P_t x + c_t``; a
        mean of them mapped by ``W_r`` is ``(W_r P_t) mean(x) + W_r c_t``. So each relation
        averages a type's unprojected rows where they are narrower than the hidden width (in
        ``t``'s own row order) and maps the means by the composed weight; a wider type's rows are
        projected once and averaged at the hidden width (:meth:`ProjectedRows.source_rows`); the
        destinations' own rows are mapped the same way by ``W_0`` (the self term)."""
        adj = relational_adjacency(block, self.num_relations)
        if not adj.num_pairs:
            return None
        row_bounds = np.concatenate([[0], np.cumsum(adj.relation_rows)])
        edge_bounds = adj.row_indptr[row_bounds]
        edge_types = x.types_array[adj.edge_src]
        source_type = {}
        for r in adj.present:
            types = edge_types[edge_bounds[r]:edge_bounds[r + 1]]
            if types.min() != types.max() or int(types[0]) not in x.rows:
                return None
            source_type[r] = int(types[0])
        weights = self.relation_weights()
        local = x.type_local
        mapped = []
        for r in adj.present:
            t, lo, hi = source_type[r], edge_bounds[r], edge_bounds[r + 1]
            rows, projected = x.source_rows(t)
            mean = CSR(adj.row_indptr[row_bounds[r]:row_bounds[r + 1] + 1] - lo, local[adj.edge_src[lo:hi]],
                       adj.edge_weight[lo:hi], rows.shape[0])
            mapped.append(linear(spmm(mean, rows), *x.map_of(t, weights[r], projected)))
        gather = adj.gather
        if self.loop_weight is not None:
            # the destinations' own rows, type by type, each mapped by W_0 P_t; the gather reads
            # destination i's at its place among them
            counts = np.bincount(x.types_array[:adj.num_dst], minlength=len(x.counts))
            for t in np.flatnonzero(counts):
                rows, projected = x.source_rows(t)
                mapped.append(linear(rows[:counts[t]], *x.map_of(t, self.loop_weight, projected)))
            place = np.concatenate([[0], np.cumsum(counts)])[x.types_array[:adj.num_dst]] + x.type_local[:adj.num_dst]
            gather = adj.with_self[1]
            col = gather.col.copy()
            own = col >= adj.num_pairs
            col[own] = adj.num_pairs + place[col[own] - adj.num_pairs]
            gather = CSR(gather.indptr, col, None, gather.num_cols)
        out = spmm(gather, torch.cat(mapped))
        return out if self.bias is None else out + self.bias.to(out.dtype)


    def _forward_featureless(self, block, x):
        """The input layer over rows some of whose types have no features and carry per-relation
        rows instead (``x.relational_types``: ``--featureless relational``).

        Such a node ``j`` brings ``num_relations + 1`` slices of ``out_features``: slice ``r`` is
        its message ``W_r e_j`` along relation ``r`` and the last slice its own term ``W_0 e_j``,
        where ``e_j`` is R-GCN's one-hot input; the layer adds them as R-GCN does (the mean of a
        destination's ``r``-neighbours' slices ``r``, its own last slice, the bias), without a
        one-hot row or a ``W_r`` ever formed. A featured type's rows are mapped as in
        :meth:`_forward_projected` (``W_r P_t`` on the mean of the unprojected rows, plus ``W_r c_t``
        weighted by the share of the mean its sources hold), so a relation may read sources of
        several types. Every (pair row or own row, source) entry is summed once per source type:
        one product per featureless type over all relations, one per featured type."""
        adj = relational_adjacency(block, self.num_relations)
        slices, width = self.num_relations + 1, self.out_features
        for t in x.relational_types:
            if x.rows[t].shape[1] != slices * width:
                raise ValueError(f"node type {t}: per-relation rows of width {x.rows[t].shape[1]} for a layer of "
                                 f"{self.num_relations} relations and width {width} (want {slices * width})")
        num_dst, num_pairs = adj.num_dst, adj.num_pairs
        own = num_dst if self.loop_weight is not None else 0
        # every entry: the pair rows' edges (relation-major), then each destination's own row
        counts = np.diff(adj.row_indptr)
        entry_row = np.concatenate([np.repeat(np.arange(num_pairs, dtype=np.int64), counts),
                                    num_pairs + np.arange(own, dtype=np.int64)])
        entry_src = np.concatenate([adj.edge_src, np.arange(own, dtype=np.int64)])
        entry_slot = np.concatenate([adj.edge_rel, np.full(own, self.num_relations, dtype=np.int64)])
        entry_weight = np.concatenate([adj.edge_weight, np.ones(own, np.float32)])
        entry_type = x.types_array[entry_src]
        entry_local = x.type_local[entry_src]
        num_rows = num_pairs + own
        segments = adj.relation_rows + ([own] if own else [])
        dtype = torch.bfloat16 if torch.is_autocast_enabled("cpu") else torch.float32
        total = None
        weights = None
        for t in np.unique(entry_type):
            at = np.flatnonzero(entry_type == t)
            rows_of = np.bincount(entry_row[at], minlength=num_rows)
            indptr = np.concatenate([[0], np.cumsum(rows_of)]).astype(np.int64)
            rows = x.rows[int(t)]
            if int(t) in x.relational_types:
                matrix = CSR(indptr, entry_local[at] * slices + entry_slot[at], entry_weight[at],
                             rows.shape[0] * slices)
                part = spmm(matrix, rows.float().reshape(-1, width))
            else:
                if weights is None:
                    weights = self.relation_weights()
                rows, projected = x.source_rows(int(t))
                aggregated = spmm(CSR(indptr, entry_local[at], entry_weight[at], rows.shape[0]), rows)
                share = torch.from_numpy(np.bincount(entry_row[at], weights=entry_weight[at],
                                                     minlength=num_rows).astype(np.float32))
                bounds = np.concatenate([[0], np.cumsum(segments)])
                pieces = []
                for k, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
                    if not rows_of[lo:hi].any():
                        pieces.append(torch.zeros(hi - lo, width, dtype=dtype))
                        continue
                    weight, bias = x.map_of(int(t), weights[k] if k < self.num_relations else self.loop_weight,
                                            projected)
                    piece = linear(aggregated[lo:hi], weight)
                    if bias is not None:
                        piece = piece + share[lo:hi, None] * bias.to(piece.dtype)
                    pieces.append(piece.to(dtype))
                part = torch.cat(pieces)
            total = part.to(dtype) if total is None else total + part.to(dtype)
        if total is None:
            total = torch.zeros(num_rows, width, dtype=dtype)
        gather = adj.with_self[1] if own else adj.gather
        out = spmm(gather, total)
        return out if self.bias is None else out + self.bias.to(out.dtype)


class ProjectedRows:
    """Local. A typed batch's input rows and the per-type projection that maps them to one width,
    not yet applied: an R-GCN input layer reads them as they are (:meth:`RGCNConv._forward_projected`),
    anything else calls :meth:`dense`.

    ``projection`` is a :class:`~hpcgnn.nn.relational_models.TypeProjection`; ``types`` and
    ``rows`` as its forward takes them (checked here, with its errors).
    """

    def __init__(self, projection, types, rows):
        self.projection = projection
        self.types = torch.as_tensor(types, dtype=torch.int64)
        self.rows = rows
        self.counts = projection.check(self.types, rows)
        self._projected = {}  # type -> its projected rows, for types wider than the projection

    @property
    def num_rows(self) -> int:
        return int(self.types.shape[0])

    @functools.cached_property
    def relational_types(self) -> frozenset:
        """The types among these rows whose rows are per-relation (the projection's
        ``featureless_slices``): only R-GCN's input layer reads them."""
        return frozenset(t for t, n in enumerate(self.counts) if n and t in self.projection.relational_types)

    def dense(self) -> torch.Tensor:
        """Local. The projected ``[n, width]`` rows."""
        return self.projection(self.types, self.rows)

    def source_rows(self, t) -> tuple[torch.Tensor, bool]:
        """Local. ``(rows, projected)``: type ``t``'s rows for a sum over them, in the narrower
        width. Rows at most as wide as the projection come unprojected (``projected`` False: a
        layer maps their sums by :meth:`map_of`, the composed ``W P_t``); wider rows (a
        bag-of-words type) are projected first, once, so no sum ever runs over thousands of columns."""
        rows = self.rows[t]
        if rows.shape[1] <= self.projection.out_dim:
            return rows.float(), False
        if t not in self._projected:
            with torch.autocast("cpu", enabled=False):
                self._projected[t] = self.projection.maps[t](rows.float())
        return self._projected[t], True

    def map_of(self, t, weight, projected) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Local. ``(weight, bias)`` mapping a sum of type ``t``'s :meth:`source_rows` by ``weight``:
        ``weight`` alone on projected rows (they carry ``c_t``), else ``(weight P_t, weight c_t)``,
        the bias to be scaled by the sum's total edge weight."""
        if projected:
            return weight, None
        with torch.autocast("cpu", enabled=False):
            return self.projection.compose(t, weight)

    @functools.cached_property
    def types_array(self) -> np.ndarray:
        return self.types.numpy()

    @functools.cached_property
    def type_local(self) -> np.ndarray:
        """Every row's place among the rows of its type (the row of ``rows[type]`` it reads)."""
        local = np.empty(self.num_rows, dtype=np.int64)
        order = np.argsort(self.types_array, kind="stable")
        starts = np.concatenate([[0], np.cumsum(self.counts)])
        local[order] = np.arange(self.num_rows) - np.repeat(starts[:-1], self.counts)
        return local


class RGATConv(nn.Module):
    """Relational graph attention: one GAT convolution per relation (its own projection ``W_r``
    and attention vectors, the softmax over each destination's ``r``-in-edges alone), summed over
    the relations, plus ``W_0 h_i`` when ``self_loop`` and a bias.

    MLPerf's R-GAT reference (a heterogeneous convolution of per-relation GAT layers without self
    loops, summed) is ``self_loop=False``. Hidden layers concatenate ``heads`` heads of ``out_dim``
    (``concat``); an output layer averages them. Each relation projects only the sources its
    edges read.
    """

    def __init__(self, in_dim, out_dim, num_relations, heads=4, concat=True, self_loop=True, negative_slope=0.2,
                 attn_dropout=0.0):
        super().__init__()
        if num_relations < 1:
            raise ValueError(f"{num_relations} relations (at least 1)")
        self.num_relations, self.heads, self.out_dim, self.concat = num_relations, heads, out_dim, concat
        self.in_features = in_dim
        self.out_features = heads * out_dim if concat else out_dim
        gain = nn.init.calculate_gain("relu")
        self.weight = nn.Parameter(_glorot(torch.empty(num_relations, heads * out_dim, in_dim), gain))
        self.attn_src = nn.Parameter(_glorot(torch.empty(num_relations, heads, out_dim), gain))
        self.attn_dst = nn.Parameter(_glorot(torch.empty(num_relations, heads, out_dim), gain))
        self.loop_weight = nn.Parameter(_glorot(torch.empty(heads * out_dim, in_dim), gain)) if self_loop else None
        self.bias = nn.Parameter(torch.zeros(heads * out_dim))
        self.negative_slope = negative_slope
        self.attn_dropout = Dropout(attn_dropout)

    def logit_maps(self):
        """Local. ``[relations, heads, in]`` maps from a row to its source and its destination
        logits: ``<W_rh x, a_rh> = <x, W_rh^T a_rh>``, so logits need no pass over projected rows."""
        weight = self.weight.view(self.num_relations, self.heads, self.out_dim, -1)
        return (torch.einsum("rhd,rhdi->rhi", self.attn_src, weight),
                torch.einsum("rhd,rhdi->rhi", self.attn_dst, weight))

    def forward(self, block, h_src):
        adj = relational_adjacency(block, self.num_relations)
        num_dst, heads = adj.num_dst, self.heads
        out = None
        if adj.num_pairs or self.loop_weight is not None:
            logit_src, logit_dst = self.logit_maps()
            # one gather of every (relation, source) row and then the destinations' own rows; split's
            # backward concatenates, so the gradient of the gathered rows is written once (a slice
            # of h_src would add a zero-filled gradient of all its rows)
            index = torch.cat([adj.sources, torch.arange(num_dst)])
            rows = h_src.index_select(0, index).split(adj.source_counts + [num_dst])
            own = [logit_dst.reshape(-1, logit_dst.shape[-1])]
            if self.loop_weight is not None:
                own.append(self.loop_weight)
            own = linear_maps(rows[-1], own)
            out = own[1] if self.loop_weight is not None else None
        if adj.num_pairs:
            projected, scores = [], []
            for r in adj.present:
                z, score = linear_maps(rows[r], [self.weight[r], logit_src[r]])
                projected.append(z)
                scores.append(score)
            z, score_src = torch.cat(projected), torch.cat(scores).float()
            score_dst = own[0].float().view(num_dst, self.num_relations, heads)[adj.pair_dst, adj.pair_rel]
            alpha = self.attn_dropout(edge_softmax(adj.attention, score_src, score_dst, self.negative_slope))
            messages = spmm(adj.gather, head_spmm(adj.attention, z, alpha))
            out = messages if out is None else out + messages.to(out.dtype)
        if out is None:
            dtype = torch.bfloat16 if torch.is_autocast_enabled("cpu") else h_src.dtype
            out = torch.zeros(num_dst, heads * self.out_dim, dtype=dtype)
        out = out + self.bias.to(out.dtype)
        if not self.concat:
            out = out.view(num_dst, heads, self.out_dim).mean(dim=1)
        return out
