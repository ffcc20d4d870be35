"""R-GCN and R-GAT, forward and backward, on a synthetic typed mini-batch, in float32 and bfloat16,
beside the homogeneous model of the same widths (GraphSAGE for R-GCN, GAT for R-GAT) on the same
edges with their relations ignored: what the per-relation weights and softmaxes cost.

The batch is two sampled layers with a per-relation fanout (``--fanouts 15,10``, input side
first) over ``--relations`` relations: ``--batch`` seeds, each destination with edges of
``--relations-per-node`` of the relations (``fanout`` edges each). Each relation reads its
own pool of source nodes (in a typed graph a relation's sources are of its source type), a new
source for ``--unique`` of its edges. The input rows are the per-type projection's output,
``--hidden`` wide, with a gradient (as a typed run's are); the output has ``--classes`` columns.
R-GAT's hidden layers are ``--heads`` heads of ``hidden / heads`` (so every model's hidden layer
is ``hidden`` wide). Variants alternate round by round; the figure is the median per step.

    python bench/relational_layers.py
    python bench/relational_layers.py --hidden 256,512 --threads 4
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import common  # noqa: E402
from hpcgnn import nn as hnn  # noqa: E402
from hpcgnn.nn.aggregate import precision_note  # noqa: E402
from hpcgnn.nn.config import ModelConfig  # noqa: E402
from hpcgnn.sampling import Block  # noqa: E402

#: the relational model and the homogeneous one of the same widths it is compared with
PAIRS = {"rgcn": "sage", "rgat": "gat"}


def typed_block(rng, num_dst, fanout, relations, per_node, unique):
    """One sampled layer: each destination has ``fanout`` edges of ``per_node`` random relations,
    grouped by relation ascending; relation r's sources come from its own pool."""
    chosen = np.sort(np.argsort(rng.random((num_dst, relations)), axis=1)[:, :per_node], axis=1)
    etype = np.repeat(chosen.reshape(-1), fanout)
    pool = max(1, int(num_dst * per_node * fanout * unique / relations))
    src = num_dst + etype * pool + rng.integers(0, pool, etype.shape[0])
    used, src = np.unique(src, return_inverse=True)  # number the used sources after the destinations
    num_src = num_dst + int(used.shape[0])
    indptr = np.arange(0, num_dst * per_node * fanout + 1, per_node * fanout, dtype=np.int64)
    block = Block(num_src, num_dst, indptr, (num_dst + src.reshape(-1)).astype(np.int64),
                  np.arange(etype.shape[0], dtype=np.int64))
    block.etype = etype.astype(np.int64)
    return block


def make_blocks(args):
    rng = np.random.default_rng(0)
    blocks, num_dst = [], args.batch
    for fanout in reversed(args.fanouts):  # from the seeds outwards
        block = typed_block(rng, num_dst, fanout, args.relations, args.relations_per_node, args.unique)
        blocks.insert(0, block)
        num_dst = block.num_src
    return blocks


def build(name, hidden, args, precision):
    heads = args.heads if name in ("rgat", "gat") else 1
    config = ModelConfig(model=name, hidden=hidden // heads, layers=len(args.fanouts), heads=heads, dropout=0.5,
                         precision=precision)
    torch.manual_seed(0)
    return hnn.build_model(config, hidden, args.classes, num_relations=args.relations)


def step(model, blocks, x):
    """One forward and backward pass over fresh block tensors (a training step's); seconds."""
    start = time.perf_counter()
    out = model(blocks, x)
    out.backward(torch.ones_like(out))
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fanouts", type=lambda s: [int(v) for v in s.split(",")], default=[15, 10])
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--relations", type=int, default=8)
    parser.add_argument("--relations-per-node", type=int, default=3)
    parser.add_argument("--unique", type=float, default=0.3)
    parser.add_argument("--hidden", type=lambda s: [int(v) for v in s.split(",")], default=[256, 512])
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--classes", type=int, default=19)
    parser.add_argument("--models", default="rgcn,rgat")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", help="append this run's record here instead of bench/results/<script>.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    common.print_header(f"R-GCN and R-GAT layer stacks, forward + backward, {args.threads} thread(s)")
    print(f"# bf16 computes as: {precision_note('bf16')}")
    blocks = make_blocks(args)
    shape = " -> ".join(f"{b.num_src} src / {b.num_edges} edges" for b in blocks) + f" -> {blocks[-1].num_dst} seeds"
    print(f"# batch: {shape}, {args.relations} relations, {args.relations_per_node} per destination")
    rows = []
    print("| model | hidden | precision | ms per step | vs fp32 | vs homogeneous same precision |")
    print("|---|---|---|---|---|---|")
    for hidden in args.hidden:
        x = torch.randn(blocks[0].num_src, hidden, requires_grad=True)
        for name in args.models.split(","):
            variants = [(model, precision) for model in (name, PAIRS[name]) for precision in ("fp32", "bf16")]
            models = {v: build(v[0], hidden, args, v[1]) for v in variants}
            times = {v: [] for v in variants}
            step(models[variants[0]], blocks, x)  # first-use costs (thread pools, oneDNN primitives)
            for _ in range(args.rounds):
                for v in variants:
                    for _ in range(args.repeats):
                        times[v].append(step(models[v], blocks, x))
            ms = {v: statistics.median(t) * 1e3 for v, t in times.items()}
            for precision in ("fp32", "bf16"):
                row = {"model": name, "hidden": hidden, "precision": precision, "ms": round(ms[(name, precision)], 1),
                       "vs_fp32": round(ms[(name, precision)] / ms[(name, "fp32")], 3),
                       "homogeneous": PAIRS[name], "homogeneous_ms": round(ms[(PAIRS[name], precision)], 1),
                       "vs_homogeneous": round(ms[(name, precision)] / ms[(PAIRS[name], precision)], 3)}
                rows.append(row)
                print(f"| {name} | {hidden} | {precision} | {row['ms']:.1f} | {row['vs_fp32']:.2f} | "
                      f"{row['vs_homogeneous']:.2f} ({PAIRS[name]} {row['homogeneous_ms']:.1f} ms) |", flush=True)
    common.record(rows, path=args.json, title="R-GCN and R-GAT stacks, forward and backward, one synthetic typed batch",
                  batch={"fanouts": args.fanouts, "batch": args.batch, "relations": args.relations,
                         "relations_per_node": args.relations_per_node, "unique": args.unique,
                         "sources": [b.num_src for b in blocks], "edges": [b.num_edges for b in blocks],
                         "threads": args.threads})


if __name__ == "__main__":
    main()
