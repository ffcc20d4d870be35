"""What ``--balance`` trades: edge cut and balance of the parts, and training step time, for
METIS's constraint sets on the same graph, side by side in one run.

Graphs: Amazon Computers (a product co-purchase graph, bundled; largest component,
random 60/20/20 split) and the small RMAT graph (100k nodes, 60% training nodes), both
symmetrized, 4 parts. Per constraint set: edge cut, max/mean of nodes and of stored edges per
part, then 4 ranks train GraphSAGE (hidden 256, fanouts 10,25, batch 1000 per rank) for a few
epochs: median epoch time, and sample + gather + compute seconds of the slowest rank in each
(the work a part's edges decide), median over epochs.

    python bench/balance.py
    python bench/balance.py --graphs amazon --epochs 3 --repeats 2
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

DATA = os.path.join(os.path.dirname(common.ROOT), "shared", "data")
SETS = {"all (default)": "nodes,in_degree,train,val,test", "no in_degree": "nodes,train,val,test", "nodes": "nodes"}
MODEL = ["--model", "sage", "--hidden", "256", "--fanouts", "10,25", "--batch-size", "1000", "--lr", "0.003",
         "--eval-every", "0", "--no-progress", "--prefetch", "0"]


def graph_input(name):
    if name == "amazon":
        path = os.path.join(DATA, "amazon_computers", "amazon_cs.npz")
        return path, ["--largest-component", "--split", "0.6,0.2,0.2"]
    return common.ensure_graph(100_000, 2_000_000, 64, 10), []


def partition(name, label, balance, parts):
    path, prepare = graph_input(name)
    out = os.path.join(common.WORK, f"balance_{name}_{balance.replace(',', '-')}_{parts}")
    subprocess.run(common.hpcgnn_cmd("partition", path, "--parts", str(parts), "--symmetrize", "--out", out,
                                     "--force", "--balance", balance, *prepare), check=True, capture_output=True)
    with open(os.path.join(out, "meta.json")) as fh:
        return out, json.load(fh)["partitioner"]


def train(parts_dir, ranks, epochs):
    metrics = parts_dir + ".jsonl"
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    common.timed([mpiexec, "-n", str(ranks), sys.executable, "-m", "hpcgnn.train", "--data", parts_dir,
                  "--epochs", str(epochs), "--metrics-file", metrics, *MODEL])
    with open(metrics) as fh:
        epochs_ = [r for r in map(json.loads, fh) if "epoch" in r and not r.get("final")][1:]  # first: warm-up
    work = [sum(r["phases_s"][k][1] for k in ("sample", "gather", "compute")) for r in epochs_]
    return float(np.median([r["epoch_time_s"] for r in epochs_])), float(np.median(work))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--graphs", default="amazon,small")
    parser.add_argument("--parts", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2, help="training runs per set, interleaved")
    args = parser.parse_args()
    common.print_header("balance constraints benchmark")
    print("| graph | --balance | edge cut % | nodes max/mean | edges max/mean | epoch s "
          "| sample+gather+compute s (slowest rank per phase) |\n"
          "|---|---|---|---|---|---|---|")
    rows = []
    for name in args.graphs.split(","):
        runs = {label: partition(name, label, balance, args.parts) for label, balance in SETS.items()}
        times = {label: [] for label in SETS}
        for _ in range(args.repeats):  # interleaved, so machine noise hits every set alike
            for label, (out, _) in runs.items():
                times[label].append(train(out, args.parts, args.epochs))
        for label, (_, info) in runs.items():
            epoch_s = np.median([t[0] for t in times[label]])
            work_s = np.median([t[1] for t in times[label]])
            print(f"| {name} | {SETS[label]} ({label}) | {100 * info['edge_cut_fraction']:.1f} | "
                  f"{info['imbalance']['num_nodes']:.2f} | {info['imbalance']['num_edges']:.2f} | "
                  f"{epoch_s:.2f} | {work_s:.2f} |", flush=True)
            rows.append({"graph": name, "--balance": SETS[label], "edge cut %": 100 * info["edge_cut_fraction"],
                         "nodes max/mean": info["imbalance"]["num_nodes"],
                         "edges max/mean": info["imbalance"]["num_edges"], "epoch s": float(epoch_s),
                         "sample+gather+compute s": float(work_s), "runs": times[label]})
    common.record(rows, title="--balance constraint sets: cut, balance and step time",
                  columns=["graph", "--balance", "edge cut %", "nodes max/mean", "edges max/mean", "epoch s",
                           "sample+gather+compute s"])


if __name__ == "__main__":
    main()
