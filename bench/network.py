"""Training across emulated machines against one host, side by side in one run.

The same training run (GraphSAGE 2x256, fanouts 10,25, batch 1000 per rank, as bench/train.py)
on the same partitions, once with every rank on this host (MPI moves remote rows through
shared memory) and once across N emulated machines (``../shared/tools/netns_mpirun.sh``: each
machine its own network, IPC, mount and UTS namespace, so MPI talks TCP between them, as on an
Ethernet cluster). Needs root for the namespaces.

    python bench/network.py                              # small graph, 2 machines x 1 and 2 ranks
    python bench/network.py --graphs small,medium --epochs 5 --prefetch 0,-1

Prints one row per (graph, machines x ranks per machine, prefetch): the median epoch time
(epochs 2..N, slowest rank) on one host and across machines, their ratio, the per-phase
maxima over ranks, and the test accuracy of both runs.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from train import GRAPHS, MODEL  # noqa: E402

NETNS = os.path.join(os.path.dirname(common.ROOT), "shared", "tools", "netns_mpirun.sh")
PHASES = ("sample", "gather", "compute", "allreduce", "wait")


def train(parts, ranks, epochs, prefetch, machines=0, ppn=1, extra=()):
    """One training run; ``machines`` > 0 spreads the ranks over that many emulated machines."""
    where = f"{machines}m{ppn}" if machines else "host"
    metrics = os.path.join(common.WORK, f"network_{os.path.basename(parts)}_{where}_p{prefetch}.jsonl")
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    program = [sys.executable, "-m", "hpcgnn.train", "--data", parts, "--epochs", str(epochs), "--metrics", metrics,
               "--prefetch", str(prefetch), *MODEL, *extra]
    if machines:
        cmd = ["bash", NETNS, str(machines), "-n", str(ranks), *program]
        env = {"MPIEXEC": mpiexec, "PPN": str(ppn)}
    else:
        cmd, env = [mpiexec, "-n", str(ranks), *program], {}
    common.timed(cmd, env=env)
    with open(metrics) as fh:
        records = [json.loads(line) for line in fh]
    epochs_ = [r for r in records if not r.get("final")]
    later = epochs_[1:] or epochs_
    return {"epoch_s": float(np.median([r["epoch_time_s"] for r in later])),
            "phases": {k: float(np.median([r["phases_s"][k][1] for r in later])) for k in PHASES},
            "test_acc": records[-1]["test_acc"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--graphs", default="small")
    parser.add_argument("--machines", type=int, default=2)
    parser.add_argument("--ppn", default="1,2", help="ranks per machine, comma-separated")
    parser.add_argument("--prefetch", default="0,-1", help="--prefetch values of hpcgnn train (-1: its default)")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--train-args", default="", help="extra flags of hpcgnn train for both runs")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/network.py needs root (network namespaces)")
    common.print_header(f"network benchmark: {args.machines} emulated machines (TCP) vs one host (shared memory)")
    print("| graph | machines x ranks | prefetch | one host epoch s | across machines epoch s | ratio | "
          "phases host vs machines (max s: sample/gather/compute/allreduce/wait) | test acc host / machines |\n"
          "|---|---|---|---|---|---|---|---|", flush=True)
    for tag in args.graphs.split(","):
        graph = common.ensure_graph(*GRAPHS[tag])
        for ppn in [int(x) for x in args.ppn.split(",")]:
            ranks = args.machines * ppn
            parts = common.ensure_parts(graph, ranks, f"train_{tag}")
            for prefetch in [int(x) for x in args.prefetch.split(",")]:
                extra = args.train_args.split()
                host = train(parts, ranks, args.epochs, prefetch, extra=extra)
                net = train(parts, ranks, args.epochs, prefetch, args.machines, ppn, extra)
                ph = " vs ".join("/".join(f"{run['phases'][k]:.2f}" for k in PHASES) for run in (host, net))
                ratio = net["epoch_s"] / host["epoch_s"]
                print(f"| {tag} | {args.machines} x {ppn} | {prefetch} | {host['epoch_s']:.2f} | "
                      f"{net['epoch_s']:.2f} | {ratio:.2f} | {ph} | {host['test_acc']:.4f} / {net['test_acc']:.4f} |",
                      flush=True)


if __name__ == "__main__":
    main()
