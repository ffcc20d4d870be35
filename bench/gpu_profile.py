"""Where one rank's GPU training step spends its time: ``torch.profiler`` over a few steps of
hpcgnn ``--device cuda`` on one rank (GraphSAGE 2x256, fanouts 10,25, batch 1000, as
bench/gpu.py), printing the operators by total CUDA time and by host time, and writing the
tables to a JSON record. Only the training steps are profiled (no evaluation).

    python bench/gpu_profile.py --data bench/work/gpu_<graph>_random_1     # after bench/gpu.py
    python bench/gpu_profile.py --data parts/g --device cpu --steps 5      # the same tables on the CPU

It runs in this process as a one-rank MPI job (no mpiexec needed).
"""
import argparse
import os
import sys

from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="a one-part dataset")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--steps", type=int, default=30, help="steps profiled (one epoch cut short)")
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    parser.add_argument("--rows", type=int, default=25, help="operators listed per table")
    args = parser.parse_args()

    from mpi4py import MPI

    from hpcgnn.training.config import parse_train_config
    from hpcgnn.training.loop import run

    flags = ["--data", args.data, "--model", "sage", "--hidden", "256", "--fanouts", "10,25", "--batch-size", "1000",
             "--epochs", "1", "--steps-per-epoch", str(args.steps), "--eval-every", "never", "--no-progress",
             "--device", args.device, "--precision", args.precision]
    if args.device == "cpu":
        flags += ["--kernels", "torch"]
    config = parse_train_config(flags)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device == "cuda" else [])
    with profile(activities=activities) as prof:
        _, history = run(config, MPI.COMM_WORLD)
    averages = prof.key_averages()
    tables = {}
    sorts = ["self_cpu_time_total"] + (["self_cuda_time_total"] if args.device == "cuda" else [])
    for sort in sorts:
        table = averages.table(sort_by=sort, row_limit=args.rows)
        print(f"# operators by {sort}\n{table}", flush=True)
        tables[sort] = table
    epoch = history[-1]
    common.record(title=f"one rank's {args.device} training step under torch.profiler ({args.precision})",
                  figures={"steps": args.steps, "epoch_s": epoch.get("epoch_time_s"),
                           "phases_s": epoch.get("phases_s")},
                  facts={"data": os.path.basename(os.path.normpath(args.data)), "tables": tables})


if __name__ == "__main__":
    main()
