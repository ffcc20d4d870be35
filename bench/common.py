"""Shared pieces of the benchmarks: machine facts, timed child processes, DGL's virtualenv."""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ANCHOR = os.path.join(os.path.dirname(ROOT), "shared", "anchor_dgl")
WORK = os.path.join(ROOT, "bench", "work")


def machine_info() -> dict:
    """CPU, memory and library versions, printed at the top of every benchmark."""
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next(line.split(":", 1)[1].strip() for line in fh if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    import numpy

    info = {"cpu": cpu, "cores": os.cpu_count(), "mem_GiB": round(mem_gib, 1),
            "python": platform.python_version(), "numpy": numpy.__version__,
            "omp_threads": os.environ.get("OMP_NUM_THREADS", "unset")}
    try:
        info["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                                        capture_output=True).stdout.strip()
    except OSError:
        pass
    return info


def print_header(title: str) -> None:
    print(f"# {title}")
    print("# machine: " + json.dumps(machine_info()), flush=True)


def timed(cmd, cwd=None, env=None):
    """Run ``cmd``; return (wall seconds, peak RSS MiB of the process tree's largest, stdout)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", **(env or {}))
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        t0 = time.perf_counter()
        proc = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", tf.name, *cmd], cwd=cwd, env=env,
                              text=True, capture_output=True)
        wall = time.perf_counter() - t0
        lines = [x for x in open(tf.name).read().split() if x.isdigit()]
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        raise RuntimeError(f"command failed ({proc.returncode}): {' '.join(cmd)}")
    return wall, int(lines[-1]) / 1024 if lines else float("nan"), proc.stdout


def hpcgnn_cmd(*args):
    return [sys.executable, "-m", "hpcgnn.cli", *args]


def serial_env() -> dict:
    """This environment without the launcher's PMI variables: a serial command started from an
    MPI rank (a benchmark run under mpiexec preparing its graph) is a singleton MPI job of its
    own, where those variables would make its MPI_Init connect to the rank's launcher and fail."""
    return {key: value for key, value in os.environ.items()
            if not key.startswith(("PMI_", "PMIX_", "HYDRA_", "OMPI_"))}


def ensure_graph(nodes, edges, feat_dim, classes, seed=0):
    """Generate (once) the RMAT benchmark graph; return its path."""
    os.makedirs(WORK, exist_ok=True)
    path = os.path.join(WORK, f"rmat_{nodes}_{edges}_{feat_dim}_{classes}_{seed}.npz")
    if not os.path.exists(path):
        subprocess.run(hpcgnn_cmd("generate", "rmat", "--nodes", str(nodes), "--edges", str(edges),
                                  "--feat-dim", str(feat_dim), "--classes", str(classes),
                                  "--seed", str(seed), "--out", path), check=True, env=serial_env())
    return path


def dgl_python(setup=False):
    """Python of DGL 2.1's own virtualenv (``$DGLENV``), built by the anchor's setup.sh on request."""
    env_dir = os.environ.get("DGLENV", os.path.join(os.environ.get("TMPDIR", "/tmp"), "dglenv"))
    python = os.path.join(env_dir, "bin", "python")
    if not os.path.exists(python) and setup:
        subprocess.run(["bash", os.path.join(ANCHOR, "setup.sh")], check=True, env=dict(os.environ, DGLENV=env_dir))
    return python if os.path.exists(python) else None


def du_bytes(path) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


#: the generated RMAT graphs of the speed benchmarks: (nodes, edges, feature width, classes)
GRAPHS = {"small": (100_000, 2_000_000, 64, 10), "medium": (1_000_000, 25_000_000, 100, 20)}


def ensure_parts(graph, parts, tag, *flags):
    """Partition (once) ``graph`` into ``parts`` METIS parts, symmetrized, with partition's extra
    ``flags``; return the directory."""
    out = os.path.join(WORK, f"{tag}_{parts}")
    if not os.path.exists(os.path.join(out, "meta.json")):
        subprocess.run(hpcgnn_cmd("partition", graph, "--parts", str(parts), "--symmetrize", "--out", out, "--force",
                                  *flags), check=True, capture_output=True, env=serial_env())
    return out
