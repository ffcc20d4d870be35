"""Accuracy on the bundled real datasets, through the whole pipeline
(read -> partition -> mpirun train -> distributed full-neighbourhood inference), with 1, 2
and 4 ranks.

  GraphSAGE-mean on Amazon Computers and Coauthor CS under one protocol, Shchur et al.'s, with
  nothing tuned per dataset: largest connected component, 20 training and 30 validation nodes
  per class, every other node a test node (the seed draws the split); row-normalised features
  (so Adam's step moves a first-layer pre-activation by at most about lr, whatever the
  dataset's feature counts); up to 1000 epochs with early stopping once validation loss has not
  improved for 50, and the test accuracy of the epoch of lowest validation loss. Mean +- std
  over seeds (published: 82.4 and 91.3).
  GCN on Cora and CiteSeer, Planetoid public split, Kipf & Welling's protocol: row-normalised
  features, 200 epochs, the epoch of best validation accuracy (published: 81.5 and 70.3).
  The figure is ``selected_test_acc`` of each run's final record.
  R-GCN on the typed sets AIFB (R-GCN's RDF benchmark: its fixed train/test files) and DBLP
  (HGB's split: its train+val authors and its test authors; single-label, so the test accuracy
  is HGB's Micro-F1), one recipe for both. Featureless nodes take R-GCN's own input layer
  (--featureless relational). Neither split ships a validation part (AIFB's training file and
  HGB's label.dat hold all the labelled nodes), so the epoch count is chosen by 5-fold
  cross-validation over the labelled training nodes (--refit-folds 5: each fold validates once,
  of the counts 1..100 within one standard error of the best mean validation accuracy, the median wins), then
  every labelled training node trains for that count (--val-fraction 0), and the figure is the
  test accuracy of the average of six models' class probabilities: the five fold models after
  the chosen count and that last run's (--refit-predict ensemble; published: 95.8 and 92.1).
  The last run's own test accuracy is recorded beside it (last_run_accuracies).

Runs are kept in bench/work/accuracy under a name that includes a hash of their flags;
``--reuse`` takes a finished run from there instead of running it again.

    python bench/accuracy.py                       # everything (about 2 hours here)
    python bench/accuracy.py --datasets cora --seeds 3 --ranks 1
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

from hpcgnn.training import refit  # noqa: E402

DATA = os.path.join(os.path.dirname(common.ROOT), "shared", "data")
SAGE = ["--model", "sage", "--hidden", "64", "--dropout", "0.5", "--lr", "0.01", "--weight-decay", "5e-4",
        "--epochs", "200", "--fanouts", "all,all"]
GCN = ["--model", "gcn", "--hidden", "16", "--dropout", "0.5", "--input-dropout", "0.5", "--lr", "0.01",
       "--weight-decay", "5e-4", "--epochs", "200", "--fanouts", "all,all"]
SHCHUR = ["--largest-component", "--split", "per-class:20,30", "--normalize-features"]
#: Shchur et al.'s training protocol: early stopping on validation loss, patience 50; weight decay
#: 5e-5, since row-normalised inputs need first-layer weights about a row's feature count larger
SHCHUR_TRAIN = [*SAGE[:SAGE.index("--weight-decay")], "--weight-decay", "5e-5", "--epochs", "1000",
                *SAGE[SAGE.index("--epochs") + 2:], "--select", "loss", "--early-stop", "50"]
#: one R-GCN recipe for every typed dataset: featureless nodes learn R-GCN's per-relation input
#: rows; the epoch count (at most 100) chosen by 5-fold cross-validation, then every labelled node
#: trains, and the fold models vote with the last run's
RGCN = ["--model", "rgcn", "--featureless", "relational", "--hidden", "16", "--dropout", "0.5", "--lr", "0.01",
        "--weight-decay", "5e-4", "--epochs", "100", "--fanouts", "all,all", "--refit-folds", "5",
        "--refit-predict", "ensemble"]
#: a typed split of train and test only: the labelled training nodes are the folds' pool
ALL_TRAINING = ["--val-fraction", "0"]
RUNS = {
    "amazon_computers": dict(path="amazon_computers/amazon_cs.npz", model="sage", published=82.4, seeds=5,
                             select="val_loss", prepare=SHCHUR, train=SHCHUR_TRAIN),
    "coauthor_cs": dict(path="coauthor_cs/coauthor_cs.npz", model="sage", published=91.3, seeds=5,
                        select="val_loss", prepare=SHCHUR, train=SHCHUR_TRAIN),
    "cora": dict(path="cora", model="gcn", published=81.5, seeds=5, select="val_acc",
                 prepare=["--normalize-features"], train=GCN),
    "citeseer": dict(path="citeseer", model="gcn", published=70.3, seeds=5, select="val_acc",
                     prepare=["--normalize-features"], train=GCN),
    # typed graphs: the readers add each relation's reverse; no validation part, the last epoch
    "aifb": dict(path="aifb", model="rgcn", published=95.8, seeds=10, select="refit", prepare=ALL_TRAINING,
                 train=RGCN, typed=True),
    "dblp": dict(path="dblp", model="rgcn", published=92.1, seeds=5, select="refit",
                 prepare=["--hgb-split", *ALL_TRAINING], train=RGCN, typed=True),
}
#: the final record's headline figure: the test accuracy of the epoch the run's --select chose
SELECTED = "selected_test_acc"
#: ... and of a run without validation nodes, which selects nothing: its last epoch's
LAST = "test_acc"
#: the table's words for a protocol
SELECTED_ON = {"refit": "epochs by 5-fold CV"}


def headline(final) -> float:
    """A run's figure from its final record: the selected epoch's test accuracy, or without a
    validation part the last epoch's."""
    return final[SELECTED] if SELECTED in final else final[LAST]


def protocol_tag(spec) -> str:
    """Local. A short hash of a dataset's preparation and training flags: runs of another protocol
    are never taken for this one's."""
    rule = [refit.RULE] if spec["select"] == "refit" else []  # how the refit count is chosen
    flags = json.dumps([spec["path"], spec["prepare"], spec["train"], *rule])
    return hashlib.sha1(flags.encode()).hexdigest()[:8]


def parts_path(name, spec, seed, ranks) -> str:
    """Where the dataset prepared for one run lives (its name hashes the run's flags)."""
    work = os.path.join(common.WORK, "accuracy")
    os.makedirs(work, exist_ok=True)
    return os.path.join(work, f"{name}_{protocol_tag(spec)}_s{seed}_p{ranks}")


def prepare(name, spec, seed, ranks, again=False) -> str:
    """Partition the dataset with this seed's split into ``ranks`` parts (once, unless ``again``);
    its directory."""
    parts = parts_path(name, spec, seed, ranks)
    if not again and os.path.exists(os.path.join(parts, "meta.json")):
        return parts
    subprocess.run(common.hpcgnn_cmd("partition", os.path.join(DATA, spec["path"]), "--parts", str(ranks),
                                     "--out", parts, "--force", *partition_flags(spec, seed)),
                   check=True, capture_output=True)
    return parts


def partition_flags(spec, seed) -> list:
    """The partition flags of one run beside input, parts and output: the dataset's preparation, the
    seed of a split the seed draws, and (homogeneous sets) --symmetrize; a typed reader adds each
    relation's reverse itself."""
    drawn = spec.get("typed") or "per-class" in " ".join(spec["prepare"])
    return ([] if spec.get("typed") else ["--symmetrize"]) + spec["prepare"] + (["--split-seed", str(seed)] if drawn
                                                                                else [])


def one_run(name, spec, seed, ranks, reuse=False, precision="fp32", compress="none"):
    """Partition with this seed's split, train on ``ranks`` ranks, return the final metrics record."""
    parts = parts_path(name, spec, seed, ranks)
    metrics = (parts + ("" if precision == "fp32" else "_" + precision)
               + ("" if compress == "none" else "_gc-" + compress.replace(":", "")) + ".jsonl")
    if reuse and os.path.exists(metrics):
        with open(metrics) as fh:
            records = [json.loads(line) for line in fh if line.strip()]
        if records and records[-1].get("final"):
            return records[-1]
    prepare(name, spec, seed, ranks, again=True)
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    subprocess.run([mpiexec, "-n", str(ranks), sys.executable, "-m", "hpcgnn.train", "--data", parts,
                    *spec["train"], "--batch-size", "100000", "--eval-every", "1", "--seed", str(seed),
                    "--metrics-file", metrics, "--no-progress", "--prefetch", "0", "--precision", precision,
                    "--grad-compress", compress],
                   check=True, capture_output=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    with open(metrics) as fh:
        return [json.loads(line) for line in fh][-1]


def recipe(name, spec, seed=0, ranks=2) -> str:
    """The shell commands of one run, as a user pastes them (data under $DATA)."""
    parts = f"parts/{name}"
    partition = ["hpcgnn", "partition", f"$DATA/{spec['path']}", "--parts", str(ranks), "--out", parts,
                 *partition_flags(spec, seed)]
    train = ["mpirun", "-np", str(ranks), "python", "-m", "hpcgnn.train", "--data", parts, *spec["train"],
             "--batch-size", "100000", "--eval-every", "1", "--seed", str(seed), "--metrics-file", f"{name}.jsonl"]
    field = LAST if spec["select"] in ("last_epoch", "refit") else SELECTED
    return (f"# {name}: {spec['model']}, published {spec['published']}; the figure is '{field}' of the final record\n"
            + " ".join(partition) + "\n" + " ".join(train) + f"\ntail -1 {name}.jsonl\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", default="cora,citeseer,amazon_computers,coauthor_cs")
    parser.add_argument("--seeds", type=int, help="seeds 0..N-1 (default: the dataset's own count)")
    parser.add_argument("--ranks", default="1,2,4")
    parser.add_argument("--reuse", action="store_true", help="take finished runs from bench/work/accuracy")
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16"), help="hpcgnn train --precision")
    parser.add_argument("--grad-compress", default="none", help="hpcgnn train --grad-compress (none, bf16, topk:R)")
    parser.add_argument("--json", help="append this run's record here instead of bench/results/<script>.json")
    parser.add_argument("--commands", action="store_true",
                        help="print each dataset's commands (seed 0, 2 ranks) for a user to paste, and exit")
    args = parser.parse_args()
    if args.commands:
        print("\n".join(recipe(name, RUNS[name]) for name in args.datasets.split(",")), end="")
        return
    common.print_header(f"accuracy benchmark ({args.precision}, gradient compression {args.grad_compress})")
    print("| dataset | model | ranks | test acc % (mean +- std) | selected on | seeds | published |\n"
          "|---|---|---|---|---|---|---|")
    rows = []
    for name in args.datasets.split(","):
        spec = RUNS[name]
        seeds = args.seeds or spec["seeds"]
        for ranks in [int(r) for r in args.ranks.split(",")]:
            finals = [one_run(name, spec, seed, ranks, args.reuse, args.precision, args.grad_compress)
                      for seed in range(seeds)]
            acc = 100 * np.array([headline(f) for f in finals])
            row = {"dataset": name, "ranks": ranks, "select": spec["select"], "accuracies": acc.tolist()}
            chosen = [f["refit"]["epochs"] for f in finals if "refit" in f]
            if chosen:  # the epoch counts cross-validation chose, seed by seed
                row["refit_epochs"] = chosen
            alone = [f["refit"]["last_run"]["test_acc"] for f in finals if "last_run" in f.get("refit", {})]
            if alone:  # --refit-predict ensemble: the last run's model by itself
                row["last_run_accuracies"] = (100 * np.array(alone)).tolist()
            rows.append(row)
            print(f"| {name} | {spec['model']} | {ranks} | {acc.mean():.1f} +- {acc.std():.1f} | "
                  f"{SELECTED_ON.get(spec['select'], spec['select'].replace('_', ' '))} | {seeds} | "
                  f"{spec['published']} |", flush=True)
    common.record(rows, path=args.json, title=f"Test accuracy on real datasets ({args.precision}, gradient "
                                              f"compression {args.grad_compress})")


if __name__ == "__main__":
    main()
