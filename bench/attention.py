"""GAT's attention layer, forward and backward, in one process: the compiled edge softmax and
multi-head weighted sum (hpcgnn.nn.attention) beside torch's gather-multiply-scatter over a
per-edge message tensor (the layer's previous form, kept here as the baseline), in float32 and
bfloat16, on blocks of the sizes a 2-layer GAT's mini-batches have.

Each configuration runs the layer ``--repeats`` times per round and alternates the variants
round by round; the figure is the median per call. The time of the layer's dense maps alone (its projection
and its logit map, forward and backward) is printed beside it, so the attention's share shows.

    python bench/attention.py
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np
import torch
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import common  # noqa: E402
from hpcgnn import nn as hnn  # noqa: E402
from hpcgnn.nn.gemm import linear, linear_maps  # noqa: E402
from hpcgnn.sampling import Block  # noqa: E402


def scatter_forward(layer, block, h_src):
    """GATConv's previous forward: float32 attention over gathered per-edge messages."""
    z = linear(h_src, layer.linear.weight).float().view(-1, layer.heads, layer.out_dim)
    score_src = (z * layer.attn_src).sum(-1)
    score_dst = (z[: block.num_dst] * layer.attn_dst).sum(-1)
    loops = torch.arange(block.num_dst)
    src, dst = torch.cat([block.src, loops]), torch.cat([block.dst, loops])
    logits = F.leaky_relu(score_src[src] + score_dst[dst], layer.negative_slope)
    peak = torch.full((block.num_dst, layer.heads), float("-inf")).scatter_reduce(
        0, dst.unsqueeze(-1).expand_as(logits), logits, reduce="amax", include_self=True)
    weights = torch.exp(logits - peak[dst])
    total = torch.zeros(block.num_dst, layer.heads).index_add_(0, dst, weights)
    out = torch.zeros(block.num_dst, layer.heads, layer.out_dim).index_add_(
        0, dst, z[src] * (weights / total[dst]).unsqueeze(-1))
    return out.reshape(block.num_dst, -1) + layer.bias


def make_block(rng, num_src, num_dst, fanout):
    indptr = np.arange(0, num_dst * fanout + 1, fanout, dtype=np.int64)
    src = rng.integers(0, num_src, num_dst * fanout).astype(np.int64)
    src[:num_dst] = np.arange(num_dst)  # destinations are the first sources, as a sampler's
    return Block(num_src, num_dst, indptr, src, np.arange(src.shape[0], dtype=np.int64))


def call(layer, block, h, precision, forward):
    """One forward and backward pass; seconds."""
    start = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
        out = forward(layer, hnn.BlockTensors(block), h).float()
    out.backward(torch.ones_like(out))
    return time.perf_counter() - start


def gemm_only(layer, block, h, precision):
    """The layer's dense maps alone (its projection and its logit map), forward and backward."""
    start = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
        outs = linear_maps(h, [layer.linear.weight, layer.logit_map()])
    torch.autograd.backward(outs, [torch.ones_like(out) for out in outs])
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="append this run's record here instead of bench/results/<script>.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    common.print_header("GAT attention layer, forward + backward, one thread")
    # (name, sources, destinations, fanout, in width, heads, width per head): the input and the
    # output block of a GAT 2 x (4 x 64) with fanouts 10,25 and 1000 seeds on the medium graph
    configs = [("input block", 200_000, 11_000, 25, 100, 4, 64), ("output block", 11_000, 1_000, 10, 256, 4, 64)]
    variants = [("torch scatter", "fp32"), ("compiled", "fp32"), ("torch scatter", "bf16"), ("compiled", "bf16")]
    forwards = {"torch scatter": scatter_forward, "compiled": lambda layer, block, h: layer(block, h)}
    rows = []
    print("| block | sources x in | destinations x fanout | heads x dim | variant | precision | ms per call "
          "| vs torch scatter fp32 | GEMM alone ms | per-edge messages MiB (avoided) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, num_src, num_dst, fanout, in_dim, heads, dim in configs:
        rng = np.random.default_rng(0)
        block = make_block(rng, num_src, num_dst, fanout)
        torch.manual_seed(0)
        layer = hnn.GATConv(in_dim, dim, heads=heads)
        # the input block's rows are features (no gradient), the output block's a layer's output
        h = torch.randn(num_src, in_dim).requires_grad_(name == "output block")
        times = {v: [] for v in variants + [("gemm", "fp32"), ("gemm", "bf16")]}
        for _ in range(args.rounds):
            for variant, precision in variants:
                for _ in range(args.repeats):
                    times[(variant, precision)].append(call(layer, block, h, precision, forwards[variant]))
            for precision in ("fp32", "bf16"):
                for _ in range(args.repeats):
                    times[("gemm", precision)].append(gemm_only(layer, block, h, precision))
        base = statistics.median(times[("torch scatter", "fp32")])
        messages = (num_dst * (fanout + 1)) * heads * dim * 4 / 2**20
        for variant, precision in variants:
            ms = statistics.median(times[(variant, precision)]) * 1e3
            gemm_ms = statistics.median(times[("gemm", precision)]) * 1e3
            row = {"block": name, "num_src": num_src, "in_dim": in_dim, "num_dst": num_dst, "fanout": fanout,
                   "heads": heads, "dim": dim, "variant": variant, "precision": precision, "ms": round(ms, 2),
                   "ratio": round(ms / (base * 1e3), 3), "gemm_ms": round(gemm_ms, 2)}
            rows.append(row)
            print(f"| {name} | {num_src} x {in_dim} | {num_dst} x {fanout} | {heads} x {dim} | {variant} | {precision} "
                  f"| {ms:.1f} | {row['ratio']:.2f} | {gemm_ms:.1f} | "
                  f"{'0' if variant == 'compiled' else f'{messages:.0f}'} |", flush=True)
    common.record(rows, path=args.json, title="One GAT layer, forward and backward, one thread")


if __name__ == "__main__":
    main()
