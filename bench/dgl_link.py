"""Link prediction with DGL 2.1: the reference side of a link-prediction comparison (run with
DGL's own virtualenv, ``../shared/anchor_dgl/setup.sh``; never imported by hpcgnn).

    $DGLENV/bin/python bench/dgl_link.py split.npz --fanouts 10,25 --hidden 256 --max-steps 200

Input: one .npz holding what both systems must share, so they train on the same message-passing
graph, training edges, test edges and test negatives: ``src``/``dst`` (the message-passing
graph, both directions of every undirected edge), ``feat``, ``train_src``/``train_dst`` (each
undirected training edge once), ``test_src``/``test_dst``/``test_neg`` [n, K].

Model: GraphSAGE-mean, ReLU and dropout between layers, output width = hidden, dot-product
predictor, binary cross-entropy on logits; weights initialised as PyTorch's ``nn.Linear``
does, as hpcgnn's are (``--init torch``, default), or DGL's own Glorot-uniform with ReLU gain
(``--init dgl``); uniform negatives (K per positive), the batch's
positives and their reverses excluded from its neighbourhoods (DGL's ``reverse_id``).
Evaluation: layer-wise full-neighbourhood inference, test ROC-AUC on each positive against its
first stored negative. Prints one JSON line.
"""
import argparse
import json
import time

import dgl
import dgl.nn as dglnn
import numpy as np
import torch
from scipy.stats import rankdata
from torch import nn
from torch.nn import functional as F


class SAGE(nn.Module):
    def __init__(self, in_dim, hidden, layers, dropout, init):
        super().__init__()
        dims = [in_dim] + [hidden] * layers
        self.layers = nn.ModuleList(dglnn.SAGEConv(a, b, "mean") for a, b in zip(dims, dims[1:]))
        self.dropout = nn.Dropout(dropout)
        if init == "torch":  # PyTorch's nn.Linear default, weights and bias: what hpcgnn's layers start from
            for module in self.modules():
                if isinstance(module, nn.Linear):
                    module.reset_parameters()

    def layer(self, i, block, h):
        h = self.layers[i](block, h)
        return h if i == len(self.layers) - 1 else self.dropout(F.relu(h))

    def forward(self, blocks, h):
        for i, block in enumerate(blocks):
            h = self.layer(i, block, h)
        return h


def reverse_eids(src, dst):
    """For every edge, the id of its reverse (the graph holds both directions)."""
    n = int(max(src.max(), dst.max())) + 1
    keys = src.astype(np.int64) * n + dst
    order = np.argsort(keys)
    return order[np.searchsorted(keys[order], dst.astype(np.int64) * n + src)]


def roc_auc(pos, neg):
    ranks = rankdata(np.concatenate([pos, neg]))
    return float((ranks[:pos.size].sum() - pos.size * (pos.size + 1) / 2) / (pos.size * neg.size))


@torch.no_grad()
def inference(model, g, feat, batch_size):
    model.eval()
    sampler = dgl.dataloading.MultiLayerFullNeighborSampler(1)
    h = feat
    for i in range(len(model.layers)):
        out = torch.empty(g.num_nodes(), model.layers[i]._out_feats)
        loader = dgl.dataloading.DataLoader(g, torch.arange(g.num_nodes()), sampler, batch_size=batch_size)
        for input_nodes, output_nodes, blocks in loader:
            out[output_nodes] = model.layer(i, blocks[0], h[input_nodes])
        h = out
    model.train()
    return h


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("data")
    parser.add_argument("--fanouts", default="10,25")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--negatives", type=int, default=1)
    parser.add_argument("--lr", type=float, default=0.003)
    parser.add_argument("--dropout", type=float, default=0.5)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--max-steps", type=int, default=0, help="steps per epoch (0: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch and DGL threads")
    parser.add_argument("--init", choices=("torch", "dgl"), default="torch",
                        help="weight initialisation: PyTorch's nn.Linear default (hpcgnn's) or DGL's Glorot")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if hasattr(dgl.utils, "set_num_threads"):
        dgl.utils.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    dgl.seed(args.seed)
    d = np.load(args.data)
    src, dst = d["src"], d["dst"]
    g = dgl.graph((torch.from_numpy(src), torch.from_numpy(dst)), num_nodes=d["feat"].shape[0])
    feat = torch.from_numpy(d["feat"]).float()
    keys = src.astype(np.int64) * g.num_nodes() + dst
    order = np.argsort(keys)
    train_keys = d["train_src"].astype(np.int64) * g.num_nodes() + d["train_dst"]
    train_eids = torch.from_numpy(order[np.searchsorted(keys[order], train_keys)])
    fanouts = [int(f) for f in args.fanouts.split(",")]
    sampler = dgl.dataloading.as_edge_prediction_sampler(
        dgl.dataloading.NeighborSampler(fanouts), exclude="reverse_id",
        reverse_eids=torch.from_numpy(reverse_eids(src, dst)),
        negative_sampler=dgl.dataloading.negative_sampler.Uniform(args.negatives))
    loader = dgl.dataloading.DataLoader(g, train_eids, sampler, batch_size=args.batch_size, shuffle=True)
    model = SAGE(feat.shape[1], args.hidden, len(fanouts), args.dropout, args.init)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    timed_s, timed_edges, losses = 0.0, 0, []
    for _ in range(args.epochs):
        t0 = time.perf_counter()
        for step, (input_nodes, pair, neg_pair, blocks) in enumerate(loader):
            h = model(blocks, feat[input_nodes])
            pu, pv = pair.edges()
            nu, nv = neg_pair.edges()
            pos = (h[pu] * h[pv]).sum(1)
            neg = (h[nu] * h[nv]).sum(1)
            loss = F.binary_cross_entropy_with_logits(torch.cat([pos, neg]),
                                                      torch.cat([torch.ones_like(pos), torch.zeros_like(neg)]))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(float(loss))
            timed_edges += pu.shape[0]
            if args.max_steps and step + 1 >= args.max_steps:
                break
        timed_s += time.perf_counter() - t0
    t0 = time.perf_counter()
    emb = inference(model, g, feat, 10_000)
    test_src, test_dst, test_neg = (torch.from_numpy(d[k]) for k in ("test_src", "test_dst", "test_neg"))
    pos = (emb[test_src] * emb[test_dst]).sum(1).numpy()
    neg = (emb[test_src] * emb[test_neg[:, 0]]).sum(1).numpy()
    print(json.dumps({"system": "dgl", "pos_edges_per_s": timed_edges / timed_s, "train_s": timed_s,
                      "steps": len(losses), "init": args.init, "first_loss": losses[0], "last_loss": losses[-1],
                      "test_auc": roc_auc(pos, neg), "eval_s": time.perf_counter() - t0}), flush=True)


if __name__ == "__main__":
    main()
