"""Partitioning benchmark: hpcgnn vs DGL 2.1's partition_graph on the same RMAT graph.

For each part count: wall time, peak RSS, edge cut, balance and bytes on disk, of
``hpcgnn partition --symmetrize`` (default hub thinning, and ``--keep-degree 0`` = METIS on
every edge) and, when DGL's virtualenv exists (``--dgl``; ``--dgl-setup`` builds it with
../shared/anchor_dgl/setup.sh), of the anchor's ``bench_partition.py`` (load + to_bidirected +
partition_graph with train-mask and edge balancing), interleaved in one run.

    python bench/partition.py                        # 1M nodes / 25M edges, 2 and 4 parts
    python bench/partition.py --dgl --dgl-setup      # side by side with DGL
    python bench/partition.py --nodes 100000 --edges 2000000 --feat-dim 64 --classes 10
    python bench/partition.py --multilevel-ranks 1,2,4 --no-full   # the distributed pipeline beside it
    python bench/partition.py --kaminpar --no-full    # KaMinPar beside METIS, one balance constraint
    python bench/partition.py --no-full --multilevel-ranks 2 --ldg-ranks 2   # streaming beside multilevel

``--multilevel-ranks`` adds ``mpiexec -n R hpcgnn partition --method multilevel`` rows: every rank
reads a slice, symmetrizes and partitions with the graph spread over the ranks; its peak RSS is
the largest rank's, and its cut is set beside the serial METIS row of the same part count.
"""
import argparse
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def run_hpcgnn(graph, parts, out, keep_degree, extra=(), tool=None):
    shutil.rmtree(out, ignore_errors=True)
    wall, rss, _ = common.timed(common.hpcgnn_cmd(
        "partition", graph, "--parts", str(parts), "--symmetrize", "--out", out,
        "--keep-degree", str(keep_degree), *extra))
    row = _row(out, tool or f"hpcgnn keep-degree={keep_degree:g}", parts, wall, rss)
    shutil.rmtree(out, ignore_errors=True)
    return row


def run_multilevel(graph, parts, out, ranks, method="multilevel"):
    shutil.rmtree(out, ignore_errors=True)
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    wall, rss, _ = common.timed([mpiexec, "-n", str(ranks), *common.hpcgnn_cmd(
        "partition", graph, "--parts", str(parts), "--symmetrize", "--out", out, "--method", method)])
    row = _row(out, f"hpcgnn {method}, {ranks} rank{'s' if ranks > 1 else ''}", parts, wall, rss)
    shutil.rmtree(out, ignore_errors=True)
    return row


def _row(out, tool, parts, wall, rss):
    with open(os.path.join(out, "meta.json")) as fh:
        meta = json.load(fh)
    p, src = meta["partitioner"], meta["source"]
    return {"tool": tool, "parts": parts, "process_wall_s": wall,
            "load_s": src["read_s"] + src["prepare_s"], "partition_s": p["assign_s"] + p["write_s"],
            "peak_rss_GiB": rss / 1024, "edges": meta["num_edges"], "cut_pct": 100 * p["edge_cut_fraction"],
            "imb_nodes": p["imbalance"]["num_nodes"], "imb_edges": p["imbalance"]["num_edges"],
            "imb_train": p["imbalance"]["train"], "disk_MiB": common.du_bytes(out) / 2**20,
            "levels": "/".join(str(n) for n in p.get("levels", []))}


def run_dgl(python, graph, parts, out):
    shutil.rmtree(out, ignore_errors=True)
    result = out + ".json"
    wall, rss, _ = common.timed([python, "bench_partition.py", "--graph", graph, "--method", "metis",
                                 "--parts", str(parts), "--out", out, "--name", "g", "--json", result],
                                cwd=common.ANCHOR)
    with open(result) as fh:
        res = json.load(fh)
    imb = res["imbalance_max_over_mean"]
    row = {"tool": "DGL 2.1 partition_graph", "parts": parts, "process_wall_s": wall, "load_s": res["load_s"],
           "partition_s": res["partition_wall_s"], "peak_rss_GiB": rss / 1024, "edges": res["edges"],
           "cut_pct": 100 * res["edge_cut_frac"], "imb_nodes": imb["owned_nodes"],
           "imb_edges": imb["owned_edges"], "imb_train": imb["train_nodes"], "disk_MiB": res["disk_bytes"] / 2**20}
    shutil.rmtree(out, ignore_errors=True)
    return row


COLUMNS = ["tool", "parts", "process_wall_s", "load_s", "partition_s", "peak_rss_GiB", "edges", "cut_pct",
           "imb_nodes", "imb_edges", "imb_train", "disk_MiB"]


def show(row):
    cells = [f"{row[c]:.3f}" if isinstance(row[c], float) and c.startswith("imb") else
             f"{row[c]:.2f}" if isinstance(row[c], float) else str(row[c]) for c in COLUMNS]
    print("| " + " | ".join(cells) + " |", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1_000_000)
    parser.add_argument("--edges", type=int, default=25_000_000)
    parser.add_argument("--feat-dim", type=int, default=100)
    parser.add_argument("--classes", type=int, default=20)
    parser.add_argument("--parts", default="2,4")
    parser.add_argument("--no-full", action="store_true", help="skip the --keep-degree 0 rows")
    parser.add_argument("--dgl", action="store_true", help="also run DGL 2.1 (needs its virtualenv)")
    parser.add_argument("--dgl-setup", action="store_true", help="build DGL's virtualenv if missing")
    parser.add_argument("--multilevel-ranks", default="",
                        help="also run --method multilevel under mpiexec with each of these rank counts")
    parser.add_argument("--ldg-ranks", default="",
                        help="also run --method ldg (streaming) on these rank counts, e.g. 2")
    parser.add_argument("--kaminpar", action="store_true",
                        help="add --method kaminpar beside METIS, both balancing node counts only")
    parser.add_argument("--json", help="append this run's record here instead of bench/results/<script>.json")
    args = parser.parse_args()

    common.print_header("partition benchmark")
    graph = common.ensure_graph(args.nodes, args.edges, args.feat_dim, args.classes)
    dgl = common.dgl_python(args.dgl_setup) if args.dgl else None
    if args.dgl and dgl is None:
        sys.exit("DGL virtualenv not found: pass --dgl-setup or set DGLENV")
    print(f"# graph: {os.path.basename(graph)} (RMAT with communities, symmetrized by each tool)")
    print("| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS))
    rows = []
    for parts in [int(p) for p in args.parts.split(",")]:
        out = os.path.join(common.WORK, f"parts_{parts}")
        rows.append(run_hpcgnn(graph, parts, out, 16))
        show(rows[-1])
        if dgl:
            rows.append(run_dgl(dgl, graph, parts, out + "_dgl"))
            show(rows[-1])
            ours, theirs = rows[-2], rows[-1]
            ratio = {k: ours[k] / theirs[k] for k in ("process_wall_s", "partition_s", "peak_rss_GiB")}
            print(f"# ratios hpcgnn/DGL at {parts} parts: process wall {ratio['process_wall_s']:.2f}, "
                  f"partition {ratio['partition_s']:.2f}, peak RSS {ratio['peak_rss_GiB']:.2f}, "
                  f"disk {ours['disk_MiB'] / theirs['disk_MiB']:.2f}, cut {ours['cut_pct'] / theirs['cut_pct']:.3f}",
                  flush=True)
        if not args.no_full:
            rows.append(run_hpcgnn(graph, parts, out, 0))
            show(rows[-1])
        if args.kaminpar:
            rows.append(run_hpcgnn(graph, parts, out, 16, ("--balance", "nodes"), "hpcgnn metis, balance nodes"))
            show(rows[-1])
            rows.append(run_hpcgnn(graph, parts, out, 16, ("--method", "kaminpar"), "hpcgnn kaminpar, balance nodes"))
            show(rows[-1])
            metis, kaminpar = rows[-2], rows[-1]
            print(f"# kaminpar / metis (both balancing nodes) at {parts} parts: cut "
                  f"{kaminpar['cut_pct'] / metis['cut_pct']:.3f}, partition "
                  f"{kaminpar['partition_s'] / metis['partition_s']:.2f}, peak RSS "
                  f"{kaminpar['peak_rss_GiB'] / metis['peak_rss_GiB']:.2f}", flush=True)
        serial = next(r for r in rows if r["tool"] == "hpcgnn keep-degree=16" and r["parts"] == parts)
        spread_runs = [("multilevel", int(r)) for r in args.multilevel_ranks.split(",") if r]
        spread_runs += [("ldg", int(r)) for r in args.ldg_ranks.split(",") if r]
        for method, ranks in spread_runs:
            rows.append(run_multilevel(graph, parts, out, ranks, method))
            show(rows[-1])
            print(f"# {method} on {ranks} rank(s) / serial METIS at {parts} parts: cut "
                  f"{rows[-1]['cut_pct'] / serial['cut_pct']:.3f}, process wall "
                  f"{rows[-1]['process_wall_s'] / serial['process_wall_s']:.2f}, largest rank's peak RSS "
                  f"{rows[-1]['peak_rss_GiB'] / serial['peak_rss_GiB']:.2f}; levels {rows[-1]['levels']}", flush=True)
    common.record(rows, path=args.json, title="Partitioning: time, memory, cut and balance",
                  graph=os.path.basename(graph))


if __name__ == "__main__":
    main()
