"""Time and peak memory of drawing an IGBH-schema typed graph and partitioning it, by both routes.

serial: one process does what ``hpcgnn generate hetero --parts P`` does with ``--method metis``:
draw the graph (:func:`hpcgnn.prep.generate_hetero.hetero_graph`, reverses included) and
partition it with METIS into a dataset (:func:`hpcgnn.prep.partition.partition_graph`); the
seconds of each stage and the process's peak resident memory (``getrusage``) after each.

spread: ``mpiexec -n K hpcgnn generate hetero --parts P --method multilevel``: every rank draws
its share of every relation and type and the graph is partitioned spread over the ranks
(:mod:`hpcgnn.prep.dist`); the job's seconds and every rank's peak resident memory
(``/usr/bin/time``), beside the edges each rank held (the memory should follow E / K).

train (with ``--train``): one R-GAT epoch on the spread route's dataset under ``mpiexec -n K``
(``--fanouts 15,10 --batch-size 1000 --hidden 128 --heads 4``): the epoch's seconds from the
metrics file and every rank's peak resident memory.

    python bench/hetero_generate.py                                        # 5M nodes, 100M edges, 4 parts
    python bench/hetero_generate.py --nodes 200000 --edges 2000000         # a quick trial
    python bench/hetero_generate.py --routes spread --train                # the scale goal's run
    python bench/hetero_generate.py --train-only                           # its epoch again, on the kept dataset
"""
import argparse
import glob
import json
import os
import resource
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

#: one R-GAT epoch, not evaluated: the full-graph inference of its 512-wide hidden layer holds 2.5 GiB more a
#: rank (5M nodes over 4), which 4 ranks training beside it on a 24 GiB machine do not have
TRAIN_FLAGS = ["--model", "rgat", "--fanouts", "15,10", "--batch-size", "1000", "--hidden", "128", "--heads", "4",
               "--epochs", "1", "--eval-every", "never"]


def peak_gib():
    """This process's peak resident memory so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def serial_route(args, out_dir):
    """Draw and partition in this process; seconds and peak memory after each stage."""
    from hpcgnn.prep.generate_hetero import hetero_graph, hetero_summary
    from hpcgnn.prep.partition import partition_graph

    started = time.perf_counter()
    graph = hetero_graph(args.nodes, args.edges, feat_dim=args.feat_dim, seed=0)
    draw_s, draw_peak = time.perf_counter() - started, peak_gib()
    summary = hetero_summary(graph)
    print(f"# serial: drew {graph.num_nodes:,} nodes, {graph.num_edges:,} edges with reverses in {draw_s:.1f} s, "
          f"peak {draw_peak:.2f} GiB", flush=True)
    started = time.perf_counter()
    meta = partition_graph(graph, out_dir, args.parts, "metis", seed=0, release_input=True)
    partition_s, total_peak = time.perf_counter() - started, peak_gib()
    disk_gib = common.du_bytes(out_dir) / 2**30
    print(f"# serial: partitioned into {args.parts} parts in {partition_s:.1f} s, edge cut "
          f"{100 * meta['partitioner']['edge_cut_fraction']:.2f}%, peak {total_peak:.2f} GiB, "
          f"{disk_gib:.2f} GiB on disk", flush=True)
    return summary, {"draw_s": round(draw_s, 1), "draw_peak_GiB": round(draw_peak, 2),
                     "partition_s": round(partition_s, 1), "peak_GiB": round(total_peak, 2),
                     "edge_cut": round(meta["partitioner"]["edge_cut_fraction"], 4), "disk_GiB": round(disk_gib, 2)}


def under_mpiexec(ranks, command, rss_dir, log_path):
    """Run ``command`` on ``ranks`` ranks, each under ``/usr/bin/time``; returns the wall seconds
    and every rank's peak resident memory in GiB (rank order)."""
    os.makedirs(rss_dir, exist_ok=True)
    for stale in glob.glob(os.path.join(rss_dir, "rss.*")):
        os.remove(stale)
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    wrapped = ["sh", "-c", f'exec /usr/bin/time -f %M -o "{rss_dir}/rss.$PMI_RANK" "$@"', "rank", *command]
    started = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.run([mpiexec, "-n", str(ranks), *wrapped], env=dict(os.environ, OMP_NUM_THREADS="1"),
                              stdout=log, stderr=subprocess.STDOUT, text=True)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        sys.stderr.write(open(log_path).read()[-4000:])
        raise RuntimeError(f"failed ({proc.returncode}): {' '.join(command)}")
    peaks = []
    for rank in range(ranks):
        with open(os.path.join(rss_dir, f"rss.{rank}")) as fh:
            peaks.append(round(int(fh.read().split()[-1]) / 2**20, 2))
    return wall, peaks


def spread_route(args, out_dir):
    """``mpiexec -n K generate hetero --method multilevel``: seconds and every rank's peak memory."""
    from hpcgnn.format import ondisk

    command = [sys.executable, "-m", "hpcgnn.generate", "hetero", "--nodes", str(args.nodes), "--edges",
               str(args.edges), "--feat-dim", str(args.feat_dim), "--parts", str(args.parts), "--method",
               "multilevel", "--seed", "0", "--force", "--out", out_dir]
    wall, peaks = under_mpiexec(args.ranks, command, os.path.join(common.WORK, "hetero_rss"),
                                os.path.join(common.WORK, "hetero_spread.log"))
    meta = ondisk.read_meta(out_dir)
    stored_edges = meta["num_edges"]
    print(f"# spread: {args.ranks} ranks drew and partitioned {meta['num_nodes']:,} nodes, {stored_edges:,} edges "
          f"into {args.parts} parts in {wall:.1f} s, edge cut {100 * meta['partitioner']['edge_cut_fraction']:.2f}%, "
          f"peak per rank {', '.join(f'{p:.2f}' for p in peaks)} GiB", flush=True)
    return {"ranks": args.ranks, "wall_s": round(wall, 1), "peak_GiB_per_rank": peaks,
            "peak_GiB_sum": round(sum(peaks), 2), "edges_per_rank": stored_edges // args.ranks,
            "peak_bytes_per_edge_of_a_rank": round(max(peaks) * 2**30 / (stored_edges / args.ranks), 1),
            "edge_cut": round(meta["partitioner"]["edge_cut_fraction"], 4),
            "imbalance": meta["partitioner"]["imbalance"], "assign_s": meta["partitioner"]["assign_s"],
            "write_s": meta["partitioner"]["write_s"], "disk_GiB": round(common.du_bytes(out_dir) / 2**30, 2)}


def train_epoch(args, data_dir):
    """One R-GAT epoch on ``data_dir`` under ``mpiexec -n parts``: its seconds and every rank's memory."""
    metrics = os.path.join(common.WORK, "hetero_train_metrics.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    command = [sys.executable, "-m", "hpcgnn.train", "--data", data_dir, *TRAIN_FLAGS, "--no-progress",
               "--metrics-file", metrics]
    wall, peaks = under_mpiexec(args.parts, command, os.path.join(common.WORK, "hetero_rss"),
                                os.path.join(common.WORK, "hetero_train.log"))
    with open(metrics) as fh:
        records = [json.loads(line) for line in fh if line.strip()]
    epoch = next(r for r in records if "epoch_time_s" in r and not r.get("final"))
    final = next(r for r in records if r.get("final"))
    print(f"# train: one R-GAT epoch on {args.parts} ranks in {epoch['epoch_time_s']:.1f} s ({epoch['steps']} steps "
          f"a rank, loss {epoch['loss']:.3f}), job {wall:.1f} s, peak per rank "
          f"{', '.join(f'{p:.2f}' for p in peaks)} GiB", flush=True)
    return {"epoch_time_s": round(epoch["epoch_time_s"], 1), "steps_per_rank": epoch["steps"],
            "loss": round(epoch["loss"], 4), "job_s": round(wall, 1), "peak_GiB_per_rank": peaks,
            "peak_rss_MiB_reported": final.get("peak_rss_MiB"), "flags": " ".join(TRAIN_FLAGS)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5_000_000)
    parser.add_argument("--edges", type=int, default=100_000_000, help="before reverses")
    parser.add_argument("--parts", type=int, default=4)
    parser.add_argument("--ranks", type=int, default=4, help="ranks of the spread route")
    parser.add_argument("--feat-dim", type=int, default=128)
    parser.add_argument("--routes", default="serial,spread", help="serial, spread or both (comma-separated)")
    parser.add_argument("--train", action="store_true", help="train one R-GAT epoch on the spread route's dataset")
    parser.add_argument("--keep", action="store_true", help="keep the datasets (bench/work/hetero_parts_*)")
    parser.add_argument("--train-only", action="store_true",
                        help="train the epoch on the spread dataset a run with --keep left, drawing nothing")
    parser.add_argument("--json", help="append this run's record here instead of bench/results/<script>.json")
    args = parser.parse_args()
    routes = [r.strip() for r in args.routes.split(",") if r.strip()]
    if not set(routes) <= {"serial", "spread"} or (args.train and "spread" not in routes):
        parser.error("--routes takes serial and spread; --train needs the spread route")
    common.print_header("drawing and partitioning an IGBH-schema typed graph")
    os.makedirs(common.WORK, exist_ok=True)
    figures, summary = {}, {}
    dirs = {route: os.path.join(common.WORK, f"hetero_parts_{route}") for route in ("serial", "spread")}
    if args.train_only:
        kept = dirs["spread"]
        if not os.path.exists(os.path.join(kept, "meta.json")):
            parser.error(f"--train-only trains the dataset a run with --keep left in {kept}: there is none")
        with open(os.path.join(kept, "meta.json")) as fh:
            meta = json.load(fh)
        args.parts = meta["num_parts"]
        common.record(figures={"train": train_epoch(args, kept)}, path=args.json,
                      title="one R-GAT epoch on the kept IGBH-schema dataset of the spread route",
                      graph={"nodes": meta["num_nodes"], "edges_with_reverses": meta["num_edges"],
                             "parts": meta["num_parts"]})
        return
    # the spread route first: the serial one's peak stays with this process
    if "spread" in routes:
        shutil.rmtree(dirs["spread"], ignore_errors=True)
        figures["spread"] = spread_route(args, dirs["spread"])
        if args.train:
            try:
                figures["train"] = train_epoch(args, dirs["spread"])
            except RuntimeError as exc:  # the partitioning's figures are still recorded
                figures["train"] = {"error": str(exc)}
                args.keep = True  # for a rerun of the training alone
        if not args.keep:
            shutil.rmtree(dirs["spread"], ignore_errors=True)
    if "serial" in routes:
        shutil.rmtree(dirs["serial"], ignore_errors=True)
        summary, figures["serial"] = serial_route(args, dirs["serial"])
        if not args.keep:
            shutil.rmtree(dirs["serial"], ignore_errors=True)
    common.record(figures=figures, path=args.json,
                  title="drawing and partitioning an IGBH-schema typed graph: one process (METIS) beside K ranks "
                  "(multilevel, the graph spread over them), seconds and peak resident memory; one R-GAT epoch "
                  "on the spread dataset",
                  graph={"nodes": args.nodes, "edges_before_reverses": args.edges, "feat_dim": args.feat_dim,
                         "parts": args.parts, **summary})


if __name__ == "__main__":
    main()
