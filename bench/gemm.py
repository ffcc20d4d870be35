"""Where a training step's compute goes, and what the layer GEMMs reach against this machine's
measured matmul peak, in float32 and bfloat16 (``--precision``), side by side in one run.

Runs under mpiexec on the medium RMAT graph's parts (the ones bench/train.py writes,
bench/work/train_medium_<ranks>): GraphSAGE 2 x 256, fanouts 10,25, batch 1000 per rank, Adam,
the gradient Allreduce; ``--steps`` steps per precision after ``--warmup`` unprofiled ones,
alternating the precisions in rounds. Rank 0 profiles its steps with torch's profiler and
sorts every operator's own time into GEMM (mm/addmm and their backward), aggregation (the
compiled CSR products), dropout/activation kernels, optimizer, and the rest; the sampler, the
feature gather and the Allreduce are timed around their calls. GEMM GFLOP/s come from the
recorded shapes (2mnk per product).

The peak: the largest rate of a [rows x k] x [k x n] product over the step's own shapes and
one large square-ish shape, 1 thread, measured in the same run before the steps (each shape's
rate alone is printed too).

    mpiexec -n 2 python bench/gemm.py            # after bench/train.py --graphs medium --ranks 2
"""
import argparse
import os
import sys
import time
from collections import defaultdict

import torch
from mpi4py import MPI

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import common  # noqa: E402
from hpcgnn import DistGraph, NeighborSampler, NodeDataLoader, node_split  # noqa: E402
from hpcgnn.nn import SAGE, set_precision  # noqa: E402
from hpcgnn.runtime.abort import install_abort_hook  # noqa: E402
from hpcgnn.runtime.comm import world  # noqa: E402
from hpcgnn.training.gradsync import FlatGradients, build_sync  # noqa: E402

GEMM_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::matmul"}
GROUPS = [("GEMM", lambda name: name in GEMM_OPS),
          ("aggregation", lambda name: name.startswith("_SpMM")),
          ("dropout/ReLU", lambda name: "Dropout" in name),
          ("optimizer", lambda name: "Optimizer" in name or "adam" in name.lower() or "foreach" in name),
          ("casts/copies", lambda name: name in ("aten::copy_", "aten::to", "aten::_to_copy", "aten::fill_",
                                                 "aten::constant_pad_nd", "aten::zero_"))]


#: the layer maps' forward shapes in a batch of this benchmark (about 26,000 input rows of 100
#: features, 7,000 middle rows of 256, 1,000 seeds and 20 classes), and the input map with its
#: inner dimension padded to a multiple of 32 (what AMX tiles take)
STEP_SHAPES = [(26000, 100, 256), (26000, 128, 256), (7000, 256, 256), (1000, 256, 20)]


def matmul_rate(rows, k, n, dtype, repeats=5) -> float:
    """GFLOP/s of one [rows x k] x [k x n] product, best of ``repeats``."""
    a, b = torch.randn(rows, k).to(dtype), torch.randn(k, n).to(dtype)
    torch.mm(a, b)
    best = min(_timed(lambda: torch.mm(a, b)) for _ in range(repeats))
    return 2 * rows * k * n / best / 1e9


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def gemm_flops(event) -> float:
    """2mnk of one recorded mm/addmm (shapes: addmm (bias, a, b), mm (a, b))."""
    shapes = [s for s in event.input_shapes if len(s) == 2]
    if len(shapes) < 2:
        return 0.0
    (m, k), (_, n) = shapes[-2], shapes[-1]
    return 2.0 * m * k * n


def profiled_steps(model, grads, sync, optimizer, loader, comm, steps):
    """``steps`` training steps as hpcgnn's train_step takes them (flat gradient buffer, its
    gradient sync, fused Adam); rank 0 returns (profiler events, phase seconds)."""
    phases = defaultdict(float)
    profiler = torch.profiler.profile(record_shapes=True) if comm.rank == 0 else None
    batches = iter(loader)
    if profiler:
        profiler.__enter__()
    for _ in range(steps):
        start = time.perf_counter()
        batch = next(batches)
        phases["sample+gather"] += time.perf_counter() - start
        start = time.perf_counter()
        grads.zero()
        logits = model(batch.blocks, batch.feat)
        loss = torch.nn.functional.cross_entropy(logits, batch.label.long())
        sync.arm(True)
        loss.backward()
        phases["forward+backward"] += time.perf_counter() - start
        start = time.perf_counter()
        sync.finish()
        phases["allreduce"] += time.perf_counter() - start
        start = time.perf_counter()
        optimizer.step()
        phases["optimizer step"] += time.perf_counter() - start
    if profiler:
        profiler.__exit__(None, None, None)
        return profiler.key_averages(group_by_input_shape=True), phases
    return None, phases


def summarise(events, phases, steps):
    """Per-step milliseconds by group and the GEMMs' GFLOP/s."""
    groups, flops, gemm_s = defaultdict(float), 0.0, 0.0
    for event in events:
        own = event.self_cpu_time_total / 1e6
        name = event.key
        group = next((g for g, match in GROUPS if match(name)), "other")
        groups[group] += own
        if name in GEMM_OPS:
            flops += gemm_flops(event) * event.count
            gemm_s += own
    compute = phases["forward+backward"] + phases["optimizer step"]
    groups["other"] = max(compute - sum(v for k, v in groups.items() if k != "other"), 0.0)
    return ({k: 1e3 * v / steps for k, v in groups.items()}, flops / max(gemm_s, 1e-12) / 1e9,
            {k: 1e3 * v / steps for k, v in phases.items()})


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", default=None, help="default: bench/work/train_medium_<ranks>")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--json", help="append this run's record here instead of bench/results/<script>.json")
    args = parser.parse_args()
    install_abort_hook()  # an error on one rank ends the job instead of leaving the others waiting
    comm = world()
    torch.set_num_threads(1)
    parts = args.parts or os.path.join(common.WORK, f"train_medium_{comm.size}")
    if comm.rank == 0:
        common.print_header(f"training-step compute split and GEMM rate, {comm.size} ranks, {parts}")
        alone = {shape: {name: matmul_rate(*shape, d, repeats=20)
                         for name, d in (("fp32", torch.float32), ("bf16", torch.bfloat16))}
                 for shape in [*STEP_SHAPES, (4096, 1024, 1024)]}
        peaks = {name: max(rates[name] for rates in alone.values()) for name in ("fp32", "bf16")}
        print(f"# matmul peak, 1 thread: fp32 {peaks['fp32']:.0f} GFLOP/s, bf16 {peaks['bf16']:.0f} GFLOP/s",
              flush=True)
        for (rows_, k, n), rates in alone.items():
            print(f"# [{rows_} x {k}] x [{k} x {n}] alone, 1 thread: fp32 {rates['fp32']:.0f} GFLOP/s, "
                  f"bf16 {rates['bf16']:.0f} GFLOP/s", flush=True)
    graph = DistGraph(parts, comm)
    train = node_split("train_mask", graph)
    classes = int(comm.allreduce(int(graph.ndata["label"].local.max()), op=MPI.MAX)) + 1
    results = {}
    for precision in ("fp32", "bf16"):
        torch.manual_seed(0)
        model = SAGE(graph.ndata["feat"].shape[1], 256, classes, dropout=0.5)
        set_precision(model, precision)
        grads = FlatGradients(model)
        sync = build_sync(grads, comm)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.003, fused=True)
        loader = NodeDataLoader(graph, train, NeighborSampler([10, 25]), batch_size=1000, shuffle=True, seed=1,
                                prefetch=0)
        profiled_steps(model, grads, sync, optimizer, loader, comm, args.warmup)
        events, phases = profiled_steps(model, grads, sync, optimizer, loader, comm, args.steps)
        loader.close()
        sync.close()
        if comm.rank == 0:
            results[precision] = summarise(events, phases, args.steps)
    graph.close()
    if comm.rank != 0:
        return
    print("| precision | step ms | sample+gather | forward+backward | allreduce | optimizer step "
          "| GEMM ms | GEMM GFLOP/s | of peak | aggregation ms | dropout/ReLU ms | casts/copies ms | other ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for precision, (groups, rate, phases) in results.items():
        step = sum(phases.values())
        row = {"precision": precision, "step_ms": step, "phases_ms": phases, "groups_ms": groups,
               "gemm_gflops": rate, "peak_gflops": peaks[precision]}
        rows.append(row)
        print(f"| {precision} | {step:.1f} | {phases['sample+gather']:.1f} | {phases['forward+backward']:.1f} "
              f"| {phases['allreduce']:.1f} | {phases['optimizer step']:.1f} | {groups.get('GEMM', 0):.1f} "
              f"| {rate:.0f} | {rate / peaks[precision]:.0%} | {groups.get('aggregation', 0):.1f} "
              f"| {groups.get('dropout/ReLU', 0):.1f} | {groups.get('casts/copies', 0):.1f} "
              f"| {groups.get('other', 0):.1f} |", flush=True)
    common.record(rows, path=args.json, title=f"Where a step's time goes (ms per step), {comm.size} ranks",
                  figures={f"matmul peak {name}, 1 thread, GFLOP/s": rate for name, rate in peaks.items()},
                  alone_gflops=[{"shape": list(shape), **rates} for shape, rates in alone.items()])


if __name__ == "__main__":
    main()
