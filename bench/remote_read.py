"""Remote reads across 2 emulated machines while the owner is idle or busy computing.

Rank 0 times reads of rank 1's rows; rank 1 either waits inside MPI (idle) or runs a
training-like loop (matmuls and Python, entering MPI once every few milliseconds). It prints
the median milliseconds of: a feature gather of 30k node-local rows plus N remote rows (as a
batch of the small graph needs), the same with a remote-row cache holding every remote row or
all but 1% of them, and the neighbour sampling of one batch (fanouts 10,25, 1000 seeds) on the
small RMAT graph. Needs root (network namespaces).

    python bench/remote_read.py                       # progress thread every 0.5 ms (default)
    python bench/remote_read.py --progress-ms 0       # without it
"""
import argparse
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from network import NETNS  # noqa: E402
from train import GRAPHS  # noqa: E402

REPEATS = 20


def owner_loop(comm):
    """Rank 1: compute like a training step until rank 0 says stop (or just wait in MPI)."""
    import torch

    weight, x = torch.randn(256, 256), torch.randn(2000, 256)
    while not comm.Iprobe(source=0):
        for _ in range(5):
            (x @ weight).relu_()
            [float(v) for v in range(200)]  # Python work that holds the GIL
    comm.recv(source=0)


def timed_ms(fn, inputs):
    times = []
    for item in inputs:
        t0 = time.perf_counter()
        fn(item)
        times.append(time.perf_counter() - t0)
        time.sleep(0.005)
    return float(np.median(times)) * 1e3


def reader(graph, tensor, caches, sampler, seeds, rng):
    """Rank 0: every measurement, as (name, milliseconds)."""
    results = []
    starts = tensor.book.starts
    remote_pool = np.arange(starts[1], starts[2])
    for remote in (100, 5000, 20000):
        batches = [np.concatenate([rng.choice(starts[1], 30000, replace=False),
                                   rng.choice(remote_pool, remote, replace=False)]) for _ in range(REPEATS)]
        results.append((f"gather 30k local + {remote} remote rows", timed_ms(tensor.gather, batches)))
    batches = [np.concatenate([rng.choice(starts[1], 30000, replace=False),
                               rng.choice(caches["pool"], 5000, replace=False)]) for _ in range(REPEATS)]
    for name in ("no cache", "cache 99% of them", "cache all of them"):
        cache = caches[name]
        fn = tensor.gather if cache is None else cache.gather
        results.append((f"gather 30k local + 5000 remote rows, {name}", timed_ms(fn, batches)))
    batches = [np.sort(rng.choice(seeds, 1000, replace=False)) for _ in range(REPEATS)]
    results.append(("sample one batch (fanouts 10,25, 1000 seeds)",
                    timed_ms(lambda b: sampler.sample(graph, b, seed=int(b[0])), batches)))
    return results


def child(args):
    from hpcgnn import DistGraph, NeighborSampler, node_split
    from hpcgnn.loading.cache import RemoteRowCache
    from hpcgnn.runtime.abort import install_abort_hook
    from hpcgnn.runtime.comm import world

    install_abort_hook()  # an error on one rank ends the job instead of leaving the others waiting

    comm = world()
    graph = DistGraph(args.parts, comm, progress_interval=args.progress_ms / 1000)
    tensor = graph.ndata["feat"]
    rng = np.random.default_rng(0)
    starts = tensor.book.starts
    pool = np.sort(rng.choice(np.arange(starts[1], starts[2]), 20000, replace=False))
    mine = comm.rank == 0
    caches = {"pool": pool, "no cache": None,
              "cache 99% of them": RemoteRowCache(tensor, pool[:-200] if mine else []),
              "cache all of them": RemoteRowCache(tensor, pool if mine else [])}
    sampler = NeighborSampler([10, 25])
    seeds = node_split("train_mask", graph)  # collective: before the ranks part ways
    for owner in ("idle", "busy"):
        comm.Barrier()
        if comm.rank == 0:
            for name, ms in reader(graph, tensor, caches, sampler, seeds, rng):
                print(f"| {name} | {owner} | {ms:.2f} |", flush=True)
            comm.send(1, dest=1)
        elif owner == "busy":
            owner_loop(comm)
        else:
            comm.recv(source=0)
    comm.Barrier()
    graph.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--progress-ms", type=float, default=0.5)
    parser.add_argument("--parts", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.parts:
        return child(args)
    if os.geteuid() != 0:
        sys.exit("bench/remote_read.py needs root (network namespaces)")
    parts = common.ensure_parts(common.ensure_graph(*GRAPHS["small"]), 2, "train_small")
    common.print_header(f"remote reads across 2 emulated machines, progress thread every {args.progress_ms} ms")
    print("| what (rank 0 reads rank 1's rows) | owner | median ms |\n|---|---|---|", flush=True)
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    done = subprocess.run(["bash", NETNS, "2", "-n", "2", sys.executable, os.path.abspath(__file__), "--parts", parts,
                           "--progress-ms", str(args.progress_ms)], check=True, stdout=subprocess.PIPE, text=True,
                          env=dict(os.environ, MPIEXEC=mpiexec, OMP_NUM_THREADS="1"))
    print(done.stdout, end="", flush=True)
    rows = {}
    for line in done.stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 3 and cells[1] in ("idle", "busy"):
            rows.setdefault(cells[0], {"what": cells[0]})[f"owner {cells[1]} ms"] = float(cells[2])
    common.record(list(rows.values()), title="Single remote reads, owner idle or busy (median ms)",
                  progress_ms=args.progress_ms)


if __name__ == "__main__":
    main()
