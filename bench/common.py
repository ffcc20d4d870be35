"""Shared pieces of the benchmarks: machine facts, the results records, timed child processes,
DGL's virtualenv.

Every benchmark writes what it measured through :func:`record`: one JSON record appended to
``bench/results/<script>.json`` (a list, oldest first), holding the command line, the commit,
the date, the machine and the figures or table rows. ``bench/render.py`` writes the performance
page from those files, each table the latest record of its command.
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: where the records go; ``HPCGNN_BENCH_RESULTS`` sends them elsewhere (a trial run, a test)
RESULTS = os.environ.get("HPCGNN_BENCH_RESULTS") or os.path.join(ROOT, "bench", "results")
ANCHOR = os.path.join(os.path.dirname(ROOT), "shared", "anchor_dgl")
WORK = os.path.join(ROOT, "bench", "work")


def _cpu_model() -> str:
    """The CPU's model name as lscpu gives it (``/proc/cpuinfo`` where lscpu is missing)."""
    try:
        out = subprocess.run(["lscpu"], text=True, capture_output=True, env=dict(os.environ, LC_ALL="C")).stdout
        name = next((line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")), "")
        if name:
            return name
    except OSError:
        pass
    try:
        with open("/proc/cpuinfo") as fh:
            return next(line.split(":", 1)[1].strip() for line in fh if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor()


def _matrix_units() -> str:
    """The CPU features bfloat16 speed depends on: ``amx``, ``avx512_bf16``, ``avx512`` or ``none``."""
    try:
        with open("/proc/cpuinfo") as fh:
            flags = set(next(line.split(":", 1)[1].split() for line in fh if line.startswith("flags")))
    except (OSError, StopIteration):
        return "unknown"
    for unit, flag in (("amx", "amx_bf16"), ("avx512_bf16", "avx512_bf16"), ("avx512", "avx512f")):
        if flag in flags:
            return unit
    return "none"


def _version(package: str) -> str | None:
    """An installed package's version, read from its metadata (importing torch would cost seconds
    and memory in the process being measured)."""
    from importlib import metadata
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def machine_info() -> dict:
    """CPU, memory and library versions, printed at the top of every benchmark and stored in its
    record."""
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {"cpu": _cpu_model(), "matrix_units": _matrix_units(), "cores": os.cpu_count(),
            "mem_GiB": round(mem_gib, 1), "python": platform.python_version(), "numpy": _version("numpy"),
            "torch": _version("torch"), "mpi4py": _version("mpi4py"),
            "omp_threads": os.environ.get("OMP_NUM_THREADS", "unset")}


def code_version() -> tuple[str, bool]:
    """The short commit of HEAD and whether tracked files differ from it (``("unknown", False)``
    outside a git checkout)."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=ROOT, text=True, capture_output=True)
    try:
        head = git("rev-parse", "--short", "HEAD")
        if head.returncode:
            return "unknown", False
        return head.stdout.strip(), bool(git("status", "--porcelain", "--untracked-files=no").stdout.strip())
    except OSError:
        return "unknown", False


def print_header(title: str) -> None:
    commit, dirty = code_version()
    print(f"# {title}")
    print("# machine: " + json.dumps(machine_info()))
    print(f"# commit: {commit}{' (with uncommitted changes)' if dirty else ''}", flush=True)


def command_line() -> str:
    """This benchmark's command as a user would type it: ``python bench/x.py ARGS``, preceded by
    ``mpiexec -n N`` when it runs as N MPI ranks."""
    script = os.path.relpath(os.path.abspath(sys.argv[0]), ROOT)
    words = ["python", script, *sys.argv[1:]]
    ranks = os.environ.get("PMI_SIZE") or os.environ.get("OMPI_COMM_WORLD_SIZE")
    if ranks:
        words = ["mpiexec", "-n", ranks, *words]
    return shlex.join(words)


def results_path(name: str) -> str:
    """Where the records of benchmark ``name`` (a script's name without ``.py``) are kept."""
    return os.path.join(RESULTS, name + ".json")


def read_records(path: str) -> list:
    """The records of one results file, oldest first (an empty list when there is none yet)."""
    if not os.path.exists(path):
        return []
    with open(path) as fh:
        records = json.load(fh)
    if not isinstance(records, list):
        raise ValueError(f"{path}: not a list of records")
    return records


def record(rows=None, *, figures=None, table=None, title=None, columns=None, path=None, name=None,
           **details) -> dict:
    """Append one record of this run to ``bench/results/<script>.json`` (``path`` instead, when
    given) and return it.

    ``rows`` is a table (a list of dicts, one per row) and ``figures`` single named figures; a
    record holds either or both. ``table`` names which of the command's tables this is, when one
    run prints several; ``title`` says in a line what the table measures; ``columns`` chooses
    and orders the row fields the performance page shows (all of them by default). Anything
    else in ``details`` (the graph, the recipe) is stored as it is. The file is rewritten whole
    through a temporary file, so a run stopped midway leaves the previous records intact.
    """
    from hpcgnn.runtime.files import atomic_path

    if rows is None and figures is None:
        raise ValueError("a record needs rows or figures")
    name = name or os.path.splitext(os.path.basename(sys.argv[0]))[0]
    commit, dirty = code_version()
    entry = {"command": command_line(), "commit": commit, "dirty": dirty,
             "date": datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat(),
             "machine": machine_info()}
    for key, value in (("table", table), ("title", title), ("columns", columns), ("rows", rows),
                       ("figures", figures)):
        if value is not None:
            entry[key] = value
    entry.update(details)
    path = path or results_path(name)
    records = read_records(path)
    records.append(entry)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with atomic_path(path) as tmp, open(tmp, "w") as fh:
        json.dump(records, fh, indent=1, default=_plain)
        fh.write("\n")
    print(f"# record appended to {os.path.relpath(path)}", flush=True)
    return entry


def _plain(value):
    """numpy scalars and arrays as JSON numbers and lists."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"not JSON: {type(value).__name__}")


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


def mpiexec() -> str:
    """The mpiexec of the MPI mpi4py runs on: the one beside this Python (the mpich wheel's), else PATH's."""
    local = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    found = local if os.path.exists(local) else shutil.which("mpiexec")
    if found is None:
        sys.exit("no mpiexec beside this Python or on PATH (pip install mpich)")
    return found


def check_launcher(script="this benchmark"):
    """Exit at once, in one line, unless ``mpiexec -n 2`` starts one MPI job of 2 ranks within 60 s
    (a launcher of another MPI than the one mpi4py loads starts independent copies, and a broken
    one can hang until each run's timeout): minutes of a borrowed GPU machine are not spent on
    runs that cannot start."""
    # torch first, as hpcgnn imports it: a library it loads can decide which MPI mpi4py's wheel takes
    probe = [mpiexec(), "-n", "2", sys.executable, "-c",
             "import sys, torch; from mpi4py import MPI; sys.stdout.write(f'{MPI.COMM_WORLD.size} '"
             "f'{MPI.Get_library_version().splitlines()[0]}' + chr(10))"]  # one write: ranks' lines stay whole
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=60, env=serial_env())
        lines = done.stdout.strip().splitlines()
        ok = done.returncode == 0 and len(lines) == 2 and all(line.startswith("2 ") for line in lines)
        said = (done.stdout + done.stderr).strip().replace("\n", " | ")[:300]
    except subprocess.TimeoutExpired:
        ok, said = False, "no answer in 60 s"
    if not ok:
        sys.exit(f"{script}: '{probe[0]} -n 2' did not start one 2-rank MPI job ({said}): use the mpiexec of "
                 "the MPI mpi4py loads (MPI4PY_MPIABI / MPI4PY_LIBMPI choose it for mpi4py's wheel)")
    print(f"# launcher: {lines[0].split(' ', 1)[1]}", flush=True)


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
    """Python of DGL 2.1's own virtualenv (``$DGLENV``), built by its setup.sh on request."""
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
