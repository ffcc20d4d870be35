"""Graph convolutions on one block: GraphSAGE, GCN and GAT layers.

A block is a bipartite graph from ``num_src`` source nodes to ``num_dst`` destination nodes,
the destinations being the first ``num_dst`` sources; every layer maps source rows to one row
per destination.
"""
from __future__ import annotations

import torch
from torch import nn

from hpcgnn.nn.attention import edge_softmax, head_spmm
from hpcgnn.nn.block_tensors import BlockTensors
from hpcgnn.nn.dropout import Dropout
from hpcgnn.nn.gemm import linear, linear_maps


class SAGEConv(nn.Module):
    """GraphSAGE layer: ``W_self h_v + W_neigh mean(h_u)`` ('mean'), or
    ``W (h_v + sum h_u) / (deg + 1)`` ('gcn')."""

    def __init__(self, in_dim, out_dim, aggregator="mean"):
        super().__init__()
        if aggregator not in ("mean", "gcn"):
            raise ValueError(f"unknown SAGE aggregator {aggregator!r} (mean, gcn)")
        self.aggregator = aggregator
        self.fc_neigh = nn.Linear(in_dim, out_dim, bias=aggregator == "gcn")
        self.fc_self = nn.Linear(in_dim, out_dim) if aggregator == "mean" else None
        self.out_features = out_dim

    def forward(self, block: BlockTensors, h_src):
        h_dst = h_src[: block.num_dst]
        # the linear map commutes with the average: apply it on the narrower side
        shrink = self.fc_neigh.in_features > self.fc_neigh.out_features
        if self.aggregator == "mean":
            if shrink and self.out_features > 32:
                return (linear(h_dst, self.fc_self.weight, self.fc_self.bias)
                        + block.mean_neighbours(linear(h_src, self.fc_neigh.weight)))
            if shrink:
                # narrow output (memory-bound GEMMs): one GEMM over all sources for both maps, so the
                # backward pass writes the wide input gradient once (not once per map plus a
                # zero-filled slice gradient); the self map's extra rows cost little at this width
                out_dim = self.out_features
                z = linear(h_src, torch.cat([self.fc_neigh.weight, self.fc_self.weight], dim=0))
                return block.mean_neighbours(z[:, :out_dim]) + z[: block.num_dst, out_dim:] + self.fc_self.bias
            # one GEMM over [h_dst, mean] instead of two with half the inner dimension
            weight = torch.cat([self.fc_self.weight, self.fc_neigh.weight], dim=1)
            return linear(torch.cat([h_dst, block.mean_neighbours(h_src)], dim=1), weight, self.fc_self.bias)
        scale = (block.in_degree + 1).unsqueeze(-1)
        if shrink:
            z = linear(h_src, self.fc_neigh.weight)
            return (block.sum_neighbours(z) + z[: block.num_dst]) / scale + self.fc_neigh.bias
        return linear((block.sum_neighbours(h_src) + h_dst) / scale, self.fc_neigh.weight, self.fc_neigh.bias)


class GraphConv(nn.Module):
    """Kipf-Welling GCN layer with self loops: ``D^-1/2 (A + I) D^-1/2 H W`` (graph degrees)."""

    def __init__(self, in_dim, out_dim):
        super().__init__()
        self.linear = nn.Linear(in_dim, out_dim)
        self.out_features = out_dim

    def forward(self, block: BlockTensors, h_src):
        norm_src = (block.src_graph_degree + 1).rsqrt()
        norm_dst = (block.dst_graph_degree + 1).rsqrt()
        h = linear(h_src, self.linear.weight)
        scaled = h * norm_src.to(h.dtype).unsqueeze(-1)  # bfloat16 rows stay bfloat16
        total = block.sum_neighbours(scaled) + scaled[: block.num_dst]
        return total * norm_dst.to(h.dtype).unsqueeze(-1) + self.linear.bias


class GATConv(nn.Module):
    """Multi-head graph attention (Velickovic et al.), attention softmax over each node's
    sampled in-edges plus itself."""

    def __init__(self, in_dim, out_dim, heads=4, negative_slope=0.2, attn_dropout=0.0):
        super().__init__()
        self.heads, self.out_dim = heads, out_dim
        self.out_features = heads * out_dim
        self.linear = nn.Linear(in_dim, heads * out_dim, bias=False)
        self.attn_src = nn.Parameter(torch.empty(heads, out_dim))
        self.attn_dst = nn.Parameter(torch.empty(heads, out_dim))
        self.bias = nn.Parameter(torch.zeros(heads * out_dim))
        self.negative_slope = negative_slope
        self.attn_dropout = Dropout(attn_dropout)
        nn.init.xavier_uniform_(self.linear.weight, gain=nn.init.calculate_gain("relu"))
        nn.init.xavier_uniform_(self.attn_src, gain=nn.init.calculate_gain("relu"))
        nn.init.xavier_uniform_(self.attn_dst, gain=nn.init.calculate_gain("relu"))

    def logit_map(self):
        """Local. The [2 heads x in] map from a source row to its source and destination logits:
        ``<W_h x, a_h> = <x, W_h^T a_h>``, so the logits need no passes over the projected rows."""
        weight = self.linear.weight.view(self.heads, self.out_dim, -1)
        return torch.cat([torch.einsum("hd,hdi->hi", self.attn_src, weight),
                          torch.einsum("hd,hdi->hi", self.attn_dst, weight)])

    def forward(self, block: BlockTensors, h_src):
        z, scores = linear_maps(h_src, [self.linear.weight, self.logit_map()])  # bfloat16 under --precision bf16
        scores = scores.float()
        score_src, score_dst = scores[:, : self.heads], scores[: block.num_dst, self.heads:]
        graph = block.with_self_loops
        alpha = self.attn_dropout(edge_softmax(graph, score_src, score_dst, self.negative_slope))
        return head_spmm(graph, z, alpha) + self.bias.to(z.dtype)
