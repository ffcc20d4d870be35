"""The layers' kernels, compiled against torch (``--kernels torch``), per operation, forward and
backward: the aggregation (``spmm``), GAT's attention (edge softmax and the per-head weighted sum)
and dropout, in float32 and bfloat16, on a block of the size a 2-layer model's mini-batch has
(``--dst`` destinations, ``--fanout`` sampled in-edges each, ``--src`` sources).

On the CPU both paths run (``--threads`` torch threads, the compiled kernels use as many); on a
CUDA device, where one exists, the torch path runs there too (the GPU's only path). Each
configuration runs ``--repeats`` calls per round and the variants alternate round by round; the
figure is the median per call in milliseconds.

    python bench/torch_kernels.py
    python bench/torch_kernels.py --dst 2000 --src 20000 --rounds 3   # quick
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
from hpcgnn.nn import kernels  # noqa: E402
from hpcgnn.nn.aggregate import CSR, spmm  # noqa: E402
from hpcgnn.nn.attention import edge_softmax, head_spmm  # noqa: E402


def synchronise(device):
    if device == "cuda":
        torch.cuda.synchronize()


def operations(matrix, loops, args, dtype, device):
    """name -> a function running that operation forward and backward once, on ``device``."""
    gen = torch.Generator().manual_seed(0)
    width, heads = args.width, args.heads
    h = torch.randn(matrix.num_cols, width, generator=gen).to(dtype).to(device).requires_grad_()
    upstream = torch.randn(matrix.num_rows, width, generator=gen).to(dtype).to(device)
    score_src = torch.randn(loops.num_cols, heads, generator=gen).to(device).requires_grad_()
    score_dst = torch.randn(loops.num_rows, heads, generator=gen).to(device).requires_grad_()
    z = torch.randn(loops.num_cols, width, generator=gen).to(dtype).to(device).requires_grad_()
    dropout = hnn.Dropout(0.5, relu=True)
    rows = torch.randn(matrix.num_rows, width, generator=gen).to(dtype).to(device).requires_grad_()

    def aggregate():
        spmm(matrix, h).backward(upstream)

    def attention():
        alpha = edge_softmax(loops, score_src, score_dst)
        head_spmm(loops, z, alpha).backward(upstream)

    def relu_dropout():
        dropout(rows).backward(upstream)

    return {"spmm": aggregate, "attention": attention, "relu_dropout": relu_dropout}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dst", type=int, default=10_000, help="destinations of the block")
    parser.add_argument("--src", type=int, default=100_000, help="sources of the block")
    parser.add_argument("--fanout", type=int, default=25)
    parser.add_argument("--width", type=int, default=256, help="row width (all heads together)")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", help="append this run's record here instead of bench/results/<script>.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    common.print_header(f"torch kernels against compiled, forward + backward, {args.threads} CPU thread(s)")
    print(f"# devices: {', '.join(devices)}"
          + (f" ({torch.cuda.get_device_name(0)})" if "cuda" in devices else " (no CUDA device)"), flush=True)

    rng = np.random.default_rng(1)
    indptr = np.arange(0, args.dst * args.fanout + 1, args.fanout, dtype=np.int64)
    col = rng.integers(0, args.src, args.dst * args.fanout).astype(np.int64)
    mean = CSR(indptr, col, np.full(col.shape[0], 1.0 / args.fanout, np.float32), args.src)
    with_loops = CSR(indptr + np.arange(args.dst + 1), np.insert(col, indptr[1:], np.arange(args.dst)), None,
                     args.src)
    variants = [("compiled", "cpu"), ("torch", "cpu")] + [("torch", "cuda")] * ("cuda" in devices)

    rows = []
    for dtype, precision in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
        ops = {variant: operations(mean, with_loops, args, dtype, variant[1]) for variant in variants}
        for op in ops[variants[0]]:
            times = {variant: [] for variant in variants}
            for round_ in range(args.rounds + 1):  # round 0 warms up (device copies, caches)
                for variant in variants:
                    path, device = variant
                    with kernels.using(path):
                        synchronise(device)
                        start = time.perf_counter()
                        for _ in range(args.repeats):
                            ops[variant][op]()
                        synchronise(device)
                    if round_:
                        times[variant].append((time.perf_counter() - start) / args.repeats * 1e3)
            row = {"op": op, "precision": precision}
            for (path, device), values in times.items():
                row[f"{path}_{device}_ms"] = round(statistics.median(values), 3)
            row["torch_cpu_over_compiled"] = round(row["torch_cpu_ms"] / row["compiled_cpu_ms"], 2)
            rows.append(row)
            print("  ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    common.record(rows, path=args.json, title=f"The layers' kernels per operation, forward and backward: compiled "
                  f"against torch ({args.threads} CPU thread(s); CUDA where present), ms per call",
                  block={"dst": args.dst, "src": args.src, "fanout": args.fanout, "width": args.width,
                         "heads": args.heads}, devices=devices)


if __name__ == "__main__":
    main()
