"""Accuracy on the real datasets in ../shared/data, through the whole pipeline
(read -> partition -> mpirun train -> distributed full-neighbourhood inference).

  GraphSAGE-mean on Amazon Computers and Coauthor CS, Shchur protocol: largest connected
  component, 20 training and 30 validation nodes per class, every other node a test node;
  mean +- std over seeded splits; test accuracy at the epoch of best validation accuracy;
  with 1, 2 and 4 ranks (published: 82.4 and 91.3); features row-normalised.
  GCN on Cora and CiteSeer, Planetoid public split, features row-normalised as Kipf & Welling
  do (published: 81.5 and 70.3); mean over seeds.

    python bench/accuracy.py                       # everything (about 10 minutes here)
    python bench/accuracy.py --datasets cora --seeds 3 --ranks 1
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
RUNS = {
    "amazon_computers": dict(path="amazon_computers/amazon_cs.npz", model="sage", published=82.4,
                             prepare=["--largest-component", "--split", "per-class:20,30", "--normalize-features"],
                             train=["--model", "sage", "--hidden", "64", "--dropout", "0.5", "--lr", "0.01",
                                    "--weight-decay", "5e-4", "--epochs", "200", "--fanouts", "all,all"]),
    "coauthor_cs": dict(path="coauthor_cs/coauthor_cs.npz", model="sage", published=91.3,
                        prepare=["--largest-component", "--split", "per-class:20,30", "--normalize-features"],
                        train=["--model", "sage", "--hidden", "64", "--dropout", "0.5", "--lr", "0.01",
                               "--weight-decay", "5e-4", "--epochs", "200", "--fanouts", "all,all"]),
    "cora": dict(path="cora", model="gcn", published=81.5, prepare=["--normalize-features"],
                 train=["--model", "gcn", "--hidden", "16", "--dropout", "0.5", "--input-dropout", "0.5",
                        "--lr", "0.01", "--weight-decay", "5e-4", "--epochs", "200", "--fanouts", "all,all"]),
    "citeseer": dict(path="citeseer", model="gcn", published=70.3, prepare=["--normalize-features"],
                     train=["--model", "gcn", "--hidden", "16", "--dropout", "0.5", "--input-dropout", "0.5",
                            "--lr", "0.01", "--weight-decay", "5e-4", "--epochs", "200", "--fanouts", "all,all"]),
}


def one_run(name, spec, seed, ranks):
    """Partition with this seed's split, train on ``ranks`` ranks, return the final metrics record."""
    work = os.path.join(common.WORK, "accuracy")
    os.makedirs(work, exist_ok=True)
    parts = os.path.join(work, f"{name}_s{seed}_p{ranks}")
    shchur = "per-class" in " ".join(spec["prepare"])
    split_seed = ["--split-seed", str(seed)] if shchur else []
    subprocess.run(common.hpcgnn_cmd("partition", os.path.join(DATA, spec["path"]), "--parts", str(ranks),
                                     "--symmetrize", "--out", parts, "--force", *spec["prepare"], *split_seed),
                   check=True, capture_output=True)
    metrics = parts + ".jsonl"
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    subprocess.run([mpiexec, "-n", str(ranks), sys.executable, "-m", "hpcgnn.train", "--data", parts,
                    *spec["train"], "--batch-size", "100000", "--eval-every", "1", "--seed", str(seed),
                    "--metrics", metrics, "--no-progress", "--prefetch", "0"],
                   check=True, capture_output=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    with open(metrics) as fh:
        return [json.loads(line) for line in fh][-1]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", default="cora,citeseer,amazon_computers,coauthor_cs")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--ranks", default="1,2,4")
    parser.add_argument("--json")
    args = parser.parse_args()
    common.print_header("accuracy benchmark")
    print("| dataset | model | ranks | test acc % (mean +- std) | seeds | published |\n|---|---|---|---|---|---|")
    rows = []
    for name in args.datasets.split(","):
        spec = RUNS[name]
        for ranks in [int(r) for r in args.ranks.split(",")]:
            finals = [one_run(name, spec, seed, ranks) for seed in range(args.seeds)]
            acc = 100 * np.array([f["test_acc_at_best_val"] for f in finals])
            rows.append({"dataset": name, "ranks": ranks, "accuracies": acc.tolist()})
            print(f"| {name} | {spec['model']} | {ranks} | {acc.mean():.1f} +- {acc.std():.1f} | {args.seeds} "
                  f"| {spec['published']} |", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"machine": common.machine_info(), "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
