"""Cost of the part files' per-chunk fletcher32 checksums: partition write time and the time
for a rank to load its part, with and without checksums, on the same generated graph.

The graph is read and symmetrized once; each repeat then partitions it twice in this process
(``partition_graph(..., checksums=True/False)``, the two in alternating order) and times
``DistGraph`` loading each dataset under ``mpiexec -n PARTS`` (every rank loads its part at
once; a load's time is the slowest rank's), then each rank reading its part again with
``ondisk.read_part`` (the HDF5 reads alone, without the windows). ``write`` is the partitioner's own ``write_s``:
building each part's arrays, writing the HDF5 file and hashing it (SHA-256). Part files are
read from the page cache (they were just written), so the load figures are the CPU cost of
the checksums, the most they can add; from a cold disk the I/O time adds to both columns.

    python bench/checksum.py                                  # 1M nodes / 25M edges, 2 parts, 3 repeats
    python bench/checksum.py --nodes 100000 --edges 2000000 --feat-dim 64 --classes 10 --reps 5
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

VARIANTS = (("off", False), ("on", True))


def worker(path):
    """Every rank loads its part of ``path``; rank 0 prints each rank's seconds."""
    from hpcgnn import DistGraph
    from hpcgnn.format import ondisk
    from hpcgnn.runtime.abort import install_abort_hook
    from hpcgnn.runtime.comm import world

    install_abort_hook()  # an error on one rank ends the job instead of leaving the others waiting

    comm = world()
    comm.Barrier()
    t0 = time.perf_counter()
    graph = DistGraph(path, comm)
    load = time.perf_counter() - t0
    graph.close()
    comm.Barrier()
    t0 = time.perf_counter()
    ondisk.read_part(path, ondisk.read_meta(path), comm.rank)
    read = time.perf_counter() - t0
    times = comm.gather((load, read), root=0)
    if comm.rank == 0:
        print("RESULT " + json.dumps(times), flush=True)


def load_seconds(path, ranks):
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    _, _, out = common.timed([mpiexec, "-n", str(ranks), sys.executable, os.path.abspath(__file__),
                              "--worker", path])
    times = json.loads(next(x for x in out.splitlines() if x.startswith("RESULT "))[7:])
    return max(t[0] for t in times), max(t[1] for t in times)


def partition_once(graph, out, parts, method, checksums):
    from hpcgnn.prep.partition import partition_graph

    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    meta = partition_graph(graph, out, parts, method, checksums=checksums)
    return {"partition_s": time.perf_counter() - t0, "write_s": meta["partitioner"]["write_s"],
            "disk_MiB": common.du_bytes(out) / 2**20}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker")
    parser.add_argument("--nodes", type=int, default=1_000_000)
    parser.add_argument("--edges", type=int, default=25_000_000)
    parser.add_argument("--feat-dim", type=int, default=100)
    parser.add_argument("--classes", type=int, default=20)
    parser.add_argument("--parts", type=int, default=2)
    parser.add_argument("--method", default="random", help="part assignment (does not change what is written)")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker)

    from hpcgnn.prep.read import read_graph
    from hpcgnn.prep.transform import prepare

    common.print_header("part-file checksum benchmark")
    path = common.ensure_graph(args.nodes, args.edges, args.feat_dim, args.classes)
    graph = prepare(read_graph(path), symmetrize_edges=True)
    print(f"# graph: {graph.num_nodes:,} nodes, {graph.num_edges:,} edges after symmetrizing, "
          f"{args.feat_dim} float32 features; {args.parts} parts ({args.method}), {args.reps} repeats", flush=True)
    rows = {name: [] for name, _ in VARIANTS}
    for rep in range(args.reps):
        order = VARIANTS if rep % 2 == 0 else VARIANTS[::-1]
        for name, checksums in order:
            out = os.path.join(common.WORK, f"checksum_{name}_{args.parts}")
            row = partition_once(graph, out, args.parts, args.method, checksums)
            row["load_s"], row["read_s"] = load_seconds(out, args.parts)
            rows[name].append(row)
            print(f"# rep {rep} checksums {name}: " + json.dumps({k: round(v, 3) for k, v in row.items()}), flush=True)
            shutil.rmtree(out, ignore_errors=True)

    def median(name, key):
        return statistics.median(r[key] for r in rows[name])

    print("\n| medians | checksums off | checksums on | on / off |\n|---|---|---|---|")
    table = []
    for key, label in (("write_s", "partition write s"), ("partition_s", "partition total s"),
                       ("load_s", "DistGraph load of a part (slowest rank) s"),
                       ("read_s", "HDF5 read of a part alone (slowest rank) s"), ("disk_MiB", "on disk MiB")):
        off, on = median("off", key), median("on", key)
        print(f"| {label} | {off:.2f} | {on:.2f} | {on / off:.2f} |", flush=True)
        table.append({f"median of {args.reps}": label, "checksums off": off, "checksums on": on, "on / off": on / off})
    common.record(table, title="Per-chunk fletcher32 checksums on and off", repeats=rows)


if __name__ == "__main__":
    main()
