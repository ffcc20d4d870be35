"""The GPU compute path beside the CPU path: GraphSAGE 2x256, fanouts 10,25, batch 1000 per rank, on
the medium RMAT graph (1M nodes, 25M generated edges, about 46.5M once symmetrized, 100 features,
20 classes), 2 epochs per run, one table.

    python bench/gpu.py                      # on a machine with a GPU: the prepared run (< 8 min, 16 cores, H100)
    python bench/gpu.py --device cpu --quick # anywhere: the same table on a small graph, CPU standing in for the GPU

Rows, side by side:

- hpcgnn on the CPUs: as many ranks as cores (``--cpu-ranks``), fp32 and bf16;
- hpcgnn ``--device cuda`` at several rank counts sharing the one GPU (``--gpu-ranks``: 16, 8,
  4, 1), fp32, then bf16 at the rank count that was fastest in fp32; by default each rank keeps
  the feature rows of its node on the GPU (``--device-rows-mb``);
- the same at the fastest count with ``--device-rows-mb 0``: every feature row gathered on the
  CPU and copied, as before the rows were kept on the GPU;
- the same under NVIDIA MPS at each count (the ranks' kernels in one GPU context instead of
  taking turns), where ``nvidia-cuda-mps-control`` starts a daemon of the benchmark's own
  (``--no-mps``: none);
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
import tempfile
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
#: a run that takes longer is stopped and its row says so (the table goes on)
RUN_TIMEOUT_S = 180
#: a client's first computation under MPS (prints 4.0)
PROBE = "import torch; print(float(torch.ones(4, device='cuda').sum()))"


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


def hpcgnn_run(parts, ranks, precision, device, epochs, gpu, extra=(), env=None):
    """One hpcgnn training run (``extra`` flags, ``env`` variables); its row's figures."""
    tag = "".join(c for c in "_".join(extra) if c.isalnum() or c == "_")
    metrics = os.path.join(common.WORK, f"gpu_{os.path.basename(parts)}_{ranks}_{precision}_{device}{tag}.jsonl")
    if os.path.exists(metrics):
        os.unlink(metrics)
    flags = ["--device", "cpu", "--kernels", "torch"] if device == "cpu-as-gpu" else ["--device", device]
    if device == "cpu-as-gpu":  # the GPU path's staging (and the rows it keeps) on the CPU
        env = dict(env or {}, HPCGNN_DEVICE_STAGE="1")
    monitor = GpuMonitor(gpu)
    wall, _, _ = common.timed(["timeout", str(RUN_TIMEOUT_S), common.mpiexec(), "-n", str(ranks), sys.executable, "-m",
                               "hpcgnn.train", "--data", parts, "--epochs", str(epochs), "--metrics-file", metrics,
                               "--precision", precision, *flags, *MODEL, *extra], env=env)
    utilisation = monitor.mean()
    with open(metrics) as fh:
        records = [json.loads(line) for line in fh]
    epochs_ = [r for r in records if "epoch" in r and not r.get("final")]
    last = epochs_[-1]
    phases = {k: float(last["phases_s"].get(k, (0.0, 0.0))[1]) for k in PHASES}
    return {"epoch_s": float(last["epoch_time_s"]), "phases": phases,
            "model_ms_per_step": 1000 * phases["compute"] / max(last["steps"], 1), "steps": last["steps"],
            "gpu_util": utilisation, "gpu_mem_MiB": records[-1].get("gpu_memory_peak_MiB"),
            "test_acc": records[-1].get("test_acc"), "wall_s": wall,
            "device_rows": records[0].get("settings", {}).get("device_rows")}


class Mps:
    """An NVIDIA MPS control daemon of this benchmark's own (private pipe and log folders), so that
    the ranks sharing the GPU run their kernels in one context instead of taking turns; ``env``:
    the variables a client needs, None when MPS is not available here (``why`` says why)."""

    def __init__(self):
        self.env, self.why, self.folder = None, "", None
        control = shutil.which("nvidia-cuda-mps-control")
        if control is None:
            self.why = "no nvidia-cuda-mps-control on PATH"
            return
        self.folder = tempfile.mkdtemp(prefix="hpcgnn-mps-")
        env = {"CUDA_MPS_PIPE_DIRECTORY": os.path.join(self.folder, "pipe"),
               "CUDA_MPS_LOG_DIRECTORY": os.path.join(self.folder, "log")}
        for path in env.values():
            os.makedirs(path)
        self.control = [control]
        started = subprocess.run([control, "-d"], env=dict(os.environ, **env), capture_output=True, text=True,
                                 timeout=30)
        if started.returncode:
            self.why = f"the daemon did not start: {(started.stderr or started.stdout).strip()[:200]}"
            return
        try:
            probe = subprocess.run([sys.executable, "-c", PROBE], env=dict(os.environ, **env), capture_output=True,
                                   text=True, timeout=60)
            ok = probe.returncode == 0 and probe.stdout.strip().endswith("4.0")
            detail = (probe.stderr or probe.stdout).strip()[-200:]
        except subprocess.TimeoutExpired:
            ok, detail = False, "a client hung for 60 s"
        if not ok:
            self.why = f"a client could not compute under it: {detail}"
            self.close(env)
            return
        self.env = env

    def close(self, env=None):
        env = env or self.env
        if env is not None:
            try:
                subprocess.run(self.control, input="quit\n", env=dict(os.environ, **env), capture_output=True,
                               text=True, timeout=30)
            except subprocess.TimeoutExpired:
                print("# NVIDIA MPS: the daemon did not answer 'quit' in 30 s", flush=True)
            self.env = None
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None


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
        print(f"| {row['system']} | {row['shown_device']} | {row['ranks']} | {row['precision']} | {row['note']} "
              "| | | | | |", flush=True)
        return
    ph = "/".join(f"{r['phases'][k]:.2f}" for k in PHASES)
    print(f"| {row['system']} | {row['shown_device']} | {row['ranks']} | {row['precision']} | {r['epoch_s']:.2f} "
          f"| {ph} "
          f"| {r['model_ms_per_step']:.1f} | {cell(r.get('gpu_util'), '.0f')} | {cell(r.get('gpu_mem_MiB'), '.0f')} "
          f"| {cell(r.get('test_acc'), '.4f')} |", flush=True)


#: the table's systems
SYSTEMS = {"cpu": "hpcgnn CPU", "gpu": "hpcgnn --device cuda",
           "gpu-host-rows": "hpcgnn --device cuda --device-rows-mb 0", "gpu-mps": "hpcgnn --device cuda, MPS",
           "plain": "plain PyTorch loop"}


def plan_rows(device_name, gpu, cpu_ranks, gpu_ranks, precisions, with_mps):
    """The table's rows in order of importance (a run that would pass the budget is skipped):
    the CPU baseline, the GPU path at each rank count, the plain loop, the GPU path with every
    feature row gathered on the host (at the fastest count), bf16, then under MPS."""
    plain_device = "cuda" if gpu else "cpu"

    def row(kind, device, ranks, precision):
        return {"system": SYSTEMS[kind], "kind": kind, "device": device, "ranks": ranks, "precision": precision,
                "shown_device": "cpu (standing in for cuda)" if device == "cpu-as-gpu" else device}

    plan = [row("cpu", "cpu", cpu_ranks, "fp32")]
    plan += [row("gpu", device_name, r, "fp32") for r in gpu_ranks]
    plan += [row("plain", plain_device, 1, "fp32"), row("gpu-host-rows", device_name, None, "fp32")]
    if "bf16" in precisions:
        plan += [row("cpu", "cpu", cpu_ranks, "bf16"), row("gpu", device_name, None, "bf16"),
                 row("plain", plain_device, 1, "bf16")]
    if with_mps:  # last: the daemon starts before the first of them and stops after the last
        plan += [row("gpu-mps", device_name, r, "fp32") for r in gpu_ranks if r > 1]
    return plan


def run_row(row, graph, parts, epochs, gpu, mps):
    """One row's run; its figures."""
    kind, ranks = row["kind"], row["ranks"]
    if kind == "plain":
        return plain_run(graph, row["device"], epochs, row["precision"], gpu)
    extra = ("--device-rows-mb", "0") if kind == "gpu-host-rows" else ()
    env = mps.env if kind == "gpu-mps" else None
    return hpcgnn_run(parts[ranks], ranks, row["precision"], row["device"], epochs, gpu and kind != "cpu", extra, env)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                        help="cuda: the GPU rows on the GPU; cpu: on the CPU (--kernels torch), to check the script")
    parser.add_argument("--quick", action="store_true", help=f"a small graph {QUICK[:2]} and fewer ranks")
    parser.add_argument("--cpu-ranks", type=int, default=0, help="ranks of the CPU baseline (default: the cores)")
    parser.add_argument("--gpu-ranks", default="",
                        help="rank counts sharing the GPU, in the order run (default 16,8,4,1; quick 2,1)")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--no-mps", dest="mps", action="store_false",
                        help="no rows under NVIDIA MPS (by default they run where nvidia-cuda-mps-control starts)")
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
    gpu_ranks = [int(x) for x in (args.gpu_ranks or ("2,1" if args.quick else "16,8,4,1")).split(",")]
    precisions = args.precisions.split(",")
    sizes = QUICK if args.quick else MEDIUM
    common.print_header(f"GPU compute path: GraphSAGE 2x{HIDDEN}, fanouts {','.join(map(str, FANOUTS))}, batch "
                        f"{BATCH}/rank, {args.epochs} epochs, RMAT {sizes[0]:,} nodes {sizes[1]:,} generated edges")
    facts = {"gpu": gpu_name if gpu else "none (--device cpu: the GPU rows ran on the CPU)", "cores": cores,
             "mpiexec": common.mpiexec()}
    print("# " + json.dumps(facts), flush=True)

    common.check_launcher("bench/gpu.py")
    t0 = time.perf_counter()
    graph = common.ensure_graph(*sizes)
    t_graph = time.perf_counter() - t0
    parts = partition_all(graph, [cpu_ranks, *gpu_ranks])
    t_parts = time.perf_counter() - t0 - t_graph
    print(f"# graph {t_graph:.0f} s, random partitions into {sorted(parts)} parts {t_parts:.0f} s", flush=True)

    device_name = "cuda" if gpu else "cpu-as-gpu"
    mps = None
    print("| system | device | ranks | precision | epoch s | sample/gather/copy/compute/allreduce/wait s (max over "
          "ranks) | model ms/step | GPU util % | GPU mem MiB | test acc |\n|---|---|---|---|---|---|---|---|---|---|",
          flush=True)
    rows, longest = [], 0.0
    try:
        for entry in plan_rows(device_name, gpu, cpu_ranks, gpu_ranks, precisions, gpu and args.mps):
            row = dict(entry)
            if row["kind"] == "gpu-mps" and mps is None:
                mps = Mps()
                facts["mps"] = "on" if mps.env else f"not available: {mps.why}"
                print(f"# NVIDIA MPS: {facts['mps']}", flush=True)
            if row["kind"] == "gpu-mps" and not mps.env:
                continue
            if row["ranks"] is None:  # at the rank count fastest in fp32 with rows on the GPU
                fastest = [r for r in rows if r["system"] == SYSTEMS["gpu"] and r.get("result")]
                row["ranks"] = (min(fastest, key=lambda r: r["result"]["epoch_s"])["ranks"] if fastest
                                else max(gpu_ranks))
            elapsed = time.perf_counter() - started
            if elapsed + longest > args.budget_s:
                row["note"] = f"skipped: {elapsed:.0f} s gone, the longest run took {longest:.0f} s (--budget-s)"
            else:
                t1 = time.perf_counter()
                try:
                    row["result"] = run_row(row, graph, parts, args.epochs, gpu, mps)
                    longest = max(longest, time.perf_counter() - t1)
                except (RuntimeError, OSError) as failed:  # one failed variant: its row says so, the table goes on
                    # (a run stopped at its timeout says nothing of how long the others take)
                    row["note"] = f"failed: {str(failed)[:160]}"
            rows.append(row)
            print_row(row)
    finally:
        if mps is not None:
            mps.close()
    total = time.perf_counter() - started
    print(f"# total {total:.0f} s (graph {t_graph:.0f} s, partitions {t_parts:.0f} s)", flush=True)
    if not gpu:
        print("# --device cpu: every row ran on the CPU; the GPU figures are still to be taken on a GPU machine")
    common.record([{"system": r["system"], "device": r["shown_device"], "ranks": r["ranks"],
                    "precision": r["precision"], **({"note": r["note"]} if "note" in r else {}),
                    **(r.get("result") or {})} for r in rows],
                  title=f"GPU compute path, GraphSAGE 2x{HIDDEN}, fanouts 10,25, batch {BATCH} per rank, "
                        f"{args.epochs} epochs, RMAT {sizes[0]:,} nodes",
                  figures={"total_s": total, "graph_s": t_graph, "partitions_s": t_parts}, facts=facts)


if __name__ == "__main__":
    main()
