"""Memory of the distributed partitioning pipeline, stage by stage, per input edge.

Each rank traces its numpy allocations (``tracemalloc``) through the stages of ``hpcgnn
partition --method multilevel --symmetrize``: reading its slice of a graph file, the clean-up
(symmetrize + dedup), the finest level of the multilevel scheme, and coarsening + METIS +
refinement. Printed per stage: what is held after it and its peak, in bytes per input edge of
the rank (the largest rank's), and what that peak means for seed 004's graph (125M input
edges, 250M once symmetrized) on this machine's ranks.

    python bench/prep_memory.py                       # RMAT 200k nodes / 5M edges, 2 ranks
    python bench/prep_memory.py --nodes 1000000 --edges 25000000 --ranks 2,4
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

STAGES = ("read", "clean-up", "finest level", "multilevel")
SCALE_INPUT_EDGES = 125_000_000

RANK_SCRIPT = r"""
import json, sys, tracemalloc
from mpi4py import MPI
from hpcgnn.prep.dist.cleanup import prepare
from hpcgnn.prep.dist.ingest import read_h5graph_spread
from hpcgnn.prep.dist.multilevel import multilevel_parts, undirected_level
from hpcgnn.prep.dist.pipeline import balance_columns
from hpcgnn.prep.partition import DEFAULT_BALANCE
comm = MPI.COMM_WORLD
tracemalloc.start()
marks = []
def mark():
    current, peak = tracemalloc.get_traced_memory()
    marks.append((current, peak))
    tracemalloc.reset_peak()
graph = read_h5graph_spread(comm, sys.argv[1])
input_edges = graph.num_edges(comm) / comm.size
mark()
graph = prepare(comm, graph, symmetrize_edges=True)
mark()
weights, _ = balance_columns(comm, graph, DEFAULT_BALANCE)
level = undirected_level(comm, graph.starts, graph.src, graph.dst, weights, True)
mark()
multilevel_parts(comm, level, int(sys.argv[2]))
mark()
every = comm.gather([[c / input_edges, p / input_edges] for c, p in marks], root=0)
if comm.rank == 0:
    print(json.dumps([[max(r[i][j] for r in every) for j in range(2)] for i in range(len(marks))]))
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=200_000)
    parser.add_argument("--edges", type=int, default=5_000_000)
    parser.add_argument("--feat-dim", type=int, default=8)
    parser.add_argument("--ranks", default="2")
    parser.add_argument("--parts", type=int, default=2)
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    common.print_header("distributed partitioning memory per input edge")
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    graph = os.path.join(common.WORK, f"rmat_{args.nodes}_{args.edges}_{args.feat_dim}.h5")
    if not os.path.exists(graph):
        subprocess.run([mpiexec, "-n", "2", *common.hpcgnn_cmd(
            "generate", "rmat", "--nodes", str(args.nodes), "--edges", str(args.edges),
            "--feat-dim", str(args.feat_dim), "--out", graph)], check=True)
    print(f"# graph: {os.path.basename(graph)}, {args.parts} parts; bytes per input edge of a rank "
          f"(largest rank), traced numpy allocations")
    print("| ranks | stage | held after | peak | peak for 125M input edges, all ranks |\n|---|---|---|---|---|")
    rows = []
    for ranks in [int(r) for r in args.ranks.split(",")]:
        out = subprocess.run([mpiexec, "-n", str(ranks), sys.executable, "-c", RANK_SCRIPT, graph, str(args.parts)],
                             check=True, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
        marks = json.loads(out.stdout.strip().splitlines()[-1])
        for stage, (held, peak) in zip(STAGES, marks):
            rows.append({"ranks": ranks, "stage": stage, "held_B_per_edge": held, "peak_B_per_edge": peak})
            print(f"| {ranks} | {stage} | {held:.0f} | {peak:.0f} | {peak * SCALE_INPUT_EDGES / 2**30:.1f} GiB |",
                  flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"machine": common.machine_info(), "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
