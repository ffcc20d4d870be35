"""Feature-gather benchmark: random rows of a 1M-row float32 table spread over P ranks.

Routes, side by side in one run:
  (a) numpy  : ``np.take`` from local memory in one process alone (the physical limit here),
               and (a') on every rank at once from its own shard (the limit when all ranks
               gather concurrently and share the memory bus, as they do in (b)-(d))
  (b) shm    : DistTensor, ranks on one node read each other's shards in shared memory
  (c) rma    : DistTensor with HPCGNN_FORCE_RMA=1: passive-target Rget, as between nodes
  (d) a2av   : the same gather written with Alltoallv (request ids to owners, rows back),
               the collective approach of SAR/CAGNET
Every rank gathers its own random ids concurrently; a gather's time is the slowest rank's.

    python bench/gather.py                     # 2 and 4 ranks, 100 and 600 columns
    python bench/gather.py --ranks 2 --cols 100 --rows 1000000
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

BATCHES = (1_000, 10_000, 100_000)


def repeats_for(batch):
    return max(5, 2_000_000 // batch)


def time_gathers(fn, batch, num_rows, seed):
    rng = np.random.default_rng(seed)
    ids = [rng.integers(0, num_rows, batch) for _ in range(repeats_for(batch))]
    fn(ids[0])  # warm-up: first touch of pages and datatypes
    t0 = time.perf_counter()
    for gids in ids:
        fn(gids)
    return (time.perf_counter() - t0) / len(ids)


def numpy_rows(num_rows, cols):
    results = {}
    table = np.random.default_rng(0).standard_normal((num_rows, cols), dtype=np.float32)
    out = {b: np.empty((b, cols), dtype=np.float32) for b in BATCHES}
    for batch in BATCHES:
        results[batch] = time_gathers(lambda g: np.take(table, g, axis=0, out=out[len(g)]), batch, num_rows, 0)
    return results


def alltoallv_gather(comm, book, local, gids, MPI):
    """Rows ``gids`` by two Alltoallv exchanges (ids out, rows back), in request order."""
    owners = book.owner(gids)
    order = np.argsort(owners, kind="stable")
    send_counts = np.bincount(owners, minlength=comm.size).astype(np.int64)
    recv_counts = np.empty_like(send_counts)
    comm.Alltoall(send_counts, recv_counts)
    displs = lambda c: np.concatenate([[0], np.cumsum(c)[:-1]])  # noqa: E731
    wanted = np.empty(int(recv_counts.sum()), dtype=np.int64)
    comm.Alltoallv([gids[order], (send_counts, displs(send_counts)), MPI.INT64_T],
                   [wanted, (recv_counts, displs(recv_counts)), MPI.INT64_T])
    rows = np.take(local, wanted - book.starts[comm.rank], axis=0)
    cols = local.shape[1]
    got = np.empty((gids.shape[0], cols), dtype=local.dtype)
    comm.Alltoallv([rows, (recv_counts * cols, displs(recv_counts) * cols), MPI.FLOAT],
                   [got, (send_counts * cols, displs(send_counts) * cols), MPI.FLOAT])
    out = np.empty_like(got)
    out[order] = got
    return out


def worker(args):
    from hpcgnn.runtime.abort import install_abort_hook
    from hpcgnn.runtime.comm import mpi, world
    from hpcgnn.store.dist_tensor import DistTensor

    MPI = mpi()
    install_abort_hook()  # an error on one rank ends the job instead of leaving the others waiting
    comm = world()
    num_rows, cols = args.rows, args.cols

    def fill(out):  # row g holds g in column 0 so the check below is exact
        out[:] = 1.0
        out[:, 0] = np.arange(*tensor_range)

    bounds = np.arange(comm.size + 1) * num_rows // comm.size
    tensor_range = (int(bounds[comm.rank]), int(bounds[comm.rank + 1]))
    from hpcgnn.store.partition_book import PartitionBook

    book = PartitionBook(bounds)
    tensor = DistTensor((num_rows, cols), np.float32, "bench", comm=comm, book=book, local_data=fill)
    probe = np.random.default_rng(99).integers(0, num_rows, 1000)
    assert np.array_equal(tensor.gather(probe)[:, 0], probe.astype(np.float32))
    assert np.array_equal(alltoallv_gather(comm, book, tensor.local, probe, MPI)[:, 0], probe.astype(np.float32))
    results = {}
    local_rows = tensor_range[1] - tensor_range[0]
    for method in ("local", "dist", "a2av"):
        for batch in BATCHES:
            outs = np.empty((batch, cols), dtype=np.float32)
            fn = {"local": lambda g, outs=outs: np.take(tensor.local, g % local_rows, axis=0, out=outs),
                  "dist": lambda g, outs=outs: tensor.gather(g, outs),
                  "a2av": lambda g: alltoallv_gather(comm, book, tensor.local, g, MPI)}[method]
            comm.Barrier()
            seconds = time_gathers(fn, batch, num_rows, 1000 + comm.rank)
            results[f"{method}:{batch}"] = comm.allreduce(seconds, op=MPI.MAX)
    rss = comm.gather(common_rss_mib(), root=0)
    tensor.close()
    if comm.rank == 0:
        print("RESULT " + json.dumps({"times": results, "rss_MiB": rss}), flush=True)


def common_rss_mib():
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    return float("nan")


def run_workers(ranks, rows, cols, force_rma):
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    env = dict(os.environ, OMP_NUM_THREADS="1", HPCGNN_FORCE_RMA="1" if force_rma else "0")
    proc = subprocess.run([mpiexec, "-n", str(ranks), sys.executable, os.path.abspath(__file__), "--worker",
                           "--rows", str(rows), "--cols", str(cols)], env=env, text=True, capture_output=True)
    if proc.returncode:
        sys.exit(proc.stdout[-3000:] + proc.stderr[-3000:])
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--cols", default="100,600")
    parser.add_argument("--ranks", default="2,4")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", help="append this run's record here instead of bench/results/<script>.json")
    args = parser.parse_args()
    if args.worker:
        args.cols = int(args.cols)
        return worker(args)

    common.print_header("gather benchmark")
    print("| cols | ranks | rows/gather | (a) numpy alone GB/s | (a') numpy, all ranks GB/s | (b) shm GB/s "
          "| (c) rma GB/s | (d) alltoallv GB/s | (b)/(a) | (b)/(a') | (c)/(d) | (c) Mrows/s |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|")
    report = []
    for cols in [int(c) for c in args.cols.split(",")]:
        base = numpy_rows(args.rows, cols)
        for ranks in [int(r) for r in args.ranks.split(",")]:
            shm = run_workers(ranks, args.rows, cols, False)
            rma = run_workers(ranks, args.rows, cols, True)
            for batch in BATCHES:
                gbs = lambda s, nbytes=batch * cols * 4: nbytes / s / 1e9  # noqa: E731
                row = {"cols": cols, "ranks": ranks, "batch": batch, "numpy": gbs(base[batch]),
                       "numpy_all": gbs(shm["times"][f"local:{batch}"]),
                       "shm": gbs(shm["times"][f"dist:{batch}"]), "rma": gbs(rma["times"][f"dist:{batch}"]),
                       "a2av": gbs(shm["times"][f"a2av:{batch}"]),
                       "rma_rows_per_s": batch / rma["times"][f"dist:{batch}"],
                       "rss_MiB_shm": shm["rss_MiB"], "rss_MiB_rma": rma["rss_MiB"]}
                report.append(row)
                print(f"| {cols} | {ranks} | {batch:,} | {row['numpy']:.2f} | {row['numpy_all']:.2f} "
                      f"| {row['shm']:.2f} | {row['rma']:.2f} | {row['a2av']:.2f} | {row['shm'] / row['numpy']:.2f} "
                      f"| {row['shm'] / row['numpy_all']:.2f} | {row['rma'] / row['a2av']:.2f} "
                      f"| {row['rma_rows_per_s'] / 1e6:.2f} |", flush=True)
    common.record(report, path=args.json, title="Feature gathers by route")


if __name__ == "__main__":
    main()
