"""A giant graph on one box: generate, partition and train, every stage on the ranks.

RMAT with 5M nodes and 125M directed edges (250M once symmetrized), 100-d features, as in
seed 004's scaling table (DGL: 4.7 s/epoch and 8 GB for GCN with neighbour sampling on a
64-core X1.32xlarge). Every stage runs under ``mpiexec -n R`` and nothing gathers the graph:

1. ``hpcgnn generate rmat`` draws the graph on the R ranks and writes a graph file (.h5);
2. ``hpcgnn partition --method multilevel --symmetrize`` reads it by rows, symmetrizes,
   partitions and writes the parts;
3. ``hpcgnn train``: 2-layer GraphSAGE, hidden 256, fanouts 10,25, batch 1000 per rank, one
   epoch (or ``--epochs``) and the full-neighbourhood evaluation after it.

Printed per stage: wall time and the largest process's peak RSS; then the epoch beside seed
004's, both in core-seconds per epoch (time times cores).

    python bench/scale.py                            # the 5M / 250M graph, 2 ranks, 2 parts
    python bench/scale.py --nodes 1000000 --edges 25000000 --reuse
"""
import argparse
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

SEED_004 = {"epoch_s": 4.7, "cores": 64, "memory_GB": 8}
MODEL = ["--model", "sage", "--hidden", "256", "--fanouts", "10,25", "--batch-size", "1000", "--lr", "0.003",
         "--dropout", "0.5", "--no-progress"]


def stage(name, cmd, rows, env=None):
    wall, rss, _ = common.timed(cmd, env=env)
    rows.append({"stage": name, "wall_s": wall, "peak_rss_GiB": rss / 1024})
    print(f"| {name} | {wall:.1f} | {rss / 1024:.2f} |", flush=True)
    return rows[-1]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5_000_000)
    parser.add_argument("--edges", type=int, default=125_000_000)
    parser.add_argument("--feat-dim", type=int, default=100)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--parts", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--reuse", action="store_true", help="keep an existing graph file and parts")
    parser.add_argument("--json", help="append this run's record here instead of bench/results/<script>.json")
    args = parser.parse_args()
    common.print_header("seed 004's graph on one box")
    mpiexec = [os.path.join(os.path.dirname(sys.executable), "mpiexec"), "-n", str(args.ranks)]
    graph = os.path.join(common.WORK, f"scale_{args.nodes}_{args.edges}_{args.feat_dim}.h5")
    parts = os.path.join(common.WORK, f"scale_{args.nodes}_{args.edges}_{args.feat_dim}_p{args.parts}")
    print(f"# RMAT {args.nodes:,} nodes, {args.edges:,} directed edges, {args.feat_dim}-d features; "
          f"{args.ranks} ranks, {args.parts} parts")
    print("| stage | wall s | largest process peak RSS GiB |\n|---|---|---|")
    rows = []
    if not (args.reuse and os.path.exists(graph)):
        stage("generate (graph file)", [*mpiexec, *common.hpcgnn_cmd(
            "generate", "rmat", "--nodes", str(args.nodes), "--edges", str(args.edges), "--feat-dim",
            str(args.feat_dim), "--classes", "20", "--out", graph)], rows)
    if not (args.reuse and os.path.exists(os.path.join(parts, "meta.json"))):
        shutil.rmtree(parts, ignore_errors=True)
        stage("partition --method multilevel", [*mpiexec, *common.hpcgnn_cmd(
            "partition", graph, "--parts", str(args.parts), "--symmetrize", "--method", "multilevel",
            "--out", parts)], rows)
    with open(os.path.join(parts, "meta.json")) as fh:
        meta = json.load(fh)
    p = meta["partitioner"]
    print(f"# parts: {meta['num_edges']:,} edges, cut {100 * p['edge_cut_fraction']:.2f}%, imbalance nodes "
          f"{p['imbalance']['num_nodes']} edges {p['imbalance']['num_edges']}, levels {p.get('levels')}")
    metrics = os.path.join(common.WORK, "scale_train.jsonl")
    if os.path.exists(metrics):
        os.unlink(metrics)
    stage(f"train {args.epochs} epoch + evaluation",
          [*mpiexec, sys.executable, "-m", "hpcgnn.train", "--data", parts, "--epochs", str(args.epochs),
           "--eval-every", str(args.epochs), "--metrics-file", metrics, *MODEL], rows)
    with open(metrics) as fh:
        records = [json.loads(line) for line in fh]
    final = records[-1]
    epoch_s = float(final["epoch_time_s"])
    ours_core_s, seed_core_s = epoch_s * args.ranks, SEED_004["epoch_s"] * SEED_004["cores"]
    rss = ", ".join(f"{m / 1024:.2f}" for m in final["peak_rss_MiB"])
    print(f"# epoch {epoch_s:.1f} s on {args.ranks} ranks, evaluation {final['eval_time_s']:.1f} s, "
          f"test acc {final['test_acc']:.4f}; peak RSS per rank {rss} GiB")
    print(f"# core-seconds per epoch: hpcgnn {ours_core_s:.0f} ({args.ranks} cores), seed 004's DGL "
          f"{seed_core_s:.0f} ({SEED_004['cores']} cores, {SEED_004['epoch_s']} s); "
          f"ratio {ours_core_s / seed_core_s:.2f}")
    common.record(rows, path=args.json, title="A generated graph end to end: generate, partition, train",
                  final=final, meta_partitioner=p)


if __name__ == "__main__":
    main()
