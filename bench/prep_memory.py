"""Memory of the distributed partitioning pipeline, stage by stage, per input edge.

Each rank traces its numpy allocations (``tracemalloc``) through ``hpcgnn partition --method
multilevel --symmetrize`` (the pipeline itself, marked at each line it logs): reading its
slice of a graph file, symmetrize + dedup, each coarsening level, METIS, refinement and the
writing. Printed per stage: what is held after it and the peak since the previous mark, in
bytes per input edge of the rank (the largest rank's), and what that peak means for seed
004's graph (125M input edges, 250M once symmetrized) summed over the ranks.

    python bench/prep_memory.py                       # RMAT 200k nodes / 5M edges, 2 ranks
    python bench/prep_memory.py --nodes 1000000 --edges 25000000 --ranks 2,4
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

SCALE_INPUT_EDGES = 125_000_000

RANK_SCRIPT = r"""
import json, sys, tracemalloc
from mpi4py import MPI
from hpcgnn.runtime.abort import install_abort_hook
from hpcgnn.prep.dist.pipeline import partition_distributed
from hpcgnn.prep.partition import DEFAULT_BALANCE, build_parser
install_abort_hook()  # an error on one rank ends the job instead of leaving the others waiting
comm = MPI.COMM_WORLD
args = build_parser().parse_args([sys.argv[1], "--parts", sys.argv[2], "--symmetrize", "--method", "multilevel",
                                  "--out", sys.argv[3], "--force"])
args.balance = DEFAULT_BALANCE
marks = []
def mark(line):
    current, peak = tracemalloc.get_traced_memory()
    marks.append((line.split(" ")[0] if line.startswith("read ") else line.split(":")[0][:40], current, peak))
    tracemalloc.reset_peak()
tracemalloc.start()
partition_distributed(comm, args, sys.argv[3], log=mark)
mark("to the end")
edges = float(sys.argv[4]) / comm.size  # input edges per rank
every = comm.gather(marks, root=0)
if comm.rank == 0:  # a stage only rank 0 logs (the writing) counts in the others' next mark
    rows = {}
    for rank_marks in every:
        for stage, current, peak in rank_marks:
            held, top = rows.get(stage, (0, 0))
            rows[stage] = (max(held, current / edges), max(top, peak / edges))
    print(json.dumps([[stage, *rows[stage]] for stage, _, _ in marks]))
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=200_000)
    parser.add_argument("--edges", type=int, default=5_000_000)
    parser.add_argument("--feat-dim", type=int, default=8)
    parser.add_argument("--ranks", default="2")
    parser.add_argument("--parts", type=int, default=2)
    parser.add_argument("--json", help="append this run's record here instead of bench/results/<script>.json")
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
        out_dir = os.path.join(common.WORK, "prep_memory_parts")
        out = subprocess.run([mpiexec, "-n", str(ranks), sys.executable, "-c", RANK_SCRIPT, graph, str(args.parts),
                              out_dir, str(args.edges)],
                             check=True, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
        for stage, held, peak in json.loads(out.stdout.strip().splitlines()[-1]):
            rows.append({"ranks": ranks, "stage": stage, "held_B_per_edge": held, "peak_B_per_edge": peak})
            print(f"| {ranks} | {stage} | {held:.0f} | {peak:.0f} | {peak * SCALE_INPUT_EDGES / 2**30:.1f} GiB |",
                  flush=True)
        shutil.rmtree(out_dir, ignore_errors=True)
    common.record(rows, path=args.json, title="Peak bytes per input edge of a rank, per stage",
                  graph=os.path.basename(graph))


if __name__ == "__main__":
    main()
