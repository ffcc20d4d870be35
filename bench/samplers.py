"""Every sampler of ``--sampler`` side by side: accuracy against full-neighbourhood training on
the Shchur-protocol datasets, and training speed on the RMAT graphs.

accuracy  Coauthor CS and Amazon Computers exactly as bench/accuracy.py prepares and trains
          them (GraphSAGE-mean 2 x 64, the dataset's weight decay, 200 epochs, the dataset's
          model selection), with each sampler's batches in place of the full-batch, full-
          neighbourhood step; one set of sampler sizes for both datasets (SAMPLERS below).
          Test accuracy of the selected epoch, mean +- std over seeds, and its difference to
          full-neighbourhood training in the same run.
speed     One epoch of GraphSAGE 2 x 256 on a symmetrized RMAT graph with each sampler (sizes
          scaled for a graph of that size: SPEED_SAMPLERS), evaluation off: epoch time, steps,
          steps per second and the batches' training nodes per second.

    python bench/samplers.py accuracy [--datasets coauthor_cs,amazon_computers --seeds 5 --ranks 1,2,4]
    python bench/samplers.py speed [--graph medium --ranks 2] [--dgl] [--precision bf16]
    python bench/samplers.py curves [--datasets coauthor_cs --ranks 2 --seed 0]

curves    From the accuracy runs' metrics files: test accuracy (evaluated every epoch) against
          the cumulative training time of every sampler, one figure
          (docs/figures/samplers_time_to_accuracy.png).

speed --dgl  DGL 2.1's ClusterGCNSampler, SAINTSampler, RandomWalkNeighborSampler (PinSAGE's) and
          LaborSampler (for layer) train the same model on the same graph with the same per-batch
          sizes, in one process of as many threads as hpcgnn has ranks (bench/dgl_samplers.py).
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import accuracy  # noqa: E402
import common  # noqa: E402

#: each sampler's flags on the small real datasets (a few hundred training nodes per rank)
SAMPLERS = {
    "full": ["--fanouts", "all,all", "--batch-size", "100000"],
    "neighbor": ["--fanouts", "10,25", "--batch-size", "64"],
    "layer": ["--sampler", "layer", "--layer-sizes", "1024,1024", "--batch-size", "64"],
    # LADIES' unbiased importance weights, beside the default normalised ones
    "layer-unbiased": ["--sampler", "layer", "--layer-sizes", "1024,1024", "--layer-weights", "unbiased",
                       "--batch-size", "64"],
    "cluster": ["--sampler", "cluster", "--num-clusters", "16", "--clusters-per-batch", "4"],
    "randomwalk": ["--sampler", "randomwalk", "--batch-size", "64"],
    # 45% of the part: the share 3,000 draws were of a 2-rank half of Amazon Computers, now the same
    # share of the graph per step at any rank count (a fixed count covered 18% of the 1-rank part)
    "saint-node": ["--sampler", "saint-node", "--budget", "45%"],
    "saint-edge": ["--sampler", "saint-edge", "--budget", "2000"],
    "saint-rw": ["--sampler", "saint-rw", "--budget", "1000", "--walk-length", "2"],
    "vr": ["--sampler", "vr", "--vr-neighbors", "2", "--batch-size", "64"],
    # VR-GCN's baseline: plain neighbour sampling with as few neighbours
    "neighbor-2": ["--fanouts", "2,2", "--batch-size", "64"],
}
#: the same samplers sized for the RMAT graphs (batches of about a thousand training nodes)
SPEED_SAMPLERS = {
    "neighbor": ["--fanouts", "10,25", "--batch-size", "1000"],
    # LADIES' budgets give the nodes per layer DGL's LaborSampler(10,25) keeps on the medium graph
    # (about 20,300 / 7,400 / 1,000: bench/layer_sampling.py, bench/dgl_samplers.py), so both visit
    # the same 9.4M in-edges a batch
    "layer": ["--sampler", "layer", "--layer-sizes", "18000,6400", "--batch-size", "1000"],
    "cluster": ["--sampler", "cluster", "--num-clusters", "256", "--clusters-per-batch", "4"],
    "randomwalk": ["--sampler", "randomwalk", "--batch-size", "1000"],
    "saint-node": ["--sampler", "saint-node", "--budget", "3000"],
    "saint-edge": ["--sampler", "saint-edge", "--budget", "2000"],
    "saint-rw": ["--sampler", "saint-rw", "--budget", "1000", "--walk-length", "2"],
    "vr": ["--sampler", "vr", "--vr-neighbors", "2", "--batch-size", "1000"],
}
#: DGL 2.1's counterpart of each sampler (bench/dgl_samplers.py); None: DGL has none
DGL_RELATIVE = {"layer": "labor", "vr": None}
SPEED_MODEL = ["--model", "sage", "--hidden", "256", "--lr", "0.003", "--dropout", "0.5", "--eval-every", "0",
               "--no-progress"]


def mpirun(ranks, argv):
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    done = subprocess.run([mpiexec, "-n", str(ranks), sys.executable, "-m", "hpcgnn.train", *argv],
                          capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if done.returncode:
        sys.stderr.write(done.stdout[-3000:] + done.stderr[-3000:])
        raise RuntimeError(f"failed: hpcgnn.train {' '.join(argv)}")


def records(path):
    with open(path) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def with_sampler(train, flags):
    """The dataset's training flags with the sampler's in place of its full-neighbourhood ones."""
    out, skip = [], False
    for item in train:
        if skip:
            skip = False
            continue
        if item == "--fanouts":
            skip = True
            continue
        out.append(item)
    return out + flags


def run_path(name, sampler, seed, ranks) -> str:
    """The metrics file of one accuracy run (named by the dataset's protocol hash)."""
    tag = accuracy.protocol_tag(accuracy.RUNS[name])
    return os.path.join(common.WORK, "samplers", f"{name}_{tag}_{sampler}_s{seed}_p{ranks}.jsonl")


def accuracy_runs(args):
    work = os.path.join(common.WORK, "samplers")
    os.makedirs(work, exist_ok=True)
    print("| dataset | sampler | ranks | test acc % | vs full | seeds | epoch s |\n|---|---|---|---|---|---|---|",
          flush=True)
    rows = []
    for name in args.datasets.split(","):
        spec = accuracy.RUNS[name]
        for ranks in [int(r) for r in args.ranks.split(",")]:
            full = None
            for sampler in args.samplers.split(","):
                accs, times = [], []
                for seed in range(args.seeds):
                    parts = accuracy.prepare(name, spec, seed, ranks)
                    metrics = run_path(name, sampler, seed, ranks)
                    if not (args.reuse and os.path.exists(metrics) and records(metrics)[-1].get("final")):
                        if os.path.exists(metrics):
                            os.remove(metrics)
                        mpirun(ranks, ["--data", parts, *with_sampler(spec["train"], SAMPLERS[sampler]),
                                       "--eval-every", "1", "--seed", str(seed), "--metrics-file", metrics,
                                       "--prefetch", "0", "--no-progress"])
                    final = records(metrics)[-1]
                    accs.append(100 * final[accuracy.SELECTED])
                    times.append(final["epoch_time_s"] if "epoch_time_s" in final else np.nan)
                acc = np.array(accs)
                full = acc.mean() if sampler == "full" else full
                gap = "" if full is None or sampler == "full" else f"{acc.mean() - full:+.1f}"
                rows.append({"dataset": name, "sampler": sampler, "ranks": ranks, "accuracies": accs})
                print(f"| {name} | {sampler} | {ranks} | {acc.mean():.1f} +- {acc.std():.1f} | {gap} | {args.seeds} | "
                      f"{np.nanmean(times):.3f} |", flush=True)
    return rows


def speed_runs(args):
    graph = common.ensure_graph(*common.GRAPHS[args.graph])
    print("| sampler | ranks | epoch s | steps | steps/s | seeds/s | sample s | compute s |\n"
          "|---|---|---|---|---|---|---|---|", flush=True)
    rows = []
    for ranks in [int(r) for r in args.ranks.split(",")]:
        parts = common.ensure_parts(graph, ranks, f"samplers_{args.graph}")
        for sampler in args.samplers.split(","):
            if sampler not in SPEED_SAMPLERS:
                continue
            metrics = os.path.join(common.WORK, f"samplers_speed_{args.graph}_{sampler}_{ranks}.jsonl")
            if os.path.exists(metrics):
                os.remove(metrics)
            mpirun(ranks, ["--data", parts, *SPEED_MODEL, *SPEED_SAMPLERS[sampler], "--epochs", "1",
                           "--precision", args.precision, "--metrics-file", metrics])
            epoch = [r for r in records(metrics) if "epoch" in r and not r.get("final")][-1]
            final = records(metrics)[-1]
            steps, seeds = epoch["steps"], epoch["train_seen"]
            row = {"sampler": sampler, "ranks": ranks, "epoch_s": epoch["epoch_time_s"], "steps": steps,
                   "seeds": seeds, "phases_s": final.get("phases_s")}
            rows.append(row)
            phases = final.get("phases_s") or {}
            rate, seed_rate = steps / epoch["epoch_time_s"], seeds / epoch["epoch_time_s"]
            print(f"| {sampler} | {ranks} | {epoch['epoch_time_s']:.1f} | {steps} | {rate:.1f} | {seed_rate:,.0f} | "
                  f"{phases.get('sample', float('nan')):.1f} | {phases.get('compute', float('nan')):.1f} |", flush=True)
        if args.dgl:
            compare_with_dgl(graph, ranks, [r for r in rows if r["ranks"] == ranks], args)
    return rows


def compare_with_dgl(graph, ranks, rows, args):
    """DGL 2.1's samplers on the same graph and per-batch sizes, one process of ``ranks`` threads, in
    this run; batches/s and training nodes/s side by side (hpcgnn: every rank's batches)."""
    python = common.dgl_python()
    if python is None:
        sys.exit("DGL virtualenv not found (see bench/partition.py --dgl-setup)")
    ours = {r["sampler"]: r for r in rows}
    theirs_of = {s: DGL_RELATIVE.get(s, s) for s in ours if DGL_RELATIVE.get(s, s) is not None}
    clusters = 256 * ranks  # hpcgnn: 256 METIS clusters of each rank's part
    done = subprocess.run([python, os.path.join(os.path.dirname(os.path.abspath(__file__)), "dgl_samplers.py"),
                           graph, "--samplers", ",".join(theirs_of.values()), "--threads", str(ranks),
                           "--clusters", str(clusters), "--batches", str(args.dgl_batches)],
                          capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS=str(ranks)))
    if done.returncode:
        sys.stderr.write(done.stderr[-3000:])
        raise RuntimeError("dgl_samplers.py failed")
    theirs = {r["sampler"]: r for r in (json.loads(x) for x in done.stdout.splitlines() if x.startswith("{"))}
    print(f"\n| sampler | DGL 2.1 sampler | hpcgnn batches/s ({ranks} ranks) | DGL batches/s ({ranks} threads) "
          "| ratio | hpcgnn train nodes/s | DGL train nodes/s | ratio |\n|---|---|---|---|---|---|---|---|", flush=True)
    for sampler, name in theirs_of.items():
        mine, dgl = ours[sampler], theirs[name]
        batches = mine["steps"] * ranks / mine["epoch_s"]
        nodes = mine["seeds"] / mine["epoch_s"]
        mine.update(dgl=dgl)
        ratio = batches / dgl["batches_per_s"]
        print(f"| {sampler} | {name} | {batches:.2f} | {dgl['batches_per_s']:.2f} | {ratio:.2f}x | {nodes:,.0f} | "
              f"{dgl['train_nodes_per_s']:,.0f} | {nodes / dgl['train_nodes_per_s']:.2f}x |", flush=True)


def curves(args):
    """Test accuracy against cumulative training time (evaluation excluded) of every sampler's
    accuracy run of one dataset, rank count and seed, on one figure."""
    import matplotlib  # deferred: only this subcommand draws

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    name, ranks = args.datasets.split(",")[0], int(args.ranks.split(",")[0])
    select = accuracy.SELECTED

    def run_of(sampler):
        path = run_path(name, sampler, args.seed, ranks)
        return records(path) if os.path.exists(path) else None

    full = run_of("full")
    # the bar: one point below full-neighbourhood training's selected test accuracy
    target = 100 * full[-1][select] - 1.0 if full else float("nan")
    print(f"# target: {target:.1f}% test accuracy (full neighbourhoods' selected figure - 1 point)\n"
          "| sampler | training s (all epochs) | s to the target | selected test acc % |\n|---|---|---|---|")
    fig, ax = plt.subplots(figsize=(7, 4.5))
    rows = []
    for sampler in args.samplers.split(","):
        run = run_of(sampler)
        if run is None:
            print(f"# {sampler}: no run (run the accuracy subcommand first)")
            continue
        epochs = [r for r in run if "epoch" in r and not r.get("final")]
        wall = np.cumsum([r["epoch_time_s"] for r in epochs])
        acc = np.array([100 * r.get("test_acc", np.nan) for r in epochs])
        ax.plot(wall, acc, label=sampler, linewidth=1.2)
        reached = np.flatnonzero(acc >= target)
        at = float(wall[reached[0]]) if reached.size else float("nan")
        rows.append({"sampler": sampler, "train_s": float(wall[-1]), "target_acc": target, "to_target_s": at,
                     "selected_acc": 100 * run[-1][select]})
        print(f"| {sampler} | {wall[-1]:.1f} | {at:.1f} | {100 * run[-1][select]:.1f} |", flush=True)
    if full:
        ax.axhline(target, color="black", linewidth=0.6, linestyle=":")
    ax.set_xscale("log")
    ax.set_xlabel("training time, s (evaluation excluded; log scale)")
    ax.set_ylabel("test accuracy, %")
    ax.set_ylim(bottom=max(0, target - 15) if full else 0)
    ax.set_title(f"{name}, {ranks} ranks, seed {args.seed}: test accuracy against training time")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(args.figure) or ".", exist_ok=True)
    fig.savefig(args.figure, dpi=110)
    print(f"# figure: {args.figure}")
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("accuracy", "speed", "curves"))
    parser.add_argument("--datasets", default="coauthor_cs,amazon_computers")
    parser.add_argument("--samplers", default=",".join(SAMPLERS))
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--ranks", default=None, help="default: 1,2,4 (accuracy), 2 (speed)")
    parser.add_argument("--graph", default="medium", choices=("small", "medium"))
    parser.add_argument("--reuse", action="store_true", help="accuracy: take finished runs from bench/work/samplers")
    parser.add_argument("--dgl", action="store_true", help="speed: DGL 2.1's samplers side by side (its virtualenv)")
    parser.add_argument("--dgl-batches", type=int, default=30, help="speed: DGL's timed batches per sampler")
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16"), help="speed: hpcgnn's --precision")
    parser.add_argument("--seed", type=int, default=0, help="curves: the accuracy runs' seed")
    parser.add_argument("--figure", default=os.path.join("docs", "figures", "samplers_time_to_accuracy.png"))
    parser.add_argument("--json", help="append this run's record here instead of bench/results/<script>.json")
    args = parser.parse_args()
    args.ranks = args.ranks or ("1,2,4" if args.what == "accuracy" else "2")
    common.print_header(f"samplers {args.what}")
    rows = {"accuracy": accuracy_runs, "speed": speed_runs, "curves": curves}[args.what](args)
    common.record(rows, path=args.json, title=f"Samplers: {args.what}")


if __name__ == "__main__":
    main()
