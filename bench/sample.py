"""Sampling benchmark: hpcgnn's NeighborSampler / NodeDataLoader vs DGL 2.1, side by side.

One rank, one thread, fanouts 10,25 (DGL's ``--fan_out 10,25``: 25 neighbours of each seed,
then 10 of each of those), batches of 1000 random training seeds, on the symmetrized RMAT
graphs of 100k nodes / 2M edges (64 features) and 1M nodes / 25M edges (100 features).

  kernels  : NeighborSampler.sample alone (DGL: two sample_neighbors + unique, "raw")
  loader   : NodeDataLoader(prefetch=0) incl. feature + label gather in the caller's thread
             (DGL: NeighborSampler + DataLoader(num_workers=0) + index_select, "pipeline")
  prefetch : NodeDataLoader(prefetch=2): sampling and gathering on a background thread
             (DGL: NeighborSampler(prefetch_node_feats=...), "prefetch")
Then the loader with 2 ranks, where ~1/2 of the first hop's neighbours and features are remote.
Each figure is the median of 3 repeats of 50 batches after 5 warm-up batches; DGL runs
between hpcgnn's repeats in the same process order for every graph.

    python bench/sample.py                 # hpcgnn only
    python bench/sample.py --dgl           # + DGL 2.1 (its virtualenv, see bench/partition.py)
"""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

GRAPHS = {"small": (100_000, 2_000_000, 64, 10), "medium": (1_000_000, 25_000_000, 100, 20)}
FANOUTS = [10, 25]


def measure(run_batches, repeats, batches, warmup):
    rates = []
    for _ in range(repeats):
        rates.append(run_batches(batches, warmup))
    return {k: float(np.median([r[k] for r in rates])) for k in rates[0]}


def worker(path, mode, repeats, batches, warmup, batch_size):
    from hpcgnn import DistGraph, NeighborSampler, NodeDataLoader, node_split
    from hpcgnn.runtime.abort import install_abort_hook
    from hpcgnn.runtime.allocator import keep_heap_memory
    from hpcgnn.runtime.comm import mpi, world

    keep_heap_memory()  # as hpcgnn.train does
    MPI = mpi()
    install_abort_hook()  # an error on one rank ends the job instead of leaving the others waiting
    comm = world()
    graph = DistGraph(path, comm)
    train = node_split("train_mask", graph, seed=0)
    sampler = NeighborSampler(FANOUTS)

    def kernels(n, warm):
        rng = np.random.default_rng(7)
        batches_ = [rng.choice(train, batch_size, replace=False) for _ in range(n + warm)]
        edges = 0
        for i, seeds in enumerate(batches_):
            if i == warm:
                t0 = time.perf_counter()
            if i >= warm:
                edges += sampler.sample(graph, seeds, seed=i).num_sampled_edges
            else:
                sampler.sample(graph, seeds, seed=i)
        seconds = time.perf_counter() - t0
        return {"seeds_per_s": n * batch_size / seconds, "edges_per_s": edges / seconds}

    def loader_run(prefetch):
        def run(n, warm):
            usable = min(n + warm, train.shape[0] // batch_size)  # unique seeds only
            seeds = np.random.default_rng(3).permutation(train)[: usable * batch_size]
            loader = NodeDataLoader(graph, seeds, sampler, batch_size, prefetch=prefetch)
            edges, count = 0, 0
            iterator = iter(loader)
            for i, batch in enumerate(iterator):
                if i == warm:
                    t0 = time.perf_counter()
                    gathered_before = loader.stats.gather_s
                if i >= warm:
                    edges += batch.num_sampled_edges
                    count += 1
            seconds = time.perf_counter() - t0
            out = {"seeds_per_s": count * batch_size / seconds, "edges_per_s": edges / seconds,
                   "gather_ms": 1e3 * (loader.stats.gather_s - gathered_before) / count}
            if prefetch:
                out["wait_ms"] = 1e3 * loader.stats.wait_s / (count + warm)
            return out
        return run

    run = {"kernels": kernels, "loader": loader_run(0), "prefetch": loader_run(2)}[mode]
    result = measure(run, repeats, batches, warmup)
    slowest = {k: comm.allreduce(v, op=MPI.MIN) for k, v in result.items() if k.endswith("per_s")}
    result.update(slowest)
    graph.close()
    if comm.rank == 0:
        print("RESULT " + json.dumps(result), flush=True)


def run_ours(path, mode, ranks, args, force_rma=False):
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    cmd = [mpiexec, "-n", str(ranks), sys.executable, os.path.abspath(__file__), "--worker", path, "--mode", mode,
           "--repeats", str(args.repeats), "--batches", str(args.batches)]
    _, rss, out = common.timed(cmd, env={"HPCGNN_FORCE_RMA": "1" if force_rma else "0"})
    result = json.loads(next(x for x in out.splitlines() if x.startswith("RESULT "))[7:])
    result["peak_rss_MiB"] = rss
    return result


def run_dgl(python, graph, args):
    _, rss, out = common.timed([python, "bench_sample.py", "--graph", graph, "--repeats", str(args.repeats),
                                "--batches", str(args.batches)], cwd=common.ANCHOR)
    summary = json.loads(next(x for x in out.splitlines() if x.startswith("SUMMARY "))[8:])
    return summary, rss



def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker")
    parser.add_argument("--mode", default="kernels")
    parser.add_argument("--graphs", default="small,medium")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batches", type=int, default=50)
    parser.add_argument("--dgl", action="store_true")
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker, args.mode, args.repeats, args.batches, 5, 1000)
    common.print_header("sampling benchmark (fanouts 10,25, batch 1000, 1 thread per rank)")
    python = common.dgl_python() if args.dgl else None
    if args.dgl and python is None:
        sys.exit("DGL virtualenv not found (see bench/partition.py --dgl-setup)")
    print("| graph | what | hpcgnn seeds/s | hpcgnn edges/s | DGL 2.1 seeds/s | DGL edges/s | ratio |\n"
          "|---|---|---|---|---|---|---|")
    rows = []
    for tag in args.graphs.split(","):
        graph = common.ensure_graph(*GRAPHS[tag])
        one = common.ensure_parts(graph, 1, f"sample_{tag}")
        ours = {mode: run_ours(one, mode, 1, args) for mode in ("kernels", "loader", "prefetch")}
        dgl = run_dgl(python, graph, args)[0] if python else None
        names = {"kernels": ("raw", "sampling only"), "loader": ("pipe", "loader incl. gather, 1 thread"),
                 "prefetch": ("prefetch", "loader, prefetch thread")}
        for mode, (key, label) in names.items():
            mine = ours[mode]
            theirs = (dgl[f"{key}_seeds_per_s"], dgl[f"{key}_edges_per_s"]) if dgl else (float("nan"),) * 2
            print(f"| {tag} | {label} | {mine['seeds_per_s']:,.0f} | {mine['edges_per_s'] / 1e6:.2f}M "
                  f"| {theirs[0]:,.0f} | {theirs[1] / 1e6:.2f}M | {mine['seeds_per_s'] / theirs[0]:.2f} |", flush=True)
            rows.append({"graph": tag, "what": label, "hpcgnn seeds/s": mine["seeds_per_s"],
                         "hpcgnn edges/s": mine["edges_per_s"], "DGL 2.1 seeds/s": theirs[0] if dgl else None,
                         "DGL edges/s": theirs[1] if dgl else None,
                         "hpcgnn / DGL": mine["seeds_per_s"] / theirs[0] if dgl else None})
        two = common.ensure_parts(graph, 2, f"sample_{tag}")
        for route in ("shm", "rma"):
            for mode in ("loader", "prefetch"):
                r = run_ours(two, mode, 2, args, force_rma=route == "rma")
                extra = f", wait {r['wait_ms']:.2f} ms/batch" if "wait_ms" in r else ""
                print(f"| {tag} | 2 ranks, {route}, {mode} (slowest rank{extra}) | {r['seeds_per_s']:,.0f} "
                      f"| {r['edges_per_s'] / 1e6:.2f}M | | | |", flush=True)
                rows.append({"graph": tag, "what": f"2 ranks, {route}, {mode} (slowest rank{extra})",
                             "hpcgnn seeds/s": r["seeds_per_s"], "hpcgnn edges/s": r["edges_per_s"]})
    common.record(rows, title="Sampling and loading rates, fanouts 10,25, batch 1000, 1 thread per rank")


if __name__ == "__main__":
    main()
