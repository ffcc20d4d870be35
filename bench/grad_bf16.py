"""``--grad-compress bf16``'s reduction against the float32 Allreduce and against a user-defined
MPI bfloat16 sum (a Python callback, the previous implementation), side by side in one run.

For gradient buffers of 64k, 1M and 16M floats on R ranks: milliseconds per reduction (median
of repeats, slowest rank) of (a) ``Allreduce`` of float32 with MPI's sum; (b) the previous
``Bf16Sync.finish``: error feedback and an ``Allreduce`` of bfloat16 with an ``Op.Create``
Python sum; (c) :class:`hpcgnn.training.gradsync.Bf16Sync` (the same error feedback, then an
Alltoall of bfloat16 pieces, float32 sums and an Allgather).

    python bench/grad_bf16.py [--ranks 2,4]
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

SIZES = (1 << 16, 1 << 20, 1 << 24)

WORKER = r"""
import json, time
import numpy as np
import torch
from mpi4py import MPI
from hpcgnn.runtime.comm import world
from hpcgnn.runtime.abort import install_abort_hook
from hpcgnn.training.gradsync import FlatGradients, build_sync
install_abort_hook()  # an error on one rank ends the job instead of leaving the others waiting
comm = world()

def callback_sum(inbuf, inoutbuf, datatype):
    a = torch.from_numpy(np.frombuffer(inbuf, dtype=np.int16)).view(torch.bfloat16)
    out = torch.from_numpy(np.frombuffer(inoutbuf, dtype=np.int16)).view(torch.bfloat16)
    out.copy_((a.float() + out.float()).to(torch.bfloat16))

op = MPI.Op.Create(callback_sum, commute=True)

def timed(fn, repeats):
    fn()
    times = []
    for _ in range(repeats):
        comm.Barrier()
        t0 = time.perf_counter()
        fn()
        times.append(comm.allreduce(time.perf_counter() - t0, op=MPI.MAX))
    return float(np.median(times)) * 1e3

rows = []
for n in (65536, 1048576, 16777216):
    repeats = 20 if n < 1 << 24 else 5
    f32 = np.random.default_rng(comm.rank).standard_normal(n).astype(np.float32)
    model = torch.nn.Linear(n, 1, bias=False)
    grads = FlatGradients(model)
    sync = build_sync(grads, comm, compress="bf16")
    residual, old_wire = torch.zeros(n), torch.zeros(n, dtype=torch.bfloat16)
    def new():
        grads.buffer.copy_(torch.from_numpy(f32))
        sync.finish()
    def callback():  # the same steps as Bf16Sync.finish, with the Python-callback Allreduce
        g = grads.buffer
        g.copy_(torch.from_numpy(f32))
        g += residual
        old_wire.copy_(g)
        torch.sub(g, old_wire.float(), out=residual)
        comm.Allreduce(MPI.IN_PLACE, old_wire.view(torch.int16).numpy(), op=op)
        torch.div(old_wire.float(), comm.size, out=g)
    row = {"n": n,
           "fp32_ms": timed(lambda: comm.Allreduce(MPI.IN_PLACE, f32.copy(), op=MPI.SUM), repeats),
           "callback_ms": timed(callback, repeats),
           "bf16sync_ms": timed(new, repeats)}
    sync.close()
    rows.append(row)
op.Free()
if comm.rank == 0:
    print(json.dumps(rows))
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", default="2,4")
    parser.add_argument("--json", help="append this run's record here instead of bench/results/<script>.json")
    args = parser.parse_args()
    common.print_header("bfloat16 gradient reduction")
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    print("| ranks | floats | fp32 Allreduce ms | bf16 callback op ms | Bf16Sync ms | callback / Bf16Sync | "
          "Bf16Sync / fp32 |\n|---|---|---|---|---|---|---|")
    every = []
    for ranks in [int(r) for r in args.ranks.split(",")]:
        out = subprocess.run([mpiexec, "-n", str(ranks), sys.executable, "-c", WORKER], check=True,
                             capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
        for row in json.loads(out.stdout.strip().splitlines()[-1]):
            row["ranks"] = ranks
            every.append(row)
            print(f"| {ranks} | {row['n']:,} | {row['fp32_ms']:.2f} | {row['callback_ms']:.2f} | "
                  f"{row['bf16sync_ms']:.2f} | {row['callback_ms'] / row['bf16sync_ms']:.2f} | "
                  f"{row['bf16sync_ms'] / row['fp32_ms']:.2f} |", flush=True)
    common.record(every, path=args.json, title="bfloat16 gradient reduction against the float32 Allreduce")


if __name__ == "__main__":
    main()
