"""The GPU compute path beside the CPU path: GraphSAGE 2x256, fanouts 10,25, batch 1000 per rank, on
the medium RMAT graph (1M nodes, 25M generated edges, about 46.5M once symmetrized, 100 features,
20 classes), 2 epochs per run, one table.

    python bench/gpu.py                      # on a machine with a GPU: the prepared run (< 8 min, 16 cores, H100)
    python bench/gpu.py --device cpu --quick # anywhere: the same table on a small graph, CPU standing in for the GPU

Rows, side by side:

- hpcgnn on the CPUs: as many ranks as cores (``--cpu-ranks``), fp32 and bf16;
- hpcgnn ``--device cuda`` at several rank counts sharing the one GPU (``--gpu-ranks``: 1, 4, 8,
  16), fp32, then bf16 at the rank count that was fastest in fp32;
- a plain single-GPU PyTorch loop written here (graph, features and labels on the GPU, uniform
  sampling with replacement by torch ops, the same SAGE 2x256 (mean aggregator), fanouts, batch,
  Adam and dropout): what naive GPU code does.

With ``--device cpu`` every "GPU" row runs on the CPU instead (``--device cpu --kernels torch``,
and the plain loop's tensors on the CPU), which checks the script end to end; those figures say
nothing about a GPU.

Columns: the epoch's seconds (the second epoch: the first warms up), the phase split of the
slowest rank (sample, gather, copy, compute, allreduce, wait; hpcgnn's metrics file), the model's
time per step (compute phase / steps: forward, backward and optimizer, on the GPU once the device
finished them), the GPU's mean utilisation while the run trained (``nvidia-smi`` sampled every
0.2 s, else ``torch.cuda.utilization``; '-' without either), its memory peak, and the test
accuracy after the last epoch (full-neighbourhood inference for hpcgnn; the plain loop's sampled
inference with fanouts 10,25 over the test nodes).

Partitioning is random (``hpcgnn partition --method random``), the fastest that is fair to every
rank count alike: the ranks of one machine read each other's rows through shared memory, so the
edge cut costs no network; it needs no pymetis. The partitions of every rank count are written at
once by concurrent processes. The graph and partitions are kept under ``bench/work`` for a rerun.
Runs are made in order of importance and any run that would not fit the time left of
``--budget-s`` is skipped (said in its row), so the script ends in time on a slower machine.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

#: nodes, generated edges, feature width, classes
MEDIUM = (1_000_000, 25_000_000, 100, 20)
QUICK = (10_000, 100_000, 100, 20)
FANOUTS = (10, 25)
HIDDEN, BATCH, LR, DROPOUT = 256, 1000, 0.003, 0.5
MODEL = ["--model", "sage", "--hidden", str(HIDDEN), "--fanouts", ",".join(map(str, FANOUTS)), "--batch-size",
         str(BATCH), "--lr", str(LR), "--dropout", str(DROPOUT), "--eval-every", "0", "--no-progress"]
PHASES = ("sample", "gather", "copy", "compute", "allreduce", "wait")


def mpiexec() -> str:
    """The mpiexec of the MPI mpi4py runs on: the one beside this Python (the mpich wheel's), else PATH's."""
    local = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    found = local if os.path.exists(local) else shutil.which("mpiexec")
    if found is None:
        sys.exit("no mpiexec beside this Python or on PATH (pip install mpich)")
    return found


class GpuMonitor:
    """Mean GPU utilisation while a run trains: ``nvidia-smi`` sampled every 0.2 s, else
    ``torch.cuda.utilization`` polled; None where neither answers."""

    def __init__(self, enabled):
        self.samples, self.proc, self.thread = [], None, None
        self.stop = threading.Event()
        if not enabled:
            return
        smi = shutil.which("nvidia-smi")
        if smi:
            self.proc = subprocess.Popen([smi, "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits",
                                          "-lms", "200"], stdout=subprocess.PIPE, text=True,
                                         stderr=subprocess.DEVNULL)
            self.thread = threading.Thread(target=self._read, daemon=True)
        else:
            self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            value = line.strip().split(",")[0]
            if value.isdigit():
                self.samples.append(int(value))

    def _poll(self):
        import torch

        try:
            while not self.stop.is_set():
                self.samples.append(int(torch.cuda.utilization()))
                time.sleep(0.2)
        except Exception:  # noqa: BLE001 - pynvml missing: no figure
            self.samples = []

    def mean(self):
        self.stop.set()
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait()
        if self.thread is not None:
            self.thread.join(timeout=2)
        # drop the idle samples of start-up and evaluation: the training's share
        busy = [s for s in self.samples if s > 0]
        return float(np.mean(busy)) if busy else None


def partition_all(graph, counts):
    """Random partitions of ``graph`` into each of ``counts`` parts, written concurrently; their directories."""
    out, procs = {}, []
    for parts in sorted(set(counts)):
        path = os.path.join(common.WORK, f"gpu_{os.path.splitext(os.path.basename(graph))[0]}_random_{parts}")
        out[parts] = path
        if not os.path.exists(os.path.join(path, "meta.json")):
            procs.append(subprocess.Popen(common.hpcgnn_cmd("partition", graph, "--parts", str(parts), "--symmetrize",
                                                            "--method", "random", "--seed", "0", "--out", path,
                                                            "--force"),
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                          env=dict(common.serial_env(), OMP_NUM_THREADS="1")))
    for proc in procs:
        text, _ = proc.communicate()
        if proc.returncode:
            sys.exit(f"partitioning failed:\n{text[-3000:]}")
    return out


def hpcgnn_run(parts, ranks, precision, device, epochs, gpu):
    """One hpcgnn training run; its row's figures."""
    metrics = os.path.join(common.WORK, f"gpu_{os.path.basename(parts)}_{ranks}_{precision}_{device}.jsonl")
    if os.path.exists(metrics):
        os.unlink(metrics)
    flags = ["--device", "cpu", "--kernels", "torch"] if device == "cpu-as-gpu" else ["--device", device]
    monitor = GpuMonitor(gpu)
    wall, _, _ = common.timed([mpiexec(), "-n", str(ranks), sys.executable, "-m", "hpcgnn.train", "--data", parts,
                               "--epochs", str(epochs), "--metrics-file", metrics, "--precision", precision,
                               *flags, *MODEL])
    utilisation = monitor.mean()
    with open(metrics) as fh:
        records = [json.loads(line) for line in fh]
    epochs_ = [r for r in records if "epoch" in r and not r.get("final")]
    last = epochs_[-1]
    phases = {k: float(last["phases_s"].get(k, (0.0, 0.0))[1]) for k in PHASES}
    return {"epoch_s": float(last["epoch_time_s"]), "phases": phases,
            "model_ms_per_step": 1000 * phases["compute"] / max(last["steps"], 1), "steps": last["steps"],
            "gpu_util": utilisation, "gpu_mem_MiB": records[-1].get("gpu_memory_peak_MiB"),
            "test_acc": records[-1].get("test_acc"), "wall_s": wall}


# -- the plain single-GPU loop -----------------------------------------------------------------------


def plain_loop(graph_path, device, epochs, precision, seed=0):
    """Local. SAGE 2x256 on one device with the whole graph there; the row's figures."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    torch.manual_seed(seed)
    dev = torch.device(device)
    data = np.load(graph_path)
    n = int(data["num_nodes"])
    src, dst = torch.from_numpy(data["src"]).to(dev), torch.from_numpy(data["dst"]).to(dev)
    keys = torch.unique(torch.cat([dst * n + src, src * n + dst]))  # symmetrized, deduplicated, sorted by dst
    keys = keys[keys // n != keys % n]  # no self loops (the partitioner drops them)
    indices = keys % n
    indptr = torch.zeros(n + 1, dtype=torch.int64, device=dev)
    indptr[1:] = torch.cumsum(torch.bincount(keys // n, minlength=n), 0)
    feat = torch.from_numpy(data["feat"]).to(dev)
    if bool((feat < 0).any()):  # as hpcgnn's --feature-scale auto: standard when any value is negative
        feat = (feat - feat.mean(0)) / feat.std(0).clamp(min=1e-12)
    else:
        feat = feat / feat.abs().sum(1, keepdim=True).clamp(min=1e-12)
    label = torch.from_numpy(data["label"]).to(dev)
    train = torch.from_numpy(np.flatnonzero(data["train_mask"])).to(dev)
    test = torch.from_numpy(np.flatnonzero(data["test_mask"])).to(dev)
    classes = int(label.max()) + 1

    def sample(seeds):
        """Blocks of ``seeds``, output side last: (nodes, per layer (dst positions, neighbour positions, valid))."""
        layers, frontier = [], seeds
        for fanout in reversed(FANOUTS):
            start, degree = indptr[frontier], indptr[frontier + 1] - indptr[frontier]
            pick = (torch.rand(frontier.shape[0], fanout, device=dev) * degree[:, None]).long()
            valid = degree[:, None] > 0
            neighbours = torch.where(valid, indices[(start[:, None] + pick).clamp(max=indices.shape[0] - 1)],
                                     frontier[:, None])
            nodes, inverse = torch.unique(torch.cat([frontier, neighbours.reshape(-1)]), return_inverse=True)
            m = frontier.shape[0]
            layers.append((inverse[:m], inverse[m:].view(m, fanout), valid))
            frontier = nodes
        return frontier, layers[::-1]

    class SAGELayer(nn.Module):
        def __init__(self, a, b):
            super().__init__()
            self.self_fc, self.neigh_fc = nn.Linear(a, b), nn.Linear(a, b, bias=False)

        def forward(self, h, dst_at, neigh_at, valid):
            mask = valid.to(h.dtype).unsqueeze(-1)
            mean = (h[neigh_at] * mask).sum(1) / mask.sum(1).clamp(min=1)
            return self.self_fc(h[dst_at]) + self.neigh_fc(mean)

    layers = nn.ModuleList([SAGELayer(feat.shape[1], HIDDEN), SAGELayer(HIDDEN, classes)]).to(dev)
    optimizer = torch.optim.Adam(layers.parameters(), lr=LR)

    def forward(nodes, blocks, training):
        h = feat[nodes]
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
            for i, (layer, block) in enumerate(zip(layers, blocks)):
                h = layer(h, *block)
                if i < len(layers) - 1:
                    h = F.dropout(F.relu(h), DROPOUT, training)
        return h.float()

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    epoch_times, sample_s, model_s, steps = [], 0.0, 0.0, 0
    for _ in range(epochs):
        sync()
        t0 = time.perf_counter()
        order = train[torch.randperm(train.shape[0], device=dev)]
        sample_s = model_s = 0.0
        steps = 0
        for lo in range(0, order.shape[0], BATCH):
            seeds = order[lo:lo + BATCH]
            t1 = time.perf_counter()
            nodes, blocks = sample(seeds)
            sync()
            t2 = time.perf_counter()
            loss = F.cross_entropy(forward(nodes, blocks, True), label[seeds])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            sync()
            sample_s += t2 - t1
            model_s += time.perf_counter() - t2
            steps += 1
        epoch_times.append(time.perf_counter() - t0)
    layers.eval()
    correct = 0
    with torch.no_grad():
        for lo in range(0, test.shape[0], 10 * BATCH):
            seeds = test[lo:lo + 10 * BATCH]
            correct += int((forward(*sample(seeds), False).argmax(1) == label[seeds]).sum())
    mem = torch.cuda.max_memory_allocated(dev) / 2**20 if dev.type == "cuda" else None
    phases = dict.fromkeys(PHASES, 0.0)
    phases.update(sample=sample_s, compute=model_s)
    return {"epoch_s": epoch_times[-1], "phases": phases, "model_ms_per_step": 1000 * model_s / max(steps, 1),
            "steps": steps, "gpu_mem_MiB": mem, "test_acc": correct / max(int(test.shape[0]), 1)}


def plain_run(graph_path, device, epochs, precision, gpu):
    """The plain loop in a process of its own (its GPU memory gone after it); its row's figures."""
    monitor = GpuMonitor(gpu)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--plain-loop", graph_path, "--plain-device",
                           device, "--epochs", str(epochs), "--plain-precision", precision],
                          capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS=os.environ.get(
                              "OMP_NUM_THREADS", str(os.cpu_count()))))
    utilisation = monitor.mean()
    if proc.returncode:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        raise RuntimeError("the plain loop failed")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return dict(result, gpu_util=utilisation, wall_s=time.perf_counter() - t0)


# -- the table ----------------------------------------------------------------------------------------


def cell(value, fmt):
    return "-" if value is None else format(value, fmt)


def print_row(row):
    r = row.get("result")
    if r is None:
        print(f"| {row['system']} | {row['device']} | {row['ranks']} | {row['precision']} | {row['note']} "
              "| | | | | |", flush=True)
        return
    ph = "/".join(f"{r['phases'][k]:.2f}" for k in PHASES)
    print(f"| {row['system']} | {row['device']} | {row['ranks']} | {row['precision']} | {r['epoch_s']:.2f} | {ph} "
          f"| {r['model_ms_per_step']:.1f} | {cell(r.get('gpu_util'), '.0f')} | {cell(r.get('gpu_mem_MiB'), '.0f')} "
          f"| {cell(r.get('test_acc'), '.4f')} |", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                        help="cuda: the GPU rows on the GPU; cpu: on the CPU (--kernels torch), to check the script")
    parser.add_argument("--quick", action="store_true", help=f"a small graph {QUICK[:2]} and fewer ranks")
    parser.add_argument("--cpu-ranks", type=int, default=0, help="ranks of the CPU baseline (default: the cores)")
    parser.add_argument("--gpu-ranks", default="", help="rank counts sharing the GPU (default 1,4,8,16; quick 1,2)")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--budget-s", type=float, default=450.0,
                        help="skip a run that would end after this many seconds from the start")
    parser.add_argument("--plain-loop", help=argparse.SUPPRESS)
    parser.add_argument("--plain-device", help=argparse.SUPPRESS)
    parser.add_argument("--plain-precision", default="fp32", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.plain_loop:  # the child of plain_run
        print(json.dumps(plain_loop(args.plain_loop, args.plain_device, args.epochs, args.plain_precision)))
        return
    started = time.perf_counter()
    gpu = args.device == "cuda"
    if gpu:
        import torch

        if not torch.cuda.is_available():
            sys.exit("bench/gpu.py: no CUDA GPU here: run it with --device cpu --quick to check it on the CPU")
        gpu_name = torch.cuda.get_device_name(0)
    cores = os.cpu_count()
    cpu_ranks = args.cpu_ranks or (min(cores, 2) if args.quick else cores)
    gpu_ranks = [int(x) for x in (args.gpu_ranks or ("1,2" if args.quick else "1,4,8,16")).split(",")]
    precisions = args.precisions.split(",")
    sizes = QUICK if args.quick else MEDIUM
    common.print_header(f"GPU compute path: GraphSAGE 2x{HIDDEN}, fanouts {','.join(map(str, FANOUTS))}, batch "
                        f"{BATCH}/rank, {args.epochs} epochs, RMAT {sizes[0]:,} nodes {sizes[1]:,} generated edges")
    facts = {"gpu": gpu_name if gpu else "none (--device cpu: the GPU rows ran on the CPU)", "cores": cores,
             "mpiexec": mpiexec()}
    print("# " + json.dumps(facts), flush=True)

    t0 = time.perf_counter()
    graph = common.ensure_graph(*sizes)
    t_graph = time.perf_counter() - t0
    parts = partition_all(graph, [cpu_ranks, *gpu_ranks])
    t_parts = time.perf_counter() - t0 - t_graph
    print(f"# graph {t_graph:.0f} s, random partitions into {sorted(parts)} parts {t_parts:.0f} s", flush=True)

    device_name = "cuda" if gpu else "cpu-as-gpu"
    plan = [("hpcgnn CPU", "cpu", cpu_ranks, "fp32")]
    plan += [("hpcgnn --device cuda", device_name, r, "fp32") for r in sorted(gpu_ranks, reverse=True)]
    plan += [("plain PyTorch loop", "cuda" if gpu else "cpu", 1, "fp32")]
    if "bf16" in precisions:
        plan += [("hpcgnn CPU", "cpu", cpu_ranks, "bf16"), ("hpcgnn --device cuda", device_name, None, "bf16"),
                 ("plain PyTorch loop", "cuda" if gpu else "cpu", 1, "bf16")]
    print("| system | device | ranks | precision | epoch s | sample/gather/copy/compute/allreduce/wait s (max over "
          "ranks) | model ms/step | GPU util % | GPU mem MiB | test acc |\n|---|---|---|---|---|---|---|---|---|---|",
          flush=True)
    rows, longest = [], 0.0
    for system, device, ranks, precision in plan:
        if ranks is None:  # bf16 on the GPU: at the rank count fastest in fp32
            fastest = [r for r in rows if r["device"] == device_name and r.get("result")]
            ranks = min(fastest, key=lambda r: r["result"]["epoch_s"])["ranks"] if fastest else max(gpu_ranks)
        row = {"system": system, "device": "cpu (standing in for cuda)" if device == "cpu-as-gpu" else device,
               "ranks": ranks, "precision": precision}
        elapsed = time.perf_counter() - started
        if elapsed + longest > args.budget_s:
            row["note"] = f"skipped: {elapsed:.0f} s gone, the longest run took {longest:.0f} s (--budget-s)"
        else:
            t1 = time.perf_counter()
            if system.startswith("plain"):
                row["result"] = plain_run(graph, device, args.epochs, precision, gpu)
            else:
                row["result"] = hpcgnn_run(parts[ranks], ranks, precision, "cpu" if system == "hpcgnn CPU" else device,
                                           args.epochs, gpu and system != "hpcgnn CPU")
            longest = max(longest, time.perf_counter() - t1)
        rows.append(row)
        print_row(row)
    total = time.perf_counter() - started
    print(f"# total {total:.0f} s (graph {t_graph:.0f} s, partitions {t_parts:.0f} s)", flush=True)
    if not gpu:
        print("# --device cpu: every row ran on the CPU; the GPU figures are still to be taken on a GPU machine")
    common.record([{"system": r["system"], "device": r["device"], "ranks": r["ranks"], "precision": r["precision"],
                    **({"note": r["note"]} if "note" in r else {}), **(r.get("result") or {})} for r in rows],
                  title=f"GPU compute path, GraphSAGE 2x{HIDDEN}, fanouts 10,25, batch {BATCH} per rank, "
                        f"{args.epochs} epochs, RMAT {sizes[0]:,} nodes",
                  figures={"total_s": total, "graph_s": t_graph, "partitions_s": t_parts}, facts=facts)


if __name__ == "__main__":
    main()
