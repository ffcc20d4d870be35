"""Stragglers: synchronous training against the modes that tolerate a slow rank, side by side in
one run, with one rank sharing its core with another process, and without.

With a straggler: 2 ranks pinned to one core each, and a CPU-bound process (a Python busy loop)
pinned to rank 1's core, started before each mode's run and stopped after it, so rank 1 gets
about half a core. Each mode trains the same epochs, evaluating after every one. The target is
the synchronous run's best validation accuracy less 0.5 point; a mode's time to it is its
cumulative training time (evaluation excluded) at the first epoch that reaches it, and its
ratio to synchronous training's (goal: 0.7 or less for the best mode). The selected test
accuracy (at the best validation epoch) should be within 0.5 point of synchronous training's.

``--repeats R`` runs every mode R times, the modes' order reversed each time, so a drift of the
machine's speed during the benchmark (seen here: 15% within ten minutes) weighs on every mode
alike; each ratio is taken within a repeat and the table shows the medians.

Without a straggler: 2 and 4 ranks on the free cores, the same modes: median epoch time per
mode against synchronous training's (goal: no mode more than 5% slower) and selected test
accuracy.

Graphs: the small RMAT graph (100k nodes, 2M edges, 64 features) and the medium one (1M nodes,
25M edges, 100 features); GraphSAGE 2 x 256, fanouts 10,25, batch 1000 per rank, Adam 0.003.
Figures of validation accuracy against training time, every mode on one per graph:
docs/figures/straggler_<graph>.png.

    python bench/straggler.py                               # small and medium, both scenarios
    python bench/straggler.py --graphs small --epochs 4     # a quicker look
    python bench/straggler.py --graphs small --repeats 3    # ratios robust to the machine's drift
    python bench/straggler.py --ranks 16 --scenarios free   # the 16-core machine's run
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

MODES = {
    "synchronous": [],
    "staleness 2": ["--staleness", "2"],
    "local SGD 4": ["--average-every", "4"],
    "step balance": ["--step-balance", "speed"],
    "async": ["--sync", "async"],
    "async + step balance": ["--sync", "async", "--step-balance", "speed"],
}
MODEL = ["--model", "sage", "--hidden", "256", "--fanouts", "10,25", "--batch-size", "1000", "--lr", "0.003",
         "--eval-every", "1", "--no-progress", "--prefetch", "0"]
HOG = "while True: pass"


def parts_for(graph, ranks):
    nodes, edges, width, classes = common.GRAPHS[graph]
    return common.ensure_parts(common.ensure_graph(nodes, edges, width, classes), ranks, f"straggler_{graph}")


def launch(ranks, args, pinned):
    """The mpiexec command of ``ranks`` ranks running ``args``; ``pinned``: rank r on core r (MPMD
    with taskset), so the straggler's process shares exactly one rank's core."""
    mpiexec = common.mpiexec()
    run = [sys.executable, "-m", "hpcgnn.train", *args]
    if not pinned:
        return [mpiexec, "-n", str(ranks), *run]
    command = [mpiexec]
    for rank in range(ranks):
        command += ([":"] if rank else []) + ["-n", "1", "taskset", "-c", str(rank % os.cpu_count()), *run]
    return command


def train(parts, ranks, mode, epochs, seed, straggler, tag):
    """One run's epoch records (the header and final record left out)."""
    metrics = os.path.join(common.WORK, f"straggler_{tag}.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    args = ["--data", parts, "--epochs", str(epochs), "--seed", str(seed), "--metrics-file", metrics,
            *MODEL, *MODES[mode]]
    hog = None
    if straggler:
        hog = subprocess.Popen(["taskset", "-c", "1", sys.executable, "-c", HOG])
    try:
        common.timed(launch(ranks, args, pinned=straggler))
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
    with open(metrics) as fh:
        return [r for r in map(json.loads, fh) if "epoch" in r and not r.get("final")]


def summary(epochs, target=None) -> dict:
    wall = np.cumsum([r["epoch_time_s"] for r in epochs])
    val = np.array([r["val_acc"] for r in epochs])
    best = int(np.argmax(val))
    row = {"epochs": len(epochs), "epoch_s": float(np.median([r["epoch_time_s"] for r in epochs])),
           "train_s": float(wall[-1]), "best_val_acc": 100 * float(val[best]),
           "efficiency": float(np.median([r["efficiency"] for r in epochs])),
           "test_acc_at_best_val": 100 * float(epochs[best]["test_acc"]),
           "lag_mean": float(np.mean([r["lag_mean"] for r in epochs])) if "lag_mean" in epochs[0] else None}
    if target is not None:
        reached = np.flatnonzero(100 * val >= target)
        row["to_target_s"] = float(wall[reached[0]]) if reached.size else None
    return row, wall, 100 * val


def plot(curves, target, path, title):
    import matplotlib  # deferred: only a run that draws needs it

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for mode, (wall, val) in curves.items():
        ax.plot(wall, val, marker="o", markersize=3, linewidth=1.2, label=mode)
    ax.axhline(target, color="black", linewidth=0.6, linestyle=":")
    ax.set_xlabel("training time, s (evaluation excluded)")
    ax.set_ylabel("validation accuracy, % (dotted: the target)")
    ax.set_ylim(bottom=max(0.0, target - 15))
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"# figure: {path}", flush=True)


def repeated(args):
    """``(repeat, mode)`` in the order the runs go: the modes forward, then backward, and so on, so
    a drift in the machine's speed during the benchmark weighs on every mode alike."""
    for repeat in range(args.repeats):
        for mode in (args.modes if repeat % 2 == 0 else args.modes[::-1]):
            yield repeat, mode


def median_or_none(values):
    values = [v for v in values if v is not None]
    return float(np.median(values)) if values else None


def with_straggler(graph, args):
    """Every mode on 2 pinned ranks beside the busy process, ``args.repeats`` times: its table rows."""
    parts = parts_for(graph, 2)
    print(f"\n## {graph} graph, 2 ranks, rank 1 sharing its core with a busy process, {args.repeats} repeat(s)\n"
          "| mode | epochs | epoch s | s to target | ratio to sync | best val % | test % at best val | lag |\n"
          "|---|---|---|---|---|---|---|---|", flush=True)
    runs = {(repeat, mode): train(parts, 2, mode, args.epochs, args.seed, True,
                                  f"{graph}_straggler_{args.modes.index(mode)}_r{repeat}")
            for repeat, mode in repeated(args)}
    rows, curves = [], {}
    for mode in args.modes:
        per_repeat = []
        for repeat in range(args.repeats):
            sync_row, _, _ = summary(runs[(repeat, "synchronous")])
            target = sync_row["best_val_acc"] - 0.5
            row, wall, val = summary(runs[(repeat, mode)], target)
            base = summary(runs[(repeat, "synchronous")], target)[0]["to_target_s"]
            row["ratio_to_sync"] = row["to_target_s"] / base if row["to_target_s"] and base else None
            row["epoch_ratio_to_sync"] = row["epoch_s"] / sync_row["epoch_s"]
            row["target_val_acc"] = target
            per_repeat.append(row)
            if repeat == 0:
                curves[mode] = (wall, val)
        row = {key: median_or_none([r[key] for r in per_repeat])
               for key in ("epoch_s", "to_target_s", "ratio_to_sync", "epoch_ratio_to_sync", "train_s",
                           "efficiency", "best_val_acc", "test_acc_at_best_val", "lag_mean", "target_val_acc")}
        row.update(epochs=per_repeat[0]["epochs"], repeats=args.repeats, scenario="straggler", graph=graph, ranks=2,
                   mode=mode, ratios_to_sync=[r["ratio_to_sync"] for r in per_repeat],
                   epoch_ratios_to_sync=[r["epoch_ratio_to_sync"] for r in per_repeat])
        rows.append(row)
        print(f"| {mode} | {row['epochs']} | {row['epoch_s']:.2f} | "
              f"{row['to_target_s'] if row['to_target_s'] is None else round(row['to_target_s'], 1)} | "
              f"{row['ratio_to_sync'] if row['ratio_to_sync'] is None else round(row['ratio_to_sync'], 2)} | "
              f"{row['best_val_acc']:.1f} | {row['test_acc_at_best_val']:.1f} | "
              f"{'' if row['lag_mean'] is None else round(row['lag_mean'], 2)} |", flush=True)
    target = rows[0]["target_val_acc"]
    plot(curves, target, os.path.join(common.ROOT, "docs", "figures", f"straggler_{graph}.png"),
         f"{graph} RMAT graph, 2 ranks, rank 1 sharing its core")
    return rows


def without_straggler(graph, ranks, args):
    parts = parts_for(graph, ranks)
    print(f"\n## {graph} graph, {ranks} ranks, no straggler, {args.repeats} repeat(s)\n"
          "| mode | epoch s | ratio to sync | efficiency | best val % | test % at best val |\n"
          "|---|---|---|---|---|---|", flush=True)
    runs = {(repeat, mode): summary(train(parts, ranks, mode, args.epochs, args.seed, False,
                                          f"{graph}_free{ranks}_{args.modes.index(mode)}_r{repeat}"))[0]
            for repeat, mode in repeated(args)}
    rows = []
    for mode in args.modes:
        per_repeat = [runs[(repeat, mode)] for repeat in range(args.repeats)]
        ratios = [runs[(repeat, mode)]["epoch_s"] / runs[(repeat, "synchronous")]["epoch_s"]
                  for repeat in range(args.repeats)]
        row = {key: median_or_none([r[key] for r in per_repeat])
               for key in ("epoch_s", "train_s", "efficiency", "best_val_acc", "test_acc_at_best_val", "lag_mean")}
        row.update(epochs=per_repeat[0]["epochs"], repeats=args.repeats, scenario="free", graph=graph, ranks=ranks,
                   mode=mode, ratio_to_sync=float(np.median(ratios)), ratios_to_sync=ratios)
        rows.append(row)
        print(f"| {mode} | {row['epoch_s']:.2f} | {row['ratio_to_sync']:.3f} | {row['efficiency']:.2f} | "
              f"{row['best_val_acc']:.1f} | "
              f"{row['test_acc_at_best_val']:.1f} |", flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--graphs", default="small,medium")
    parser.add_argument("--scenarios", default="straggler,free", help="straggler, free, or both")
    parser.add_argument("--ranks", default="2,4", help="rank counts of the runs without a straggler")
    parser.add_argument("--modes", default=",".join(MODES), help="synchronous first")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=1,
                        help="runs of every mode, the order reversed each time (ratios: the median over repeats)")
    args = parser.parse_args()
    args.modes = ["synchronous"] + [m for m in args.modes.split(",") if m != "synchronous"]
    unknown = [m for m in args.modes if m not in MODES]
    if unknown:
        parser.error(f"unknown modes {unknown}; choose from {', '.join(MODES)}")
    scenarios = args.scenarios.split(",")
    if "straggler" in scenarios and (os.cpu_count() or 1) < 2:
        parser.error("the straggler scenario pins two ranks to two cores: this machine has one")
    common.print_header("straggler benchmark: synchronous training against the straggler-tolerant modes")
    common.check_launcher("bench/straggler.py")
    rows = []
    for graph in args.graphs.split(","):
        if "straggler" in scenarios:
            rows += with_straggler(graph, args)
        if "free" in scenarios:
            for ranks in (int(r) for r in args.ranks.split(",")):
                rows += without_straggler(graph, ranks, args)
    common.record(rows, title="Stragglers: time to the synchronous run's best validation accuracy - 0.5 point "
                  "with rank 1 sharing its core, and epoch time without a straggler, per gradient-exchange mode",
                  columns=["scenario", "graph", "ranks", "mode", "epoch_s", "to_target_s", "ratio_to_sync",
                           "epoch_ratio_to_sync", "efficiency", "best_val_acc", "test_acc_at_best_val", "lag_mean"],
                  recipe=MODEL, epochs=args.epochs, seed=args.seed, repeats=args.repeats)


if __name__ == "__main__":
    main()
