"""Training speed: epoch time, its breakdown and peak RSS per rank of 2-layer GraphSAGE
(hidden 256, fanouts 10,25, batch 1000 per rank, Adam lr 0.003, dropout 0.5, 60% training
nodes) on the symmetrized RMAT graphs, 1, 2 and 4 ranks, shared-memory and forced-RMA routes;
side by side with single-process DGL 2.1 (DGL's own train_single.py script) in the same run.

    python bench/train.py                          # small graph (100k nodes), 10 epochs
    python bench/train.py --graphs small,medium --epochs 5 --dgl
    python bench/train.py --distdgl --ranks 2          # also real multi-process DistDGL 2.1 (root)
    python bench/train.py --graphs medium --ranks 2 --routes shm --precisions fp32,bf16   # bf16 beside fp32
    python bench/train.py --graphs medium --ranks 2,4 --routes shm --variants plain,overlap,grad-bf16,feat-bf16

``--variants`` runs each named set of flags (VARIANTS) beside the plain run: the overlapped
Allreduce, gradient compression, features stored as bfloat16 (its own partition).

``--distdgl`` runs the anchor's run_dist.sh from a writable copy under bench/work/anchor:
per partition one DGL server and one trainer, each pair in its own network and mount
namespace (this needs root), on DGL's own METIS partitions of the same graph.
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

GRAPHS = common.GRAPHS
#: name: (hpcgnn train flags, hpcgnn partition flags)
VARIANTS = {"plain": ([], []), "overlap": (["--overlap"], []), "grad-bf16": (["--grad-compress", "bf16"], []),
            "grad-topk": (["--grad-compress", "topk:0.01"], []), "feat-bf16": ([], ["--feat-dtype", "bfloat16"])}
MODEL = ["--model", "sage", "--hidden", "256", "--fanouts", "10,25", "--batch-size", "1000", "--lr", "0.003",
         "--dropout", "0.5", "--eval-every", "0", "--no-progress"]


def ours(parts, ranks, epochs, route, precision="fp32", variant="plain"):
    metrics = os.path.join(common.WORK, f"train_{os.path.basename(parts)}_{ranks}_{route}_{precision}_{variant}.jsonl")
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    wall, _, _ = common.timed([mpiexec, "-n", str(ranks), sys.executable, "-m", "hpcgnn.train", "--data", parts,
                               "--epochs", str(epochs), "--metrics-file", metrics, "--precision", precision, *MODEL,
                               *VARIANTS[variant][0]],
                              env={"HPCGNN_FORCE_RMA": "1" if route == "rma" else "0"})
    with open(metrics) as fh:
        records = [json.loads(line) for line in fh]
    epochs_ = [r for r in records if "epoch" in r and not r.get("final")]
    later = epochs_[1:] or epochs_
    phases = {k: float(np.median([r["phases_s"][k][1] for r in later])) for k in later[0]["phases_s"]}
    return {"epoch_s": float(np.median([r["epoch_time_s"] for r in later])), "phases_max_s": phases,
            "grad_bytes_per_step": later[0].get("grad_bytes_per_step"),
            "test_acc": records[-1]["test_acc"], "peak_rss_MiB": records[-1]["peak_rss_MiB"], "wall_s": wall}


def dgl_single(python, graph, epochs):
    _, rss, out = common.timed([python, "train_single.py", "--graph", graph, "--num_epochs", str(epochs)],
                               cwd=common.ANCHOR)
    summary = json.loads(next(x for x in out.splitlines() if x.startswith("SUMMARY "))[8:])
    return {"epoch_s": summary["median_epoch_time_2_to_N"], "test_acc": summary["final"]["test_acc"],
            "peak_rss_MiB": [rss], "breakdown": summary["breakdown_median_2_to_N"]}


def anchor_copy():
    """A writable copy of the anchor's scripts (run_dist.sh writes logs/ and results/ beside itself)."""
    work = os.path.join(common.WORK, "anchor")
    for sub in ("logs", "results", "parts"):
        os.makedirs(os.path.join(work, sub), exist_ok=True)
    for path in glob.glob(os.path.join(common.ANCHOR, "*.py")) + glob.glob(os.path.join(common.ANCHOR, "*.sh")):
        shutil.copy2(path, work)
    return work


def dist_dgl(python, graph, tag, ranks, epochs):
    """DistDGL 2.1: ``ranks`` emulated machines, each one server + one trainer, DGL METIS partitions."""
    work = anchor_copy()
    parts = os.path.join(work, "parts", f"{tag}_metis_{ranks}")
    config = os.path.join(parts, "g.json")
    if not os.path.exists(config):
        common.timed([python, "bench_partition.py", "--graph", graph, "--method", "metis", "--parts", str(ranks),
                      "--out", parts, "--name", "g"], cwd=work)
    run_tag = f"hpcgnn_bench_{tag}_{ranks}"
    env = dict(os.environ, ANCHOR_DIR=work, DGLENV=os.path.dirname(os.path.dirname(python)))
    proc = subprocess.run(["bash", "run_dist.sh", run_tag, config, "g", str(ranks), "--num_epochs", str(epochs)],
                          cwd=work, env=env, text=True, capture_output=True)
    subprocess.run(["bash", "netns_teardown.sh"], cwd=work, capture_output=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        raise RuntimeError(f"DistDGL run failed ({proc.returncode})")
    with open(os.path.join(work, "results", run_tag + ".json")) as fh:
        summary = json.load(fh)["summary"]
    rss = []
    for role in ("trainer", "server"):
        for i in range(ranks):
            with open(os.path.join(work, "logs", f"{run_tag}.{role}{i}.time")) as fh:
                kib = next(int(x.split()[-1]) for x in fh if "Maximum resident" in x)
            rss.append(f"{role[0]}{i} {kib / 1024:.0f}")
    return {"epoch_s": summary["median_epoch_time_2_to_N_max_over_ranks"], "test_acc": summary["final"]["test_acc"],
            "breakdown": summary["breakdown_median_2_to_N_this_rank"], "rss": " / ".join(rss)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--graphs", default="small")
    parser.add_argument("--ranks", default="1,2,4")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--dgl", action="store_true", help="also single-process DGL 2.1 (its virtualenv)")
    parser.add_argument("--distdgl", action="store_true", help="also DistDGL 2.1 at every rank count above 1 (root)")
    parser.add_argument("--routes", default="shm,rma", help="hpcgnn's routes at more than one rank")
    parser.add_argument("--precisions", default="fp32", help="hpcgnn's --precision values, side by side")
    parser.add_argument("--variants", default="plain", help=f"hpcgnn flag sets, side by side: {', '.join(VARIANTS)}")
    args = parser.parse_args()
    common.print_header("training benchmark: GraphSAGE 2x256, fanouts 10,25, batch 1000/rank")
    python = common.dgl_python() if args.dgl or args.distdgl else None
    if (args.dgl or args.distdgl) and python is None:
        sys.exit("DGL virtualenv not found: build it with ../shared/anchor_dgl/setup.sh or set DGLENV")
    print("| graph | system | ranks | route | precision | variant | median epoch s (2..N) "
          "| sample/gather/compute/allreduce/wait s (max over ranks) | gradient KiB sent/step/rank | test acc "
          "| peak RSS MiB per rank |\n|---|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for tag in args.graphs.split(","):
        graph = common.ensure_graph(*GRAPHS[tag])
        if args.dgl:
            r = dgl_single(python, graph, args.epochs)
            b = r["breakdown"]
            print(f"| {tag} | DGL 2.1 single process | 1 | - | fp32 | - | {r['epoch_s']:.2f} "
                  f"| sample {b['sample']:.2f}, fetch {b['fetch']:.2f}, fwd+bwd {b['forward'] + b['backward']:.2f} "
                  f"| - | {r['test_acc']:.4f} | {r['peak_rss_MiB'][0]:.0f} |", flush=True)
            rows.append(_row(tag, "DGL 2.1 single process", 1, "-", "fp32", "-", r["epoch_s"], b, None, r["test_acc"],
                             r["peak_rss_MiB"][0]))
        for ranks in [int(x) for x in args.ranks.split(",")]:
            if args.distdgl and ranks > 1:
                r = dist_dgl(python, graph, tag, ranks, args.epochs)
                b = r["breakdown"]
                print(f"| {tag} | DistDGL 2.1 | {ranks} | servers+RPC | fp32 | - | {r['epoch_s']:.2f} "
                      f"| sample {b['sample']:.2f}, fetch {b['fetch']:.2f}, "
                      f"fwd+bwd {b['forward'] + b['backward']:.2f} (rank 0) | - | {r['test_acc']:.4f} | {r['rss']} |",
                      flush=True)
                rows.append(_row(tag, "DistDGL 2.1", ranks, "servers+RPC", "fp32", "-", r["epoch_s"], b, None,
                                 r["test_acc"], r["rss"]))
            for route in (args.routes.split(",") if ranks > 1 else ("shm",)):
                for precision in args.precisions.split(","):
                    for variant in args.variants.split(","):
                        partition_flags = VARIANTS[variant][1]
                        parts = common.ensure_parts(graph, ranks, f"train_{tag}" + ("_featbf16" if partition_flags
                                                                                    else ""), *partition_flags)
                        r = ours(parts, ranks, args.epochs, route, precision, variant)
                        phases = ("sample", "gather", "compute", "allreduce", "wait")
                        ph = "/".join(f"{r['phases_max_s'][k]:.2f}" for k in phases)
                        rss = " / ".join(f"{x:.0f}" for x in r["peak_rss_MiB"])
                        sent = r["grad_bytes_per_step"]
                        print(f"| {tag} | hpcgnn | {ranks} | {route} | {precision} | {variant} | {r['epoch_s']:.2f} "
                              f"| {ph} | {'-' if sent is None else f'{sent / 1024:.0f}'} | {r['test_acc']:.4f} "
                              f"| {rss} |", flush=True)
                        rows.append(_row(tag, "hpcgnn", ranks, route, precision, variant, r["epoch_s"],
                                         {k: r["phases_max_s"][k] for k in phases},
                                         None if sent is None else sent / 1024, r["test_acc"], r["peak_rss_MiB"]))
    common.record(rows, title=f"Training epochs, GraphSAGE 2x256, fanouts 10,25, batch 1000 per rank, "
                              f"{args.epochs} epochs")


def _row(graph, system, ranks, route, precision, variant, epoch_s, phases, grad_kib, test_acc, rss) -> dict:
    """One line of the training table as a record row."""
    return {"graph": graph, "system": system, "ranks": ranks, "route": route, "precision": precision,
            "variant": variant, "median epoch s (2..N)": epoch_s, "phases s (max over ranks)": phases,
            "gradient KiB sent/step/rank": grad_kib, "test acc": test_acc, "peak RSS MiB per rank": rss}


if __name__ == "__main__":
    main()
