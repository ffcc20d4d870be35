"""Every ``--sampler`` with its own defaults beside full neighbourhoods, on generated graphs of
two families and sizes: do the defaults transfer to a graph nobody tuned them on?

Each graph is drawn by ``hpcgnn generate`` (a power-law RMAT graph with planted classes and a
stochastic block model), partitioned into ``--ranks`` METIS parts with Shchur et al.'s split
(largest component, 20 training and 30 validation nodes per class, the rest test; the seed
draws the split), and trained with one small recipe for every sampler: GraphSAGE-mean 2 x 32,
Adam lr 0.01, weight decay 5e-5, up to 150 epochs with early stopping once validation loss has
not improved for 20, the test accuracy of the epoch of lowest validation loss. A sampler is
given ``--sampler NAME`` and nothing else, so the row shows its defaults; ``full`` is
``--fanouts all,all`` with one batch of every training node. Mean +- std over seeds, and the
mean paired difference to full neighbourhoods.

    python bench/sampler_defaults.py                          # 2 graphs x 9 samplers x 2 seeds
    python bench/sampler_defaults.py --graphs rmat-8k --samplers full,cluster --seeds 3
    python bench/sampler_defaults.py \
        --variant "cluster-32-4=--sampler cluster --num-clusters 32 --clusters-per-batch 4" \
        --variant "saint-node-1000=--sampler saint-node --budget 1000"     # the fixed sizes of old, beside

The subgraph samplers' sizes are ``auto`` by default (hpcgnn.sampling.subgraph): the
``--variant`` rows above are the fixed defaults they replaced, in the same run.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

#: ``hpcgnn generate`` arguments of each graph: two families, two sizes, two densities
GRAPHS = {
    "rmat-8k": ["rmat", "--nodes", "8000", "--edges", "120000", "--classes", "8", "--homophily", "0.5",
                "--feat-dim", "64", "--feat-signal", "0.3"],
    "sbm-30k": ["sbm", "--nodes", "30000", "--avg-degree", "8", "--classes", "5", "--homophily", "0.6",
                "--feat-dim", "32", "--feat-signal", "0.3"],
}
SPLIT = ["--symmetrize", "--largest-component", "--split", "per-class:20,30"]
RECIPE = ["--model", "sage", "--hidden", "32", "--dropout", "0.5", "--lr", "0.01", "--weight-decay", "5e-5",
          "--epochs", "150", "--select", "loss", "--early-stop", "20", "--eval-every", "1", "--prefetch", "0",
          "--no-progress"]
#: each sampler's flags: the sampler's name only, so its defaults are what is measured
SAMPLERS = {"full": ["--fanouts", "all,all", "--batch-size", "100000"], "neighbor": []}
SAMPLERS.update({name: ["--sampler", name] for name in
                 ("layer", "cluster", "randomwalk", "saint-node", "saint-edge", "saint-rw", "vr")})
SELECTED = "selected_test_acc"


def prepare(name, seed, ranks) -> str:
    """The graph ``name`` generated (once) and partitioned with seed ``seed``'s split; its directory."""
    work = os.path.join(common.WORK, "sampler_defaults")
    os.makedirs(work, exist_ok=True)
    graph = os.path.join(work, f"{name}.npz")
    if not os.path.exists(graph):
        subprocess.run(common.hpcgnn_cmd("generate", *GRAPHS[name], "--seed", "0", "--out", graph), check=True,
                       capture_output=True, env=common.serial_env())
    parts = os.path.join(work, f"{name}_s{seed}_p{ranks}")
    if not os.path.exists(os.path.join(parts, "meta.json")):
        subprocess.run(common.hpcgnn_cmd("partition", graph, "--parts", str(ranks), "--out", parts, "--force",
                                         *SPLIT, "--split-seed", str(seed)),
                       check=True, capture_output=True, env=common.serial_env())
    return parts


def train(parts, sampler, seed, ranks, extra=()) -> dict:
    """One run; its final record, with the run's start line and wall time."""
    metrics = f"{parts}_{sampler}.jsonl"
    if os.path.exists(metrics):
        os.remove(metrics)
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    t0 = time.perf_counter()
    done = subprocess.run([mpiexec, "-n", str(ranks), sys.executable, "-m", "hpcgnn.train", "--data", parts,
                           *RECIPE, *SAMPLERS[sampler], *extra, "--seed", str(seed), "--metrics-file", metrics],
                          capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    wall = time.perf_counter() - t0
    if done.returncode:
        sys.stderr.write(done.stdout[-2000:] + done.stderr[-2000:])
        return {"failed": done.returncode, "wall_s": wall, "message": done.stderr.strip().splitlines()[-1:]}
    with open(metrics) as fh:
        final = [json.loads(line) for line in fh if line.strip()][-1]
    start = next((line for line in done.stdout.splitlines() if line.startswith("hpcgnn train:")), "")
    return dict(final, wall_s=wall, start_line=start)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--graphs", default=",".join(GRAPHS))
    parser.add_argument("--samplers", default=",".join(SAMPLERS))
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=FLAGS",
                        help="one more row: a sampler with flags of its own (\"cluster-16=--sampler cluster "
                             "--num-clusters 16\"), named NAME in --samplers (added to them if absent)")
    parser.add_argument("--json", help="append the run's record here instead of bench/results/sampler_defaults.json")
    args = parser.parse_args()
    for variant in args.variant:
        name, flags = variant.split("=", 1)
        SAMPLERS[name] = flags.split()
        if name not in args.samplers.split(","):
            args.samplers += "," + name
    common.print_header(f"sampler defaults on generated graphs, {args.ranks} ranks")
    print("| graph | sampler | test acc % | vs full | epochs | s per run | steps/epoch (start line) |\n"
          "|---|---|---|---|---|---|---|", flush=True)
    rows = []
    for name in args.graphs.split(","):
        full = None
        for sampler in args.samplers.split(","):
            runs = [train(prepare(name, seed, args.ranks), sampler, seed, args.ranks) for seed in range(args.seeds)]
            acc = np.array([100 * r[SELECTED] if SELECTED in r else np.nan for r in runs])
            if sampler == "full":
                full = acc
            gap = "" if full is None or sampler == "full" else f"{np.mean(acc - full):+.1f}"
            steps = runs[0].get("start_line", "").split(" steps/epoch")[0].rsplit(", ", 1)[-1]
            rows.append({"graph": name, "sampler": sampler, "ranks": args.ranks, "accuracies": acc.tolist(),
                         "vs_full": None if full is None or sampler == "full" else float(np.mean(acc - full)),
                         "epochs_trained": [r.get("epochs_trained") for r in runs],
                         "wall_s": [round(r["wall_s"], 1) for r in runs],
                         "start_line": runs[0].get("start_line"), "failed": [r.get("message") for r in runs
                                                                           if r.get("failed")]})
            print(f"| {name} | {sampler} | {np.mean(acc):.1f} +- {np.std(acc):.1f} | {gap} | "
                  f"{np.mean([r.get('epochs_trained') or 0 for r in runs]):.0f} | "
                  f"{np.mean([r['wall_s'] for r in runs]):.0f} | {steps} |", flush=True)
    common.record(rows, path=args.json, title=f"Every sampler's defaults against full neighbourhoods on generated "
                                              f"graphs, {args.ranks} ranks, {args.seeds} seeds",
                  columns=["graph", "sampler", "ranks", "accuracies", "vs_full", "epochs_trained", "wall_s"],
                  graphs={k: GRAPHS[k] for k in args.graphs.split(",")}, split=SPLIT, recipe=RECIPE,
                  variants={name: SAMPLERS[name] for name in args.samplers.split(",")})


if __name__ == "__main__":
    main()
