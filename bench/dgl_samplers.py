"""DGL 2.1's single-machine samplers training GraphSAGE: the reference side of bench/samplers.py's
speed comparison (run with DGL's own virtualenv, ``../shared/anchor_dgl/setup.sh``; never imported
by hpcgnn).

    $DGLENV/bin/python bench/dgl_samplers.py graph.npz --samplers cluster,saint-node --threads 2

One process with ``--threads`` torch/DGL threads (hpcgnn's side: that many ranks of one thread).
Input: an RMAT graph written by ``hpcgnn generate`` (``src``, ``dst``, ``feat``, ``label``,
``train_mask``), made simple and bidirected as ``hpcgnn partition --symmetrize`` makes it.
Model: GraphSAGE-mean 2 x ``--hidden``, ReLU and dropout 0.5, Adam; on blocks (neighbor, labor,
randomwalk) or on the sampled subgraph (cluster, saint-*), with the loss on the batch's training
nodes. Sizes per batch are hpcgnn's per-rank sizes (bench/samplers.py SPEED_SAMPLERS):

    neighbor    NeighborSampler([10, 25]), 1000 seeds
    labor       LaborSampler([10, 25]), 1000 seeds (LADIES' layer-wise relative in DGL)
    randomwalk  RandomWalkNeighborSampler: 20 walks of 3 steps per node, top 10, per layer; 1000 seeds
    cluster     ClusterGCNSampler, --clusters METIS clusters of the whole graph, 4 per batch
    saint-node  SAINTSampler('node', 3000); saint-edge ('edge', 2000); saint-rw ('walk', (1000, 2))

Times ``--batches`` batches after 3 warm-up ones (sampling, forward, backward, step): prints a
JSON line per sampler with batches/s and training nodes/s; the one-off preprocessing (METIS for cluster) is
reported apart. Block samplers also report their nodes per layer and the in-edges below each
layer (measured outside the timing).
"""
import argparse
import json
import os
import tempfile
import time

import dgl
import dgl.nn as dglnn
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

SAMPLERS = ("neighbor", "labor", "randomwalk", "cluster", "saint-node", "saint-edge", "saint-rw")


class SAGE(nn.Module):
    def __init__(self, in_dim, hidden, out_dim):
        super().__init__()
        self.layers = nn.ModuleList([dglnn.SAGEConv(in_dim, hidden, "mean"), dglnn.SAGEConv(hidden, out_dim, "mean")])
        for module in self.modules():  # PyTorch's nn.Linear default, as hpcgnn's layers start
            if isinstance(module, nn.Linear):
                module.reset_parameters()

    def forward(self, graphs, h, weight=None):
        for i, (layer, g) in enumerate(zip(self.layers, graphs)):
            h = layer(g, h, edge_weight=None if weight is None else g.edata[weight])
            if i == 0:
                h = F.dropout(F.relu(h), 0.5, self.training)
        return h


class RandomWalkBlocks(dgl.dataloading.BlockSampler):
    """PinSAGE's neighbourhoods as blocks: per layer each node's top-k random-walk visits, weighted."""

    def __init__(self, g, layers, walks, length, topk):
        super().__init__()
        self.walker = dgl.sampling.RandomWalkNeighborSampler(g, length, 0.0, walks, topk)
        self.layers = layers

    def sample_blocks(self, g, seed_nodes, exclude_eids=None):
        output_nodes, blocks = seed_nodes, []
        for _ in range(self.layers):
            frontier = self.walker(seed_nodes)
            block = dgl.to_block(frontier, seed_nodes)
            block.edata["weights"] = frontier.edata["weights"][block.edata[dgl.EID]].float()
            # a weighted mean, as hpcgnn's visit-count weights
            total = dgl.ops.copy_e_sum(block, block.edata["weights"])
            block.edata["weights"] = block.edata["weights"] / total[block.edges()[1]].clamp(min=1e-12)
            seed_nodes = block.srcdata[dgl.NID]
            blocks.insert(0, block)
        return seed_nodes, output_nodes, blocks


def load(path):
    data = np.load(path)
    g = dgl.graph((torch.from_numpy(data["src"]), torch.from_numpy(data["dst"])), num_nodes=int(data["num_nodes"]))
    g = dgl.to_simple(dgl.to_bidirected(dgl.remove_self_loop(g)))
    g.ndata["feat"] = torch.from_numpy(data["feat"])
    g.ndata["label"] = torch.from_numpy(data["label"])
    g.ndata["train_mask"] = torch.from_numpy(data["train_mask"])
    return g


def loader(g, name, args):
    """``(DataLoader, blocks?, preprocessing seconds)`` of sampler ``name``."""
    train = torch.nonzero(g.ndata["train_mask"]).reshape(-1)
    t0 = time.perf_counter()
    if name in ("neighbor", "labor", "randomwalk"):
        sampler = {"neighbor": lambda: dgl.dataloading.NeighborSampler([10, 25]),
                   "labor": lambda: dgl.dataloading.LaborSampler([10, 25]),
                   "randomwalk": lambda: RandomWalkBlocks(g, 2, 20, 3, 10)}[name]()
        return dgl.dataloading.DataLoader(g, train, sampler, batch_size=1000, shuffle=True), True, 0.0
    if name == "cluster":
        cache = os.path.join(tempfile.mkdtemp(), "clusters.pkl")
        sampler = dgl.dataloading.ClusterGCNSampler(g, args.clusters, cache_path=cache)
        prep = time.perf_counter() - t0
        return dgl.dataloading.DataLoader(g, torch.arange(args.clusters), sampler, batch_size=4, shuffle=True), \
            False, prep
    mode, budget = {"saint-node": ("node", 3000), "saint-edge": ("edge", 2000), "saint-rw": ("walk", (1000, 2))}[name]
    sampler = dgl.dataloading.SAINTSampler(mode, budget)
    return dgl.dataloading.DataLoader(g, torch.arange(10 ** 6), sampler, num_workers=0), False, 0.0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("graph")
    parser.add_argument("--samplers", default=",".join(SAMPLERS), help="comma-separated, from: " + ", ".join(SAMPLERS))
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--clusters", type=int, default=512, help="METIS clusters of the whole graph")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if hasattr(dgl.utils, "set_num_threads"):
        dgl.utils.set_num_threads(args.threads)
    torch.manual_seed(0)
    g = load(args.graph)
    for name in args.samplers.split(","):
        print(json.dumps(train(g, name, args)), flush=True)


def train(g, name, args) -> dict:
    """``--batches`` timed training steps with sampler ``name``."""
    batches, blocks, prep = loader(g, name, args)
    model = SAGE(g.ndata["feat"].shape[1], args.hidden, int(g.ndata["label"].max()) + 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.003)
    weight = "weights" if name == "randomwalk" else None
    done, seen, t0, aside, shapes = 0, 0, None, 0.0, []
    for batch in batches:
        if done == 3:
            t0, seen = time.perf_counter(), 0
        if blocks:
            input_nodes, output_nodes, graphs = batch
            if t0 is not None:  # the layers' sizes, untimed
                t1 = time.perf_counter()
                shapes.append(layer_sizes(g, graphs))
                aside += time.perf_counter() - t1
            x, y = g.ndata["feat"][input_nodes], g.ndata["label"][output_nodes]
            mask = torch.ones(y.shape[0], dtype=torch.bool)
        else:
            sub = batch
            graphs, x, y = [sub, sub], sub.ndata["feat"], sub.ndata["label"]
            mask = sub.ndata["train_mask"]
        out = model(graphs, x, weight)
        loss = F.cross_entropy(out[mask], y[mask])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        seen += int(mask.sum())
        done += 1
        if done == args.batches + 3:
            break
    elapsed = time.perf_counter() - t0 - aside
    timed = done - 3
    row = {"sampler": name, "batches": timed, "batches_per_s": timed / elapsed, "train_nodes_per_s": seen / elapsed,
           "preprocess_s": prep, "threads": args.threads, "dgl": dgl.__version__}
    if shapes:
        nodes, edges = np.mean([s[0] for s in shapes], axis=0), np.mean([s[1] for s in shapes], axis=0)
        row.update(nodes_per_layer=nodes.round().astype(int).tolist(),
                   in_edges_of_layer=edges.round().astype(int).tolist())
    return row


def layer_sizes(g, graphs):
    """Nodes of each layer (input first, seeds last) and the in-edges of each block's destinations
    in the whole graph (what a sampler drawing a variate per in-neighbour visits)."""
    nodes = [b.num_src_nodes() for b in graphs] + [graphs[-1].num_dst_nodes()]
    edges = [int(g.in_degrees(b.dstdata[dgl.NID]).sum()) for b in graphs]
    return nodes, edges


if __name__ == "__main__":
    main()
