"""Training across emulated machines against one host, side by side in one run.

The same training run (GraphSAGE 2x256, fanouts 10,25, batch 1000 per rank, as bench/train.py)
on the same partitions, once with every rank on this host (MPI moves remote rows through
shared memory) and once across N emulated machines (``tools/netns_mpirun.sh``: each
machine its own network, IPC, mount and UTS namespace, so MPI talks TCP between them, as on an
Ethernet cluster). Needs root for the namespaces.

    python bench/network.py                                   # small graph, 2 machines x 1 and 2 ranks
    python bench/network.py --graphs small,medium --cache 0,0.05,0.2 --repeats 2
    python bench/network.py --variants "default=;no-progress=--progress-ms 0;prefetch2=--prefetch 2"
    python bench/network.py --ppn 1 --cache 0.2 --distdgl     # DistDGL 2.1 across the same machines

Every variant runs across machines; the one-host run uses the defaults. ``--cache`` adds runs
with a remote-row cache sized as that fraction of the feature rows a rank's machine does not
hold. Runs alternate (host, then each variant) ``--repeats`` times, since this machine's noise
is larger than some of the differences. Prints one row per (graph, layout, variant): median
epoch time (epochs 2..N, slowest rank) and its ratio to the one-host epoch of the same round,
the per-phase maxima over ranks, the network traffic per epoch (all ranks), the cache's hit
rate, and the test accuracy. ``--distdgl`` adds DistDGL 2.1 (the anchor's run_dist.sh: per
machine one server and one trainer in their own namespaces, TCP between them) at 1 rank per
machine, in the same rounds, and a table of each variant's epoch against DistDGL's.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from train import GRAPHS, MODEL, dist_dgl  # noqa: E402

NETNS = os.path.join(os.path.dirname(common.ROOT), "shared", "tools", "netns_mpirun.sh")
PHASES = ("sample", "gather", "compute", "allreduce", "wait")


def train(parts, ranks, epochs, extra=(), machines=0, ppn=1, tag="run"):
    """One training run; ``machines`` > 0 spreads the ranks over that many emulated machines."""
    metrics = os.path.join(common.WORK, f"network_{os.path.basename(parts)}_{tag}.jsonl")
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    program = [sys.executable, "-m", "hpcgnn.train", "--data", parts, "--epochs", str(epochs), "--metrics-file",
               metrics,
               *MODEL, *extra]
    if machines:
        cmd = ["bash", NETNS, str(machines), "-n", str(ranks), *program]
        env = {"MPIEXEC": mpiexec, "PPN": str(ppn)}
    else:
        cmd, env = [mpiexec, "-n", str(ranks), *program], {}
    common.timed(cmd, env=env)
    with open(metrics) as fh:
        records = [json.loads(line) for line in fh]
    epochs_ = [r for r in records if "epoch" in r]
    later = epochs_[1:] or epochs_

    def median(key):
        return float(np.median([r.get(key, 0.0) for r in later]))
    return {"epoch_s": median("epoch_time_s"), "network_MB": median("network_MB"),
            "hit": median("cache_hit_rate"), "saved_MB": median("cache_saved_MB"),
            "phases": {k: float(np.median([r["phases_s"][k][1] for r in later])) for k in PHASES},
            "test_acc": records[-1]["test_acc"]}


def remote_feature_MB(parts, machines, ppn):
    """Mean over ranks of the MB of feature rows held by other machines."""
    with open(os.path.join(parts, "meta.json")) as fh:
        meta = json.load(fh)
    starts = np.asarray(meta["node_starts"])
    row_bytes = 4 * int(np.prod(meta["node_fields"]["feat"]["shape"]))
    per_machine = [starts[(m + 1) * ppn] - starts[m * ppn] for m in range(machines)]
    return float(np.mean([meta["num_nodes"] - n for n in per_machine])) * row_bytes / 2**20


def parse_variants(text, cache_fractions, remote_mb):
    variants = [(name.strip(), flags.split()) for name, _, flags in
                (item.partition("=") for item in text.split(";") if item.strip())]
    for fraction in cache_fractions:
        if fraction > 0:
            variants.append((f"cache {fraction:.0%}", ["--cache-mb", f"{fraction * remote_mb:.3f}"]))
    return variants


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--graphs", default="small")
    parser.add_argument("--machines", type=int, default=2)
    parser.add_argument("--ppn", default="1,2", help="ranks per machine, comma-separated")
    parser.add_argument("--variants", default="default=",
                        help="NAME=FLAGS;... runs across machines with extra flags of hpcgnn train")
    parser.add_argument("--cache", default="0", help="cache sizes as fractions of the remote feature rows")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--distdgl", action="store_true", help="also DistDGL 2.1 across the same machines (ppn 1)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/network.py needs root (network namespaces)")
    python = common.dgl_python() if args.distdgl else None
    if args.distdgl and python is None:
        sys.exit("DGL virtualenv not found: build it with ../shared/anchor_dgl/setup.sh or set DGLENV")
    versus = []
    common.print_header(f"network benchmark: {args.machines} emulated machines (TCP) vs one host (shared memory)")
    print("| graph | machines x ranks | variant | one host epoch s | across machines epoch s | ratio | "
          "phases host / machines (max s: sample/gather/compute/allreduce/wait) | network MB/epoch | "
          "cache hit / saved MB | test acc host / machines |\n|---|---|---|---|---|---|---|---|---|---|", flush=True)
    rows, beside = [], []
    for tag in args.graphs.split(","):
        graph = common.ensure_graph(*GRAPHS[tag])
        for ppn in [int(x) for x in args.ppn.split(",")]:
            ranks = args.machines * ppn
            parts = common.ensure_parts(graph, ranks, f"train_{tag}")
            variants = parse_variants(args.variants, [float(x) for x in args.cache.split(",")],
                                      remote_feature_MB(parts, args.machines, ppn))
            results = {name: [] for name, _ in variants}
            dgl_runs = []
            for _ in range(args.repeats):
                host = train(parts, ranks, args.epochs, tag="host")
                for name, extra in variants:
                    net = train(parts, ranks, args.epochs, extra, args.machines, ppn, tag=name.replace(" ", "_"))
                    results[name].append((host, net))
                if python and ppn == 1:
                    dgl_runs.append(dist_dgl(python, graph, tag, args.machines, args.epochs))
            if dgl_runs:
                versus.append((tag, dgl_runs, results))
            for name, _ in variants:
                runs = results[name]
                host_s = float(np.median([h["epoch_s"] for h, _ in runs]))
                net_s = float(np.median([n["epoch_s"] for _, n in runs]))
                ratio = float(np.median([n["epoch_s"] / h["epoch_s"] for h, n in runs]))
                host, net = runs[-1]
                ph = " / ".join("/".join(f"{run['phases'][k]:.2f}" for k in PHASES) for run in (host, net))
                print(f"| {tag} | {args.machines} x {ppn} | {name} | {host_s:.2f} | {net_s:.2f} | {ratio:.2f} | {ph} | "
                      f"{net['network_MB']:.1f} | {net['hit']:.2f} / {net['saved_MB']:.1f} | "
                      f"{host['test_acc']:.4f} / {net['test_acc']:.4f} |", flush=True)
                rows.append({"graph": tag, "machines x ranks": f"{args.machines} x {ppn}", "variant": name,
                             "one host epoch s": host_s, "across machines epoch s": net_s, "ratio": ratio,
                             "phases host (max s)": {k: host["phases"][k] for k in PHASES},
                             "phases across machines (max s)": {k: net["phases"][k] for k in PHASES},
                             "network MB/epoch": net["network_MB"], "cache hit": net["hit"],
                             "cache saved MB": net["saved_MB"], "test acc host": host["test_acc"],
                             "test acc machines": net["test_acc"]})
    for tag, dgl_runs, results in versus:
        dgl_s = float(np.median([r["epoch_s"] for r in dgl_runs]))
        print(f"\n| graph | {args.machines} emulated machines x 1 rank | epoch s | vs DistDGL 2.1 | test acc |\n"
              f"|---|---|---|---|---|\n| {tag} | DistDGL 2.1 (server + trainer per machine) | {dgl_s:.2f} | 1.00 | "
              f"{dgl_runs[-1]['test_acc']:.4f} |")
        beside.append({"graph": tag, "system": "DistDGL 2.1 (server + trainer per machine)", "epoch s": dgl_s,
                       "vs DistDGL 2.1": 1.0, "test acc": dgl_runs[-1]["test_acc"]})
        for name, runs in results.items():
            net_s = float(np.median([n["epoch_s"] for _, n in runs]))
            print(f"| {tag} | hpcgnn, {name} | {net_s:.2f} | {net_s / dgl_s:.2f} | {runs[-1][1]['test_acc']:.4f} |",
                  flush=True)
            beside.append({"graph": tag, "system": f"hpcgnn, {name}", "epoch s": net_s, "vs DistDGL 2.1": net_s / dgl_s,
                           "test acc": runs[-1][1]["test_acc"]})
    title = f"One host against {args.machines} emulated machines (TCP)"
    common.record(rows, title=title)
    if beside:
        common.record(beside, table="beside DistDGL", title=f"Beside DistDGL 2.1, both across {args.machines} "
                                                            "emulated machines")


if __name__ == "__main__":
    main()
