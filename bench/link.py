"""Link prediction benchmarks: accuracy on Cora and CiteSeer against the graph auto-encoder's
published figures, and training throughput beside DGL 2.1 on the medium RMAT graph.

accuracy  The graph auto-encoder's protocol: 85/5/10 edge split (seeded by --split-seed = the
          run's seed), evaluation negatives that are random pairs of unconnected nodes
          (--eval-negatives-kind uniform), features only (no labels), GCN encoder (2 layers, 64
          wide, dropout 0.5) + dot-product predictor, binary cross-entropy, one uniform negative
          pair per training edge, full neighbourhoods, the whole training set as one batch with
          its edges kept in the message-passing graph (GAE's transductive setting: --exclude
          none), Adam lr 0.01, 200 epochs, the epoch of best validation AUC selected. One recipe
          for both datasets. Test AUC and AP (AP on one negative per positive, as GAE), mean +-
          std over seeds, at 1, 2 and 4 ranks. Published (Kipf & Welling 2016, GAE): Cora 91.0 /
          92.0, CiteSeer 89.5 / 89.9.

throughput  medium RMAT graph (1M nodes, 25M edges symmetrized; 100-d features), 85/5/10 edge
          split with one fixed negative per evaluation edge, GraphSAGE-mean 2 x 256, fanouts 10,25,
          a global batch of 1000 positive edges (hpcgnn: 1000 / ranks per rank), one uniform
          corrupted negative each, the batch's edges and their reverses excluded, dot predictor,
          Adam lr 0.003, weights initialised alike (PyTorch's nn.Linear default; DGL's own
          Glorot start is bench/dgl_link.py --init dgl), the same number of steps. DGL 2.1
          (bench/dgl_link.py, its own virtualenv) reads the same message-passing graph, training
          edges, test edges and negatives. Reported:
          positive edges per second of training, and test AUC after training (each test edge
          against its one stored negative, full-neighbourhood inference).

    python bench/link.py accuracy [--seeds 5 --ranks 1,2,4] [--reuse]
    python bench/link.py throughput [--steps 300 --ranks 1,2] [--dgl]
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
PUBLISHED = {"cora": (91.0, 92.0), "citeseer": (89.5, 89.9)}
ACCURACY_TRAIN = ["--task", "link", "--model", "gcn", "--hidden", "64", "--dropout", "0.5", "--lr", "0.01",
                  "--epochs", "200", "--fanouts", "all,all", "--batch-size", "1000000", "--exclude", "none",
                  "--negatives", "1", "--negative-sampler", "uniform", "--eval-every", "1", "--select", "metric",
                  "--metric", "auc"]
MEDIUM = (1_000_000, 25_000_000, 100, 20)
THROUGHPUT_TRAIN = ["--task", "link", "--model", "sage", "--hidden", "256", "--fanouts", "10,25", "--lr", "0.003",
                    "--negatives", "1", "--negative-sampler", "corrupt", "--epochs", "1", "--eval-every", "1",
                    "--eval-batch-size", "20000"]


def mpirun(ranks, *argv):
    """Run ``python -m hpcgnn.<cmd>`` on ``ranks`` MPI ranks, one thread each; its stdout."""
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    done = subprocess.run([mpiexec, "-n", str(ranks), sys.executable, "-m", *argv], capture_output=True, text=True,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    if done.returncode:
        sys.stderr.write(done.stdout[-3000:] + done.stderr[-3000:])
        raise RuntimeError(f"failed: {' '.join(argv)}")
    return done.stdout


def final_record(metrics):
    with open(metrics) as fh:
        return [json.loads(line) for line in fh if line.strip()][-1]


def accuracy(args):
    """Test AUC/AP of the selected epoch, per dataset and rank count, over seeds."""
    work = os.path.join(common.WORK, "link_accuracy")
    os.makedirs(work, exist_ok=True)
    print("| dataset | ranks | test AUC % | test AP % | test MRR (100 pairs) | seeds | published AUC / AP |\n"
          "|---|---|---|---|---|---|---|", flush=True)
    rows = []
    for name in args.datasets.split(","):
        for ranks in [int(r) for r in args.ranks.split(",")]:
            finals = []
            for seed in range(args.seeds):
                parts = os.path.join(work, f"{name}_s{seed}_p{ranks}")
                metrics = parts + ".jsonl"
                if args.reuse and os.path.exists(metrics) and final_record(metrics).get("final"):
                    finals.append(final_record(metrics))
                    continue
                subprocess.run(common.hpcgnn_cmd("partition", os.path.join(DATA, name), "--parts", str(ranks),
                                                 "--symmetrize", "--edge-split", "0.85,0.05,0.1",
                                                 "--eval-negatives-kind", "uniform", "--split-seed",
                                                 str(seed), "--out", parts, "--force"), check=True, capture_output=True)
                if os.path.exists(metrics):
                    os.remove(metrics)
                mpirun(ranks, "hpcgnn.train", "--data", parts, *ACCURACY_TRAIN, "--seed", str(seed), "--metrics-file",
                       metrics, "--no-progress", "--prefetch", "0")
                finals.append(final_record(metrics))
            auc = 100 * np.array([f["selected_test_auc"] for f in finals])
            ap = 100 * np.array([f["selected_test_ap"] for f in finals])
            mrr = np.array([f["selected_test_mrr"] for f in finals])
            rows.append({"dataset": name, "ranks": ranks, "auc": auc.tolist(), "ap": ap.tolist(), "mrr": mrr.tolist()})
            print(f"| {name} | {ranks} | {auc.mean():.1f} +- {auc.std():.1f} | {ap.mean():.1f} +- {ap.std():.1f} | "
                  f"{mrr.mean():.3f} | {args.seeds} | {PUBLISHED[name][0]} / {PUBLISHED[name][1]} |", flush=True)
    return rows


def export_split(parts, out):
    """The dataset's message-passing graph, features, training edges (each undirected edge once),
    test edges and their negatives as one npz, in the dataset's ids: what bench/dgl_link.py reads."""
    from hpcgnn.format import ondisk

    meta = ondisk.read_meta(parts)
    src, dst, feat, test = [], [], [], {"src": [], "dst": [], "neg": []}
    for p in range(meta["num_parts"]):
        part = ondisk.read_part(parts, meta, p)
        degree = np.diff(part["indptr"])
        dst.append(np.repeat(np.arange(meta["node_starts"][p], meta["node_starts"][p + 1]), degree))
        src.append(part["indices"].astype(np.int64))
        feat.append(part["feat"])
        for key in test:
            test[key].append(part[f"link_test_{key}"])
    src, dst = np.concatenate(src), np.concatenate(dst)
    train = src < dst
    np.savez(out, src=src, dst=dst, feat=np.concatenate(feat), train_src=src[train], train_dst=dst[train],
             test_src=np.concatenate(test["src"]), test_dst=np.concatenate(test["dst"]),
             test_neg=np.concatenate(test["neg"]))


def ensure_link_parts(graph, ranks):
    out = os.path.join(common.WORK, f"link_medium_{ranks}")
    if not os.path.exists(os.path.join(out, "meta.json")):
        subprocess.run(common.hpcgnn_cmd("partition", graph, "--parts", str(ranks), "--symmetrize", "--edge-split",
                                         "0.85,0.05,0.1", "--eval-negatives", "1", "--out", out, "--force"),
                       check=True, capture_output=True)
    return out


def throughput(args):
    """Positive edges per second and test AUC, hpcgnn at each rank count and DGL, the same steps."""
    graph = common.ensure_graph(*MEDIUM)
    print("| system | ranks x threads | positive edges/s | train s | steps | test AUC | eval s |\n"
          "|---|---|---|---|---|---|---|", flush=True)
    rows, parts = [], None
    for ranks in [int(r) for r in args.ranks.split(",")]:
        parts = ensure_link_parts(graph, ranks)
        metrics = os.path.join(common.WORK, f"link_medium_{ranks}.jsonl")
        if os.path.exists(metrics):
            os.remove(metrics)
        mpirun(ranks, "hpcgnn.train", "--data", parts, *THROUGHPUT_TRAIN, "--batch-size", str(1000 // ranks),
               "--steps-per-epoch", str(args.steps), "--metrics-file", metrics, "--no-progress")
        final = final_record(metrics)
        edges = args.steps * (1000 // ranks) * ranks
        row = {"system": "hpcgnn", "ranks": ranks, "threads": 1, "pos_edges_per_s": edges / final["epoch_time_s"],
               "train_s": final["epoch_time_s"], "steps": args.steps, "test_auc": final["test_auc"],
               "eval_s": final["eval_time_s"]}
        rows.append(row)
        print(f"| hpcgnn | {ranks} x 1 | {row['pos_edges_per_s']:,.0f} | {row['train_s']:.1f} | {args.steps} | "
              f"{row['test_auc']:.4f} | {row['eval_s']:.1f} |", flush=True)
    python = common.dgl_python() if args.dgl else None
    if python:
        split = os.path.join(common.WORK, "link_medium_split.npz")
        if not os.path.exists(split):
            export_split(parts, split)
        for threads in (1, 2):
            out = subprocess.run([python, os.path.join(common.ROOT, "bench", "dgl_link.py"), split, "--fanouts",
                                  "10,25", "--hidden", "256", "--batch-size", "1000", "--max-steps", str(args.steps),
                                  "--threads", str(threads)],
                                 capture_output=True, text=True, check=True,
                                 env=dict(os.environ, OMP_NUM_THREADS=str(threads))).stdout
            row = dict(json.loads(out.strip().splitlines()[-1]), ranks=1, threads=threads)
            rows.append(row)
            print(f"| DGL 2.1 | 1 x {threads} | {row['pos_edges_per_s']:,.0f} | {row['train_s']:.1f} | "
                  f"{row['steps']} | {row['test_auc']:.4f} | {row['eval_s']:.1f} |", flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("accuracy", "throughput"))
    parser.add_argument("--datasets", default="cora,citeseer")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--ranks", default=None, help="default: 1,2,4 (accuracy), 1,2 (throughput)")
    parser.add_argument("--steps", type=int, default=300, help="throughput: training steps timed")
    parser.add_argument("--dgl", action="store_true", help="throughput: DGL 2.1 side by side")
    parser.add_argument("--reuse", action="store_true", help="accuracy: take finished runs from bench/work")
    parser.add_argument("--json", help="append this run's record here instead of bench/results/<script>.json")
    args = parser.parse_args()
    args.ranks = args.ranks or ("1,2,4" if args.what == "accuracy" else "1,2")
    common.print_header(f"link prediction {args.what}")
    rows = accuracy(args) if args.what == "accuracy" else throughput(args)
    common.record(rows, path=args.json, title=f"Link prediction {args.what}")


if __name__ == "__main__":
    main()
