"""A cost model of a training epoch, from measurements here, for ogbn-papers100M-sized graphs.

Per-step unit costs come from hpcgnn's own measured runs (the 1M-node medium graph of
``bench/train.py`` and the 5M-node graph of ``bench/scale.py``, both on 2 ranks of
this machine): each run's per-step phase times (slowest rank), divided by that step's work,
counted by sampling the same graph with the same loader (``--fanouts 10,25``, batch 1000):

- sampling: seconds per sampled edge;
- gather: seconds per byte of input-feature rows (shared memory here: no row crossed a network);
- compute: seconds per FLOP of the 2-layer GraphSAGE (forward GEMMs + aggregation, x3 for backward);
- Allreduce: an MPI microbenchmark on 2 ranks fits latency + bytes / bandwidth;
- gather over the RMA route: ``bench/gather.py``'s DistTensor workers with ``HPCGNN_FORCE_RMA=1``;
- GEMM: one core's matmul in fp32 and bf16;
- partitioning: seconds per edge (symmetrized) per rank of the 5M graph's ``--method multilevel`` run.

Each run's unit costs predict the other run's epoch (the check). The model then predicts an
epoch of ogbn-papers100M (111M nodes, 3.2B edges symmetrized, 128-d features, 172 classes,
1.21M training nodes) on 16, 32 and 64 nodes under stated assumptions (ranks per node,
network, the remote fraction of gathered rows, the per-step work of the 5M graph), beside
DistDGL (13 s/epoch on 16 machines) and DistGNN-MB (2.0 s/epoch on 32 nodes).

    python bench/costmodel.py               # needs bench/train.py's and bench/scale.py's runs
"""
import argparse
import json
import math
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

HIDDEN, BATCH, FANOUTS = 256, 1000, "10,25"
#: the measured runs: (name, parts, metrics file)
RUNS = (("medium (1M nodes)", "train_medium_2", "train_train_medium_2_2_shm_fp32.jsonl"),
        ("5M-node graph", "scale_5000000_125000000_100_p2", "scale_train.jsonl"))
PAPERS = {"nodes": 111_059_956, "edges": 3_231_371_744, "feat": 128, "classes": 172, "train": 1_207_179}
PEERS = (("DistDGL (paper)", 16, 13.0), ("DistGNN-MB (paper)", 32, 2.0))
#: assumptions for the cluster: ranks per node (one core each, as measured here) and networks
RANKS_PER_NODE = 32
#: owners one step reads from, at most (an assumption: a batch's rows come from at most this many ranks)
OWNERS_PER_STEP = 64
NETWORKS = {"InfiniBand HDR 200 Gb/s": (2e-6, 22e9), "Ethernet 25 Gb/s": (15e-6, 2.8e9)}

COUNT_SCRIPT = r"""
import json, sys
import numpy as np
from hpcgnn import DistGraph, NeighborSampler, NodeDataLoader, node_split
from hpcgnn.runtime.comm import world
from hpcgnn.runtime.abort import install_abort_hook
install_abort_hook()  # an error on one rank ends the job instead of leaving the others waiting
comm = world()
g = DistGraph(sys.argv[1], comm)
loader = NodeDataLoader(g, node_split("train_mask", g), NeighborSampler([int(f) for f in sys.argv[2].split(",")]),
                        batch_size=int(sys.argv[3]), seed=0)
rows = []
for i, batch in enumerate(loader):
    rows.append([batch.num_sampled_edges, batch.input_gids.shape[0]]
                + [x for b in batch.blocks for x in (b.num_dst, b.num_edges)])
    if i == 29:
        break
mean = np.mean(comm.allgather(np.mean(rows, axis=0)), axis=0)
if comm.rank == 0:
    print(json.dumps({"feat": int(g.ndata["feat"].shape[1]), "mean": mean.tolist()}))
g.close()
"""

ALLREDUCE_SCRIPT = r"""
import json, time
import numpy as np
from mpi4py import MPI
from hpcgnn.runtime.comm import world
from hpcgnn.runtime.abort import install_abort_hook
install_abort_hook()  # an error on one rank ends the job instead of leaving the others waiting
comm = world()
out = []
for size in (1 << 3, 1 << 10, 1 << 14, 1 << 18, 1 << 21, 1 << 23):
    buf = np.ones(size // 4, np.float32)
    reps = 200 if size < 1 << 18 else 20
    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(reps):
        comm.Allreduce(MPI.IN_PLACE, buf)
    out.append((size, (time.perf_counter() - t0) / reps))
if comm.rank == 0:
    print(json.dumps(out))
"""


def step_flops(counts, feat, classes):
    """FLOPs of one training step from its blocks: per layer two GEMMs (self and neighbours,
    dst x d_in x d_out each) and the aggregation (edges x d_in); backward counted as twice forward."""
    dims = [(feat, HIDDEN), (HIDDEN, classes)]
    blocks = [counts[2 + 2 * i:4 + 2 * i] for i in range(len(dims))]
    forward = sum(4 * dst * d_in * d_out + edges * d_in for (dst, edges), (d_in, d_out) in zip(blocks, dims))
    return 3 * forward


def measured_run(parts, metrics, mpiexec):
    with open(metrics) as fh:
        records = [json.loads(line) for line in fh]
    epoch = [r for r in records if "epoch" in r and not r.get("final")][-1]
    with open(os.path.join(parts, "meta.json")) as fh:
        meta = json.load(fh)
    classes = _classes(parts, meta)
    out = subprocess.run([*mpiexec, str(meta["num_parts"]), sys.executable, "-c", COUNT_SCRIPT, parts, FANOUTS,
                          str(BATCH)], check=True, capture_output=True, text=True,
                         env=dict(os.environ, OMP_NUM_THREADS="1"))
    counted = json.loads(out.stdout.strip().splitlines()[-1])
    steps = epoch["steps"]
    phase = {k: v[1] / steps for k, v in epoch["phases_s"].items()}  # slowest rank, per step
    mean = counted["mean"]
    work = {"edges": mean[0], "bytes": mean[1] * counted["feat"] * 4,
            "flops": step_flops(mean, counted["feat"], classes)}
    ranks = meta["num_parts"]
    return {"epoch_s": epoch["epoch_time_s"], "steps": steps, "ranks": ranks, "phase": phase, "counts": mean,
            "work": work, "grad_bytes": epoch.get("grad_bytes_per_step", 0),
            "memory": {"rss_bytes": max(records[-1]["peak_rss_MiB"]) * 2**20, "edges": meta["num_edges"] / ranks,
                       "feat_bytes": meta["num_nodes"] / ranks * counted["feat"] * 4},
            "units": {"sample": phase["sample"] / work["edges"], "gather": phase["gather"] / work["bytes"],
                      "compute": phase["compute"] / work["flops"]}}


def _classes(parts, meta):
    """The number of classes: the largest label in the part files, plus one."""
    import h5py  # deferred: only when meta.json does not say

    largest = 0
    for entry in meta["parts"]:
        with h5py.File(os.path.join(parts, entry["file"]), "r") as h5:
            largest = max(largest, int(h5["label"][()].max()))
    return largest + 1


def memory_fit(runs):
    """Bytes per local edge and a fixed base per rank, from the runs' peak RSS less their feature rows."""
    (e1, y1), (e2, y2) = [(r["memory"]["edges"], r["memory"]["rss_bytes"] - r["memory"]["feat_bytes"])
                          for r in runs.values()]
    per_edge = (y2 - y1) / (e2 - e1)
    return {"base_bytes": y1 - per_edge * e1, "bytes_per_edge": per_edge}


def allreduce_fit(mpiexec):
    out = subprocess.run([*mpiexec, "2", sys.executable, "-c", ALLREDUCE_SCRIPT], check=True, capture_output=True,
                         text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    points = json.loads(out.stdout.strip().splitlines()[-1])
    sizes = [s for s, _ in points]
    times = [t for _, t in points]
    beta = (times[-1] - times[0]) / (sizes[-1] - sizes[0])  # seconds per byte, large messages
    return {"alpha_s": times[0], "s_per_byte": beta, "points": points}


def rma_gather_fit(cols=128):
    """Seconds per byte of a DistTensor gather over the RMA route (passive-target Rget, as
    between nodes; here through shared memory), 10,000 random rows a gather on 2 ranks."""
    import gather  # deferred: the gather benchmark's own workers

    times = gather.run_workers(2, 1_000_000, cols, force_rma=True)["times"]
    return times["dist:10000"] / (10_000 * cols * 4)


def gemm_rates():
    """GFLOP/s of one core's [25000 x 128] x [128 x 256] matmul in fp32 and bf16."""
    import time

    import torch  # deferred: heavy

    torch.set_num_threads(1)
    rates = {}
    for dtype in (torch.float32, torch.bfloat16):
        a, b = torch.randn(25_000, 128, dtype=dtype), torch.randn(128, 256, dtype=dtype)
        torch.matmul(a, b)
        t0 = time.perf_counter()
        for _ in range(20):
            torch.matmul(a, b)
        rates[str(dtype).split(".")[-1]] = 20 * 2 * 25_000 * 128 * 256 / (time.perf_counter() - t0) / 1e9
    return rates


def partition_rate(parts):
    """Seconds per edge (after symmetrizing) per rank of ``--method multilevel`` (read,
    clean-up, partition, write) in a measured run."""
    with open(os.path.join(parts, "meta.json")) as fh:
        meta = json.load(fh)
    src, p = meta["source"], meta["partitioner"]
    seconds = src["read_s"] + src["prepare_s"] + p["assign_s"] + p["write_s"]
    return seconds / (meta["num_edges"] / p["ranks"])


def predict_step(units, work, remote_fraction, network, ranks, grad_bytes):
    """One step's seconds: local phases at the measured unit costs, remote rows through the RMA
    route (its measured software cost) and the network."""
    alpha, bandwidth = network
    local = units["sample"] * work["edges"] + units["compute"] * work["flops"]
    gather = (units["gather"] * work["bytes"] * (1 - remote_fraction)
              + remote_fraction * work["bytes"] * (units["rma"] + 1 / bandwidth))
    gather += alpha * min(ranks - 1, OWNERS_PER_STEP)  # one read per owner a batch asks
    allreduce = 2 * math.log2(max(ranks, 2)) * alpha + 2 * (ranks - 1) / ranks * grad_bytes / bandwidth
    return local + gather + allreduce


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="append this run's record here instead of bench/results/<script>.json")
    args = parser.parse_args()
    common.print_header("epoch cost model")
    mpiexec = [os.path.join(os.path.dirname(sys.executable), "mpiexec"), "-n"]
    runs = {}
    for name, parts, metrics in RUNS:
        parts, metrics = os.path.join(common.WORK, parts), os.path.join(common.WORK, metrics)
        if not (os.path.exists(parts) and os.path.exists(metrics)):
            sys.exit(f"missing {parts} or {metrics}: run bench/train.py and bench/scale.py first")
        runs[name] = measured_run(parts, metrics, mpiexec)
    print("| run | steps | per step: sample / gather / compute / allreduce ms | sampled edges | input MB | "
          "GFLOP | s per edge | s per byte | s per FLOP |\n|---|---|---|---|---|---|---|---|---|")
    for name, r in runs.items():
        p, w, u = r["phase"], r["work"], r["units"]
        print(f"| {name} | {r['steps']} | {1e3 * p['sample']:.1f} / {1e3 * p['gather']:.1f} / "
              f"{1e3 * p['compute']:.1f} / {1e3 * p['allreduce']:.1f} | {w['edges']:,.0f} | {w['bytes'] / 1e6:.1f} | "
              f"{w['flops'] / 1e9:.1f} | {u['sample']:.2e} | {u['gather']:.2e} | {u['compute']:.2e} |")
    fit = allreduce_fit(mpiexec)
    print(f"# Allreduce on 2 ranks (shared memory): latency {fit['alpha_s'] * 1e6:.1f} us, "
          f"{1 / fit['s_per_byte'] / 1e9:.2f} GB/s for large messages")
    rma = rma_gather_fit()
    for r in runs.values():
        r["units"]["rma"] = rma
    print(f"# gather over the RMA route (2 ranks, 10,000 rows of 128 floats): {1 / rma / 1e9:.2f} GB/s, "
          f"{rma:.2e} s per byte, against {1 / runs[RUNS[-1][0]]['units']['gather'] / 1e9:.2f} GB/s in the "
          "training run's shared-memory gather")
    rates = gemm_rates()
    print(f"# one core's matmul: fp32 {rates['float32']:.0f} GFLOP/s, bf16 {rates['bfloat16']:.0f} GFLOP/s "
          f"({rates['bfloat16'] / rates['float32']:.1f}x)")
    seconds_per_edge = partition_rate(os.path.join(common.WORK, RUNS[-1][1]))
    print(f"# partitioning (--method multilevel, the 5M run): {seconds_per_edge * 1e9:.0f} ns per edge "
          f"(symmetrized) per rank")
    print("# check: each run's unit costs predict the other's epoch (shared memory, its own Allreduce fit)")
    here = (fit["alpha_s"], 1 / fit["s_per_byte"])
    checks = []
    for (a, ra), (b, rb) in ((x, y) for x in runs.items() for y in runs.items() if x[0] != y[0]):
        step = predict_step(ra["units"], rb["work"], 0.0, here, rb["ranks"], rb["grad_bytes"])
        predicted = step * rb["steps"]
        checks.append({"units_from": a, "predicted_run": b, "predicted_s": predicted, "measured_s": rb["epoch_s"]})
        print(f"#   units of {a} -> {b}: predicted {predicted:.1f} s, measured {rb['epoch_s']:.1f} s "
              f"(ratio {predicted / rb['epoch_s']:.2f})")
    base = runs[RUNS[-1][0]]
    counts = base["counts"]
    work = {"edges": counts[0], "bytes": counts[1] * PAPERS["feat"] * 4,
            "flops": step_flops(counts, PAPERS["feat"], PAPERS["classes"])}
    grad = 4 * (2 * (PAPERS["feat"] * HIDDEN + HIDDEN * PAPERS["classes"]) + HIDDEN + PAPERS["classes"])
    mem = memory_fit(runs)
    print(f"# memory per rank fitted on the two runs: {mem['base_bytes'] / 2**30:.2f} GiB + "
          f"{mem['bytes_per_edge']:.1f} B per local edge + the feature rows")
    print(f"# ogbn-papers100M, {RANKS_PER_NODE} ranks per node, batch {BATCH} per rank, per-step work of the 5M "
          "graph with 128-d rows; rows owned on the same node come through shared memory; the remote fraction "
          "= the edge cut at as many parts as nodes, fitted here (15.8% at 2 parts, 23.7% at 4: +7.9 points "
          "per doubling)")
    print("| nodes | ranks | steps/epoch | network | remote rows | step ms | step ms, bf16 GEMM bound | "
          "predicted epoch s | memory per rank GiB | partition s | peer |\n" + "|---" * 11 + "|")
    predictions = []
    for nodes in (16, 32, 64):
        ranks = nodes * RANKS_PER_NODE
        remote = min(0.95, 0.158 + 0.079 * (math.log2(nodes) - 1))
        steps = math.ceil(PAPERS["train"] / (BATCH * ranks))
        memory = (mem["base_bytes"] + mem["bytes_per_edge"] * PAPERS["edges"] / ranks
                  + PAPERS["nodes"] / ranks * PAPERS["feat"] * 4) / 2**30
        peer = next((f"{p}: {s} s" for p, n, s in PEERS if n == nodes), "")
        for net_name, network in NETWORKS.items():
            step = predict_step(base["units"], work, remote, network, ranks, grad)
            # a bound: the whole compute phase at the bf16 matmul rate
            bf16_units = dict(base["units"], compute=base["units"]["compute"] * rates["float32"] / rates["bfloat16"])
            step_bf16 = predict_step(bf16_units, work, remote, network, ranks, grad)
            partition_s = seconds_per_edge * PAPERS["edges"] / ranks
            predictions.append({"nodes": nodes, "ranks": ranks, "network": net_name, "steps": steps, "step_s": step,
                                "step_bf16_bound_s": step_bf16, "remote_fraction": remote, "epoch_s": steps * step,
                                "memory_GiB": memory, "partition_s": partition_s})
            print(f"| {nodes} | {ranks} | {steps} | {net_name} | {remote:.2f} | {1e3 * step:.1f} | "
                  f"{1e3 * step_bf16:.1f} | {steps * step:.2f} | {memory:.2f} | {partition_s:.0f} | {peer} |")
    unit_rows = [{"run": name, "steps": r["steps"],
                  **{f"{phase} ms per step": 1e3 * r["phase"][phase] for phase in ("sample", "gather", "compute",
                                                                                  "allreduce")},
                  "sampled edges": r["work"]["edges"], "input MB": r["work"]["bytes"] / 1e6,
                  "GFLOP": r["work"]["flops"] / 1e9, "s per edge": f"{r['units']['sample']:.2e}",
                  "s per byte": f"{r['units']['gather']:.2e}", "s per FLOP": f"{r['units']['compute']:.2e}"}
                 for name, r in runs.items()]
    common.record(unit_rows, path=args.json, table="unit costs", title="Unit costs from two measured epochs")
    common.record(predictions, path=args.json, table="predictions", title="Predicted ogbn-papers100M epochs",
                  runs=runs, allreduce=fit, checks=checks, memory_fit=mem, rma_s_per_byte=rma, gemm_GFLOPs=rates,
                  partition_s_per_edge_per_rank=seconds_per_edge)


if __name__ == "__main__":
    main()
