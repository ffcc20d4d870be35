"""Elastic rank counts: R ranks on a dataset of P = 4R parts (each rank holding 4 consecutive
parts as one shard) against R ranks on an R-part dataset of the same graph, side by side in one
run; the accuracy of R = 1, 2, 3, 4 ranks on a 4- and a 12-part dataset; and a 4-rank run resumed
on 2 ranks.

Speed (goal: the P = 4R epoch within 10% of the R-part one): the medium RMAT graph (1M nodes,
25M edges, 100 features), GraphSAGE 2 x 256, fanouts 10,25, batch 1000 per rank, median epoch
time over the epochs; ``--repeats`` runs both in alternating order and reports the median ratio
(the machine's speed drifts). Both datasets are METIS partitions of the symmetrized graph (the
same ones bench/straggler.py uses).

Accuracy: the small RMAT graph (100k nodes, 2M edges) partitioned into 4 and into 12 parts, each
trained at 1, 2, 3 and 4 ranks with the same recipe (3 ranks on 4 parts hold even ranges of the
nodes, cut through parts): test accuracy at the best validation epoch. The global batch grows
with the rank count (batch 1000 per rank), as with any data-parallel run.

Resume (goal: the final accuracy within 0.5 point of the uninterrupted run's): the small graph's
4-part dataset, 4 ranks for the accuracy epochs, against 4 ranks checkpointed after epoch 2 and
resumed on 2 ranks (batch 1000 per rank: the resumed epochs take half the global batch).

    python bench/elastic.py                          # all three
    python bench/elastic.py --what speed --ranks 2   # R = 2: 8 parts against 2
    python bench/elastic.py --what accuracy
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from straggler import MODEL, parts_for  # noqa: E402


def train(parts, ranks, epochs, seed, tag, *extra) -> list:
    """One run's epoch records (``extra``: more ``hpcgnn train`` flags)."""
    metrics = os.path.join(common.WORK, f"elastic_{tag}.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    common.timed([mpiexec, "-n", str(ranks), sys.executable, "-m", "hpcgnn.train", "--data", parts,
                  "--epochs", str(epochs), "--seed", str(seed), "--metrics-file", metrics, *MODEL, *extra])
    with open(metrics) as fh:
        return [r for r in map(json.loads, fh) if "epoch" in r and not r.get("final")]


def selected_test(epochs) -> float:
    return 100 * float(max(epochs, key=lambda r: r["val_acc"])["test_acc"])


def speed(args) -> list:
    """R ranks on 4R parts against R ranks on R parts, ``args.repeats`` times in alternating order."""
    ranks, graph = args.ranks, args.graph
    datasets = {ranks: parts_for(graph, ranks), 4 * ranks: parts_for(graph, 4 * ranks)}
    print(f"\n## {graph} graph, {ranks} ranks: a {4 * ranks}-part dataset against a {ranks}-part one, "
          f"{args.repeats} repeat(s)\n| parts | parts per rank | epoch s | ratio | test % at best val |\n"
          "|---|---|---|---|---|", flush=True)
    epochs = {parts: [] for parts in datasets}
    tests = {parts: [] for parts in datasets}
    for repeat in range(args.repeats):
        for parts in (sorted(datasets) if repeat % 2 == 0 else sorted(datasets, reverse=True)):
            run = train(datasets[parts], ranks, args.epochs, args.seed, f"{graph}_{ranks}_{parts}_r{repeat}")
            epochs[parts].append(float(np.median([r["epoch_time_s"] for r in run])))
            tests[parts].append(selected_test(run))
    rows = []
    for parts in sorted(datasets):
        ratios = [a / b for a, b in zip(epochs[parts], epochs[ranks], strict=True)]
        row = {"what": "speed", "graph": graph, "ranks": ranks, "parts": parts, "parts_per_rank": parts // ranks,
               "epoch_s": float(np.median(epochs[parts])), "ratio_to_one_part_per_rank": float(np.median(ratios)),
               "ratios": ratios, "test_acc_at_best_val": float(np.median(tests[parts])),
               "epochs": args.epochs, "repeats": args.repeats}
        rows.append(row)
        print(f"| {parts} | {parts // ranks} | {row['epoch_s']:.2f} | {row['ratio_to_one_part_per_rank']:.3f} | "
              f"{row['test_acc_at_best_val']:.1f} |", flush=True)
    return rows


def accuracy(args) -> list:
    """The small graph's 4- and 12-part datasets at 1, 2, 3 and 4 ranks (3 ranks hold even ranges of
    the nodes, cut through parts)."""
    print("\n## small graph, 4- and 12-part datasets at 1, 2, 3 and 4 ranks\n"
          "| parts | ranks | parts per rank | best val % | test % at best val |\n|---|---|---|---|---|", flush=True)
    rows = []
    for parts in (4, 12):
        dataset = parts_for("small", parts)
        for ranks in (1, 2, 3, 4):
            run = train(dataset, ranks, args.accuracy_epochs, args.seed, f"small_acc_{parts}_{ranks}")
            share = parts // ranks if parts % ranks == 0 else round(parts / ranks, 2)
            row = {"what": "accuracy", "graph": "small", "ranks": ranks, "parts": parts, "parts_per_rank": share,
                   "best_val_acc": 100 * max(r["val_acc"] for r in run), "test_acc_at_best_val": selected_test(run),
                   "epoch_s": float(np.median([r["epoch_time_s"] for r in run])), "epochs": args.accuracy_epochs}
            rows.append(row)
            print(f"| {parts} | {ranks} | {share} | {row['best_val_acc']:.1f} | {row['test_acc_at_best_val']:.1f} |",
                  flush=True)
    return rows


def resumed(args) -> list:
    """The small graph's 4-part dataset: 4 ranks for ``args.accuracy_epochs`` epochs uninterrupted,
    against 4 ranks for 2 epochs checkpointed and resumed on 2 ranks to the same epoch count."""
    import shutil

    dataset = parts_for("small", 4)
    print("\n## small graph, 4 parts: 4 ranks uninterrupted against 4 ranks to epoch 2, resumed on 2 ranks\n"
          "| run | epochs | best val % | test % at best val | final test % |\n|---|---|---|---|---|", flush=True)
    checkpoints = os.path.join(common.WORK, "elastic_resume_ckpt")
    shutil.rmtree(checkpoints, ignore_errors=True)
    whole = train(dataset, 4, args.accuracy_epochs, args.seed, "resume_whole")
    train(dataset, 4, 2, args.seed, "resume_first", "--checkpoint-dir", checkpoints)
    second = train(dataset, 2, args.accuracy_epochs, args.seed, "resume_second", "--checkpoint-dir", checkpoints,
                   "--resume")
    # the resumed run's metrics file holds its own epochs; its history (in the checkpoint) the first two
    rows = []
    for name, run in (("4 ranks uninterrupted", whole), ("4 ranks, resumed on 2 after epoch 2", second)):
        row = {"what": "resume", "graph": "small", "run": name, "ranks": 4 if run is whole else 2, "parts": 4,
               "epochs": run[-1]["epoch"], "best_val_acc": 100 * max(r["val_acc"] for r in run),
               "test_acc_at_best_val": selected_test(run), "final_test_acc": 100 * run[-1]["test_acc"]}
        rows.append(row)
        print(f"| {name} | {row['epochs']} | {row['best_val_acc']:.1f} | {row['test_acc_at_best_val']:.1f} | "
              f"{row['final_test_acc']:.1f} |", flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--what", default="speed,accuracy,resume", help="speed, accuracy, resume, or several")
    parser.add_argument("--graph", default="medium", help="the speed comparison's graph (small or medium)")
    parser.add_argument("--ranks", type=int, default=2, help="R of the speed comparison (4R parts against R)")
    parser.add_argument("--epochs", type=int, default=3, help="epochs of each speed run")
    parser.add_argument("--accuracy-epochs", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    common.print_header("elastic rank counts: ranks holding several parts against one part per rank")
    rows = []
    if "speed" in args.what:
        rows += speed(args)
    if "accuracy" in args.what:
        rows += accuracy(args)
    if "resume" in args.what:
        rows += resumed(args)
    common.record(rows, title="Ranks holding several parts: epoch time against one part per rank (same graph), "
                  "test accuracy of 4- and 12-part datasets at 1 to 4 ranks, and a run resumed at half its ranks",
                  columns=["what", "graph", "run", "ranks", "parts", "parts_per_rank", "epoch_s",
                           "ratio_to_one_part_per_rank", "test_acc_at_best_val", "final_test_acc"],
                  recipe=MODEL, seed=args.seed)


if __name__ == "__main__":
    main()
