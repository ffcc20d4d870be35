"""Time and peak memory of drawing an IGBH-schema typed graph and partitioning it.

One process does what ``hpcgnn generate hetero --parts P`` does on one rank: draw the graph
(:func:`hpcgnn.prep.generate_hetero.hetero_graph`, reverses included) and partition it with
METIS into a dataset (:func:`hpcgnn.prep.partition.partition_graph`). Printed and recorded:
the seconds of each stage and the process's peak resident memory (``getrusage``) after each,
with the dataset's size on disk.

    python bench/hetero_generate.py                                   # 5M nodes, 100M edges, 4 parts
    python bench/hetero_generate.py --nodes 200000 --edges 2000000    # a quick trial
"""
import argparse
import os
import resource
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def peak_gib():
    """This process's peak resident memory so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5_000_000)
    parser.add_argument("--edges", type=int, default=100_000_000, help="before reverses")
    parser.add_argument("--parts", type=int, default=4)
    parser.add_argument("--feat-dim", type=int, default=128)
    parser.add_argument("--method", default="metis", choices=("metis", "random"))
    parser.add_argument("--keep", action="store_true", help="keep the dataset (bench/work/hetero_parts)")
    parser.add_argument("--json", help="append this run's record here instead of bench/results/<script>.json")
    args = parser.parse_args()
    common.print_header("drawing and partitioning an IGBH-schema typed graph")
    from hpcgnn.prep.generate_hetero import hetero_graph, hetero_summary
    from hpcgnn.prep.partition import partition_graph

    out_dir = os.path.join(common.WORK, "hetero_parts")
    shutil.rmtree(out_dir, ignore_errors=True)
    started = time.perf_counter()
    graph = hetero_graph(args.nodes, args.edges, feat_dim=args.feat_dim, seed=0)
    draw_s, draw_peak = time.perf_counter() - started, peak_gib()
    summary = hetero_summary(graph)
    print(f"# drew {graph.num_nodes:,} nodes, {graph.num_edges:,} edges with reverses in {draw_s:.1f} s, "
          f"peak {draw_peak:.2f} GiB", flush=True)
    started = time.perf_counter()
    meta = partition_graph(graph, out_dir, args.parts, args.method, seed=0, release_input=True)
    partition_s, total_peak = time.perf_counter() - started, peak_gib()
    disk_gib = common.du_bytes(out_dir) / 2**30
    print(f"# partitioned into {args.parts} parts in {partition_s:.1f} s, edge cut "
          f"{100 * meta['partitioner']['edge_cut_fraction']:.2f}%, peak {total_peak:.2f} GiB, "
          f"{disk_gib:.2f} GiB on disk")
    figures = {"draw_s": round(draw_s, 1), "draw_peak_GiB": round(draw_peak, 2),
               "partition_s": round(partition_s, 1), "peak_GiB": round(total_peak, 2),
               "edge_cut": round(meta["partitioner"]["edge_cut_fraction"], 4), "disk_GiB": round(disk_gib, 2)}
    common.record(figures=figures, path=args.json, title="drawing and partitioning an IGBH-schema typed graph "
                  "(one process): seconds and peak resident memory",
                  graph={"nodes": args.nodes, "edges_before_reverses": args.edges, "feat_dim": args.feat_dim,
                         "parts": args.parts, "method": args.method, "nodes_by_type": summary["nodes"],
                         "edges_by_relation": summary["edges"], "cites_homophily": summary["cites_homophily"]})
    if not args.keep:
        shutil.rmtree(out_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
