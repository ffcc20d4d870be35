"""DGL 2.1 training an RGCN on a typed graph: the reference side of bench/hetero_speed.py's speed
comparison (run with DGL's own virtualenv, ``../shared/anchor_dgl/setup.sh``; never imported by
hpcgnn).

    $DGLENV/bin/python bench/dgl_hetero.py graph.npz --fanouts 10,15 --batch-size 1000 --threads 2

One process with ``--threads`` torch/DGL threads (hpcgnn's side: that many ranks of one thread).

Input: the typed exchange npz bench/hetero_speed.py writes from the graph it partitions for
hpcgnn: ``schema`` (JSON: node types, canonical relations, labelled type), ``num_nodes__<type>``,
per relation ``<src>__<rel>__<dst>__src`` / ``__dst`` (ids local to each type), per featured type
``feat__<type>``, and over the labelled type ``label``, ``train_mask``, ``val_mask``, ``test_mask``.

What runs is DGL's own recipe for mini-batch RGCN on a heterograph (examples/pytorch/rgcn-hetero,
``RelGraphConvLayer`` of its model.py, trained as its entity_classify_mb.py trains it):

- sampler  ``dgl.dataloading.NeighborSampler(fanouts)`` on the heterograph: an integer fanout
           draws that many in-neighbours per node *per relation* (``sample_neighbors`` on every
           canonical edge type), giving heterogeneous blocks; ``DataLoader({target: train_ids})``
- model    a per-type input projection (``nn.Linear`` per featured type; a learnable
           ``nn.Embedding`` of ``--embed-dim`` then a Linear for a type without features), then
           2 RGCN layers ``HeteroGraphConv({rel: GraphConv(norm='right', weight=False)},
           aggregate='sum')`` with one weight matrix per relation passed in, a self-loop weight
           and a bias: the mean over each relation's sampled in-neighbours, summed over relations
           (R-GCN's c_{i,r} = |N_i^r|); ReLU and dropout after the first layer
- step     cross-entropy on the seeds (all of the labelled type), Adam (SparseAdam for the
           embeddings)

One difference from the example: a destination node of a type none of whose relations sampled
an edge in the block still gets its self-loop and bias (the example drops such types from the
layer's output, so the next layer would lose them).

Measured (one JSON line each):

- ``sampling``: ``--sample-rounds`` rounds of ``--sample-batches`` batches of the loader alone
  (per-relation neighbour sampling and block construction, no features) after ``--warmup`` ones:
  the best round's seeds/s (every round's listed), and the nodes per layer and sampled edges
  per block of the first round's batches;
- ``training``: ``--epochs`` epochs over the training nodes (sampling, input rows, forward,
  backward, step): per-epoch seconds, and seeds/s over every batch after the first ``--warmup``;
  then accuracy on ``val_mask`` / ``test_mask`` by layer-wise full-neighbourhood inference
  (every node's layer-1 output from all its in-neighbours, then the labelled type's logits),
  model in eval mode: what hpcgnn's evaluation computes, so both are scored the same way.
"""
import argparse
import json
import time

import dgl
import dgl.nn as dglnn
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

SEP = "__"


def load(path):
    """``(heterograph, schema dict, {type: feature tensor}, labels, {mask name: ids})``."""
    data = np.load(path)
    schema = json.loads(str(data["schema"]))
    counts = {t: int(data[f"num_nodes{SEP}{t}"]) for t in schema["node_types"]}
    edges = {}
    for src_type, rel, dst_type in schema["relations"]:
        key = SEP.join((src_type, rel, dst_type))
        edges[(src_type, rel, dst_type)] = (torch.from_numpy(data[key + SEP + "src"].astype(np.int64)),
                                            torch.from_numpy(data[key + SEP + "dst"].astype(np.int64)))
    g = dgl.heterograph(edges, num_nodes_dict=counts)
    feats = {t: torch.from_numpy(np.ascontiguousarray(data[f"feat{SEP}{t}"], dtype=np.float32))
             for t in schema["node_types"] if f"feat{SEP}{t}" in data}
    labels = torch.from_numpy(data["label"].astype(np.int64))
    splits = {name: torch.from_numpy(np.flatnonzero(data[name])) for name in ("train_mask", "val_mask", "test_mask")
              if name in data}
    return g, schema, feats, labels, splits


class TypeInputs(nn.Module):
    """Every node type's input rows at one width: a Linear of its features, or of a learned embedding."""

    def __init__(self, g, feats, width, embed_dim):
        super().__init__()
        self.feats = feats
        self.project = nn.ModuleDict()
        self.embeds = nn.ModuleDict()
        for ntype in g.ntypes:
            if ntype in feats:
                self.project[ntype] = nn.Linear(feats[ntype].shape[1], width)
            else:
                self.embeds[ntype] = nn.Embedding(g.num_nodes(ntype), embed_dim, sparse=True)
                nn.init.normal_(self.embeds[ntype].weight, std=embed_dim ** -0.5)
                self.project[ntype] = nn.Linear(embed_dim, width)

    def forward(self, input_nodes):
        out = {}
        for ntype, ids in input_nodes.items():
            rows = self.feats[ntype][ids] if ntype in self.feats else self.embeds[ntype](ids)
            out[ntype] = self.project[ntype](rows)
        return out


class RelGraphConvLayer(nn.Module):
    """One RGCN layer as DGL's rgcn-hetero example builds it (module docstring)."""

    def __init__(self, in_dim, out_dim, rel_names, activation=None, dropout=0.0):
        super().__init__()
        self.rel_names = list(rel_names)
        self.conv = dglnn.HeteroGraphConv({rel: dglnn.GraphConv(in_dim, out_dim, norm="right", weight=False,
                                                                bias=False, allow_zero_in_degree=True)
                                           for rel in self.rel_names}, aggregate="sum")
        gain = nn.init.calculate_gain("relu")
        self.weight = nn.Parameter(torch.empty(len(self.rel_names), in_dim, out_dim))
        nn.init.xavier_uniform_(self.weight, gain=gain)
        self.loop_weight = nn.Parameter(torch.empty(in_dim, out_dim))
        nn.init.xavier_uniform_(self.loop_weight, gain=gain)
        self.bias = nn.Parameter(torch.zeros(out_dim))
        self.activation = activation
        self.dropout = nn.Dropout(dropout)

    def forward(self, block, h):
        weights = {rel: {"weight": self.weight[i]} for i, rel in enumerate(self.rel_names)}
        out = self.conv(block, h, mod_kwargs=weights)
        result = {}
        for ntype in block.dsttypes:
            n_dst = block.num_dst_nodes(ntype)
            if n_dst == 0 or ntype not in h:
                continue
            x = h[ntype][:n_dst] @ self.loop_weight + self.bias
            if ntype in out:
                x = x + out[ntype]
            if self.activation is not None:
                x = self.activation(x)
            result[ntype] = self.dropout(x)
        return result


class RGCN(nn.Module):
    def __init__(self, g, feats, hidden, classes, embed_dim, dropout):
        super().__init__()
        self.inputs = TypeInputs(g, feats, hidden, embed_dim)
        rels = sorted(set(g.etypes))
        self.layers = nn.ModuleList([RelGraphConvLayer(hidden, hidden, rels, F.relu, dropout),
                                     RelGraphConvLayer(hidden, classes, rels)])

    def forward(self, input_nodes, blocks):
        h = self.inputs(input_nodes)
        for layer, block in zip(self.layers, blocks):
            h = layer(block, h)
        return h


def block_sizes(blocks):
    """Nodes of each layer (input first, seeds last) and sampled edges of each block."""
    nodes = [b.num_src_nodes() for b in blocks] + [blocks[-1].num_dst_nodes()]
    return nodes, [b.num_edges() for b in blocks]


def make_loader(g, target, ids, fanouts, batch_size):
    """DGL's heterogeneous neighbour sampler over the labelled type's ``ids``, shuffled (by torch's
    global generator, seeded in :func:`main`)."""
    sampler = dgl.dataloading.NeighborSampler(fanouts)
    return dgl.dataloading.DataLoader(g, {target: ids}, sampler, batch_size=batch_size, shuffle=True,
                                      drop_last=False, num_workers=0)


def sampling(g, target, train, args) -> dict:
    """The loader alone: per-relation sampling and blocks, ``--sample-rounds`` rounds of
    ``--sample-batches`` batches after ``--warmup`` ones; the best round's seeds/s."""
    loader = make_loader(g, target, train, args.fanouts, args.batch_size)
    batches = iter(())

    def next_batch():
        nonlocal batches
        try:
            return next(batches)
        except StopIteration:  # the loader reshuffles for another pass
            batches = iter(loader)
            return next(batches)

    for _ in range(args.warmup):
        next_batch()
    rounds, shapes = [], []
    for _ in range(args.sample_rounds):
        seen, t0 = 0, time.perf_counter()
        for _ in range(args.sample_batches):
            _input_nodes, output_nodes, blocks = next_batch()
            seen += int(output_nodes[target].shape[0])
            if not rounds:
                shapes.append(block_sizes(blocks))
        rounds.append(seen / (time.perf_counter() - t0))
    best = max(rounds)
    return {"what": "sampling", "batches": args.sample_batches, "seconds": seen / best, "seeds_per_s": best,
            "rounds_seeds_per_s": rounds,
            "nodes_per_layer": np.mean([s[0] for s in shapes], axis=0).round().astype(int).tolist(),
            "edges_per_block": np.mean([s[1] for s in shapes], axis=0).round().astype(int).tolist()}


def training(g, schema, feats, labels, splits, args) -> dict:
    target = schema["target"]
    torch.manual_seed(args.seed)
    classes = int(labels.max()) + 1
    model = RGCN(g, feats, args.hidden, classes, args.embed_dim, args.dropout)
    dense = [p for name, p in model.named_parameters() if ".embeds." not in name]
    sparse = [p for name, p in model.named_parameters() if ".embeds." in name]
    optimizers = [torch.optim.Adam(dense, lr=args.lr)]
    if sparse:
        optimizers.append(torch.optim.SparseAdam(sparse, lr=args.embed_lr))
    loader = make_loader(g, target, splits["train_mask"], args.fanouts, args.batch_size)
    epoch_times, losses, done, warm_seen, warm_t0 = [], [], 0, 0, None
    for _epoch in range(args.epochs):
        model.train()
        t_epoch, loss_sum, seen = time.perf_counter(), 0.0, 0
        for input_nodes, output_nodes, blocks in loader:
            if done == args.warmup:
                warm_t0, warm_seen = time.perf_counter(), 0
            logits = model(input_nodes, blocks)[target]
            y = labels[output_nodes[target]]
            loss = F.cross_entropy(logits, y)
            for opt in optimizers:
                opt.zero_grad()
            loss.backward()
            for opt in optimizers:
                opt.step()
            loss_sum += float(loss) * y.shape[0]
            seen += y.shape[0]
            warm_seen += y.shape[0]
            done += 1
        epoch_times.append(time.perf_counter() - t_epoch)
        losses.append(loss_sum / max(seen, 1))
    warm_s = time.perf_counter() - warm_t0 if warm_t0 is not None else float("nan")
    t_eval = time.perf_counter()
    accs = evaluate(g, model, target, labels, splits, args)
    row = {"what": "training", "epochs": args.epochs, "steps": done, "epoch_time_s": epoch_times, "loss": losses,
           "train_seeds": int(splits["train_mask"].shape[0]),
           "seeds_per_s": warm_seen / warm_s if warm_t0 is not None else None,
           "epoch_seeds_per_s": int(splits["train_mask"].shape[0]) / float(np.median(epoch_times)),
           "eval_time_s": time.perf_counter() - t_eval, "evaluation": "layer-wise full-neighbourhood", **accs}
    return row


@torch.no_grad()
def evaluate(g, model, target, labels, splits, args) -> dict:
    """Accuracy of every split but train by layer-wise full-neighbourhood inference."""
    model.eval()
    sampler = dgl.dataloading.MultiLayerFullNeighborSampler(1)
    everything = {t: torch.arange(g.num_nodes(t)) for t in g.ntypes}
    h = None
    for i, layer in enumerate(model.layers):
        last = i == len(model.layers) - 1
        seeds = {target: everything[target]} if last else everything
        out = {}
        loader = dgl.dataloading.DataLoader(g, seeds, sampler, batch_size=args.eval_batch_size, shuffle=False,
                                            num_workers=0)
        for input_nodes, output_nodes, blocks in loader:
            x = model.inputs(input_nodes) if h is None else {t: h[t][ids] for t, ids in input_nodes.items()}
            y = layer(blocks[0], x)
            for t, rows in y.items():
                if t not in out:
                    out[t] = torch.empty(g.num_nodes(t), rows.shape[1])
                out[t][output_nodes[t]] = rows
        h = out
    pred = h[target].argmax(1)
    return {name.replace("_mask", "_acc"): float((pred[ids] == labels[ids]).float().mean())
            for name, ids in splits.items() if name != "train_mask"}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("graph")
    parser.add_argument("--fanouts", default="10,15", help="per layer, input layer first (DGL's order), per relation")
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--embed-dim", type=int, default=64, help="width of a featureless type's embedding")
    parser.add_argument("--lr", type=float, default=0.003)
    parser.add_argument("--embed-lr", type=float, default=0.01)
    parser.add_argument("--dropout", type=float, default=0.5)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=3, help="batches before the timing starts")
    parser.add_argument("--sample-batches", type=int, default=30, help="timed batches of the sampler alone, a round")
    parser.add_argument("--sample-rounds", type=int, default=1, help="rounds of the sampler alone, the best taken")
    parser.add_argument("--eval-batch-size", type=int, default=20000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip", default="", help="comma-separated: sampling, training")
    args = parser.parse_args()
    args.fanouts = [int(f) for f in args.fanouts.split(",")]
    torch.set_num_threads(args.threads)
    if hasattr(dgl.utils, "set_num_threads"):
        dgl.utils.set_num_threads(args.threads)
    t0 = time.perf_counter()
    g, schema, feats, labels, splits = load(args.graph)
    print(json.dumps({"what": "load", "seconds": time.perf_counter() - t0, "nodes": g.num_nodes(),
                      "edges": g.num_edges(), "dgl": dgl.__version__, "torch": torch.__version__,
                      "threads": args.threads}), flush=True)
    skip = set(filter(None, args.skip.split(",")))
    if "sampling" not in skip:
        print(json.dumps(sampling(g, schema["target"], splits["train_mask"], args)), flush=True)
    if "training" not in skip:
        print(json.dumps(training(g, schema, feats, labels, splits, args)), flush=True)


if __name__ == "__main__":
    main()
