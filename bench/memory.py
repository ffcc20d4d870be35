"""Memory per rank of DistGraph on the 1M-node RMAT graph (46.5M edges after symmetrizing),
against DGL 2.1's DistGraph in standalone mode (one process acting as server and trainer) on
the same graph.

    python bench/memory.py            # hpcgnn with 1 and 2 ranks
    python bench/memory.py --dgl      # + DGL standalone (needs its virtualenv, see bench/partition.py)
    python bench/memory.py --feat-dtypes float32,bfloat16   # features stored in 4 and 2 bytes

Reported per process: peak RSS (VmHWM), RSS and PSS (proportional set size: a page shared by
k processes counts 1/k, so PSS adds up to the machine's real use when ranks share memory).
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from dgl_standalone_memory import memory  # noqa: E402


def worker(path):
    from hpcgnn import DistGraph
    from hpcgnn.runtime.abort import install_abort_hook
    from hpcgnn.runtime.comm import world

    install_abort_hook()  # an error on one rank ends the job instead of leaving the others waiting

    comm = world()
    with DistGraph(path, comm) as graph:
        ids = np.random.default_rng(comm.rank).integers(0, graph.num_nodes, 100_000)
        feat = graph.ndata["feat"].gather(ids)
        offsets, _, _ = graph.in_edges(ids[:1000])
        report = comm.gather({"rank": comm.rank, "feat_rows": feat.shape[0], "edges_read": int(offsets[-1]),
                              "MiB": memory()}, root=0)
        if comm.rank == 0:
            print("RESULT " + json.dumps(report), flush=True)



def ensure_dgl_parts(python, graph):
    out = os.path.join(common.WORK, "mem_parts_dgl_1")
    if not os.path.exists(os.path.join(out, "g.json")):
        subprocess.run([python, "bench_partition.py", "--graph", graph, "--method", "metis", "--parts", "1",
                        "--out", out, "--name", "g"], cwd=common.ANCHOR, check=True,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    return os.path.join(out, "g.json")


def result_of(stdout):
    return json.loads(next(x for x in stdout.splitlines() if x.startswith("RESULT "))[7:])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker")
    parser.add_argument("--ranks", default="1,2")
    parser.add_argument("--dgl", action="store_true")
    parser.add_argument("--feat-dtypes", default="float32", help="partition --feat-dtype of each row set")
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker)
    common.print_header("DistGraph memory benchmark")
    graph = common.ensure_graph(1_000_000, 25_000_000, 100, 20)
    print("| system | features | processes | per process: peak RSS MiB | RSS MiB | PSS MiB |\n"
          "|---|---|---|---|---|---|")
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    rows = []
    for ranks in [int(r) for r in args.ranks.split(",")]:
        for feat_dtype in args.feat_dtypes.split(","):
            tag = "mem_parts" if feat_dtype == "float32" else f"mem_parts_{feat_dtype}"
            path = common.ensure_parts(graph, ranks, tag, "--feat-dtype", feat_dtype)
            for route in ("shm", "rma"):
                _, _, out = common.timed([mpiexec, "-n", str(ranks), sys.executable, os.path.abspath(__file__),
                                          "--worker", path], env={"HPCGNN_FORCE_RMA": "1" if route == "rma" else "0"})
                mem = [r["MiB"] for r in result_of(out)]
                cells = [" / ".join(f"{m[key]:.0f}" for m in mem) for key in ("VmHWM", "VmRSS", "Pss")]
                print(f"| hpcgnn DistGraph ({route}) | {feat_dtype} | {ranks} rank(s) | " + " | ".join(cells) + " |",
                      flush=True)
                rows.append({"system": f"hpcgnn DistGraph ({route})", "features": feat_dtype, "processes": ranks,
                             "peak RSS MiB per process": [m["VmHWM"] for m in mem],
                             "RSS MiB": [m["VmRSS"] for m in mem], "PSS MiB": [m["Pss"] for m in mem]})
                if ranks == 1:
                    break
    if args.dgl:
        python = common.dgl_python()
        if python is None:
            sys.exit("DGL virtualenv not found (see bench/partition.py --dgl-setup)")
        config = ensure_dgl_parts(python, graph)
        _, _, out = common.timed([python, os.path.join(common.ROOT, "bench", "dgl_standalone_memory.py"),
                                  "--part-config", config, "--name", "g"])
        mem = result_of(out)["MiB"]
        print(f"| DGL 2.1 DistGraph, standalone | float32 | 1 process | {mem['VmHWM']:.0f} | {mem['VmRSS']:.0f} "
              f"| {mem['Pss']:.0f} |", flush=True)
        rows.append({"system": "DGL 2.1 DistGraph, standalone", "features": "float32", "processes": 1,
                     "peak RSS MiB per process": mem["VmHWM"], "RSS MiB": mem["VmRSS"], "PSS MiB": mem["Pss"]})
    common.record(rows, title="Memory of a loaded partition, 1M nodes, 46.5M edges")


if __name__ == "__main__":
    main()
