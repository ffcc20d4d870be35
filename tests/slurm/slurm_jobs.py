"""The job scripts for real: ``jobs/*.sbatch`` on a one-node SLURM cluster (``make test-slurm``).

Not collected by ``make test`` (the file name does not start with ``test_``): it restarts SLURM's
daemons, so it runs on its own. For each ``MpiDefault`` (none, pmi2, pmix) the cluster of
``../shared/tools/local_slurm.sh`` is (re)started and the partition job and the training job
that depends on it are submitted from a directory outside the project, as a user would; the
test waits for them (with a deadline, cancelling them on expiry) and checks SLURM's final
states, the dataset's verification and the training job's metrics. Also: ``srun`` under
``MpiDefault=none`` (independent one-rank copies) is refused with one line and writes nothing,
a training job asked to requeue itself near its time limit resumes from its checkpoint, and
the scripts find the project from a copy submitted elsewhere.

Root and the tool are needed; without them the SLURM tests are skipped, saying why, unless
``HPCGNN_REQUIRE_SLURM=1`` (set by ``make test-slurm``) makes that a failure.
"""
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
JOBS = ROOT / "jobs"
TOOL = ROOT.parent / "shared" / "tools" / "local_slurm.sh"
REQUIRE_ENV = "HPCGNN_REQUIRE_SLURM"
#: the one-node cluster has no accounting database: a job completion log lets ``sacct -c`` answer
JOB_COMPLETION_LOG = "/var/log/slurm/jobcomp.log"
JOB_TIMEOUT_S = 300
FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL",
                "DEADLINE", "PREEMPTED"}
TRAIN_ARGS = "--epochs 2 --hidden 16 --fanouts 5,5 --batch-size 200 --no-progress --metrics-file run.jsonl"

_cluster = {"mpi_default": None}
_submitted: list[str] = []


def missing_requirement():
    if os.geteuid() != 0:
        return "needs root (it starts SLURM's daemons)"
    if not TOOL.exists():
        return f"needs {TOOL}"
    return None


@pytest.fixture(scope="module")
def slurm():
    """Fail or skip before any cluster work when SLURM cannot be run here."""
    reason = missing_requirement()
    if reason is not None:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but the SLURM tests cannot run: {reason}")
        pytest.skip(reason)
    yield
    cancel_submitted()


def run(cmd, timeout=60, **kwargs):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)


def cancel_submitted():
    if _submitted:
        run(["scancel", *_submitted], timeout=30)


def start_cluster(mpi_default):
    """Start (or restart) the one-node cluster with ``MpiDefault=mpi_default``, logging job completions."""
    if _cluster["mpi_default"] == mpi_default:
        return
    if shutil.which("scancel"):
        cancel_submitted()
    proc = run(["bash", str(TOOL)], timeout=600, env=dict(os.environ, MPI_DEFAULT=mpi_default))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    conf = Path("/etc/slurm/slurm.conf")
    conf.write_text(conf.read_text() + f"JobCompType=jobcomp/filetxt\nJobCompLoc={JOB_COMPLETION_LOG}\n")
    for daemon in ("slurmctld", "slurmd"):  # as the tool does, so that they read the addition
        pid_file = Path(f"/run/{daemon}.pid")
        if pid_file.exists():
            pid = int(pid_file.read_text())
            with_suppressed_lookup(os.kill, pid, 15)
            deadline = time.monotonic() + 30
            while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
                time.sleep(0.2)
        assert run([daemon]).returncode == 0
    deadline = time.monotonic() + 60
    while run(["sinfo", "-h", "-o", "%t"]).stdout.strip() != "idle":
        assert time.monotonic() < deadline, run(["sinfo"]).stdout
        time.sleep(0.5)
    assert f"MpiDefault              = {mpi_default}" in run(["scontrol", "show", "config"]).stdout
    _cluster["mpi_default"] = mpi_default


def with_suppressed_lookup(fn, *args):
    try:
        fn(*args)
    except ProcessLookupError:
        pass


def sbatch(cwd, script, *options, **variables):
    """Submit ``script`` (None with ``--wrap``) from ``cwd`` with ``variables`` in the environment
    (sbatch exports all of it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PMI_", "HPCGNN_HOME"))}
    env.update(OMP_NUM_THREADS="1", **{k: str(v) for k, v in variables.items()})
    proc = run(["sbatch", "--parsable", *options, *([str(script)] if script is not None else [])], cwd=cwd, env=env)
    assert proc.returncode == 0, proc.stderr
    _submitted.append(proc.stdout.strip().split(";")[0])
    return _submitted[-1]


def job_fields(job_id) -> dict:
    out = run(["scontrol", "show", "job", "-o", job_id]).stdout
    return dict(item.split("=", 1) for item in out.split() if "=" in item)


def wait_for(*job_ids, until=FINAL_STATES, timeout=JOB_TIMEOUT_S) -> dict:
    """``{job id: scontrol fields}`` once every job is in one of ``until``; cancels them on the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        fields = {job: job_fields(job) for job in job_ids}
        if all(f.get("JobState") in until or f.get("Reason") == "DependencyNeverSatisfied" for f in fields.values()):
            return fields
        if time.monotonic() > deadline:
            run(["scancel", *job_ids])
            pytest.fail(f"jobs {job_ids} not done within {timeout}s: "
                        f"{ {job: f.get('JobState') for job, f in fields.items()} }")
        time.sleep(0.5)


def completion_lines(*job_ids) -> tuple[list[str], dict]:
    """What ``sacct -c`` says of the jobs, from the completion log (a requeued job has a line per
    start): its lines, and each job's last ``[state, exit code]``."""
    deadline = time.monotonic() + 20
    while True:  # the log is written as each job ends
        out = run(["sacct", "-c", "-j", ",".join(job_ids), "--format=JobID,JobName%18,State,ExitCode,Elapsed"]).stdout
        lines = out.splitlines()
        last = {line.split()[0]: line.split()[2:4] for line in lines[2:] if line.split()}
        if all(last.get(job, [None])[0] in FINAL_STATES for job in job_ids):
            return lines, last
        assert time.monotonic() < deadline, out
        time.sleep(0.5)


def output(cwd, name, job_id) -> str:
    return (Path(cwd) / f"{name}-{job_id}.out").read_text()


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    path = tmp_path_factory.mktemp("graph") / "g.npz"
    proc = run([sys.executable, "-m", "hpcgnn.generate", "rmat", "--nodes", "2000", "--edges", "20000",
                "--feat-dim", "16", "--classes", "4", "--seed", "0", "--out", str(path)], timeout=120)
    assert proc.returncode == 0, proc.stderr
    return path


@pytest.mark.parametrize("mpi_default", ["none", "pmi2", "pmix"])
def test_partition_then_train_under_each_mpi_default(slurm, graph, tmp_path, mpi_default):
    start_cluster(mpi_default)
    part = sbatch(tmp_path, JOBS / "partition.sbatch", "--ntasks=2", INPUT=graph, OUT="parts", PARTS=2)
    train = sbatch(tmp_path, JOBS / "train.sbatch", "--ntasks=2", f"--dependency=afterok:{part}",
                   DATA="parts", CKPT="ckpt", TRAIN_ARGS=TRAIN_ARGS)
    fields = wait_for(part, train)
    lines, last = completion_lines(part, train)
    part_log, train_log = output(tmp_path, "hpcgnn-partition", part), output(tmp_path, "hpcgnn-train", train)
    print(f"\nMpiDefault={mpi_default}\n" + "\n".join(lines) + "\n" + train_log.strip().splitlines()[-1])
    for job in (part, train):
        assert (fields[job]["JobState"], fields[job]["ExitCode"]) == ("COMPLETED", "0:0"), (part_log, train_log)
    assert last == {part: ["COMPLETED", "0:0"], train: ["COMPLETED", "0:0"]}, lines
    for log in (part_log, train_log):
        assert "hpcgnn job: 2 ranks, launched with: srun --mpi=pmi2 -n 2" in log, log
    assert "wrote " in part_log and "verify: OK" in part_log, part_log
    assert "2 ranks, sage 2x16" in train_log and "nothing to resume in ckpt: starting at epoch 1" in train_log
    final = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()][-1]
    assert final["epochs"] == 2 and 0 <= final["test_acc"] <= 1, final
    assert (tmp_path / "ckpt" / "latest").read_text().strip() == "epoch-0002.pt"
    if mpi_default == "none":
        copies_of_one_rank_are_refused(tmp_path, graph)


def copies_of_one_rank_are_refused(cwd, graph):
    """Plain srun under MpiDefault=none starts two one-rank copies: both stop, nothing is written."""
    command = f"srun -n 2 {sys.executable} -m hpcgnn.partition {graph} --parts 2 --out copies"
    job = sbatch(cwd, None, "--ntasks=2", "--output=copies-%j.out", f"--wrap={command}")
    fields = wait_for(job)
    log = output(cwd, "copies", job)
    assert fields[job]["JobState"] == "FAILED" and fields[job]["ExitCode"] == "2:0", log
    errors = [line for line in log.splitlines() if line.startswith("hpcgnn partition: error:")]
    assert len(errors) == 2, log
    for line in errors:
        assert "field 'SLURM_STEP_NUM_TASKS': 2 tasks were started but MPI's world has 1 rank" in line, line
        assert "srun --mpi=pmi2" in line, line
    assert not (Path(cwd) / "copies").exists() and not list(Path(cwd).glob(".copies*"))


def test_a_training_job_near_its_time_limit_requeues_itself_and_resumes(slurm, graph, tmp_path):
    """SLURM's warning before the time limit (USR1 to the batch shell, sent here at once) makes
    the job requeue itself; started again on one task instead of two (as after losing a node),
    the same command resumes from the latest checkpoint on one rank holding both parts."""
    start_cluster(_cluster["mpi_default"] or "pmi2")
    part = sbatch(tmp_path, JOBS / "partition.sbatch", "--ntasks=2", INPUT=graph, OUT="parts", PARTS=2)
    wait_for(part)
    epochs = 40
    train = sbatch(tmp_path, JOBS / "train.sbatch", "--ntasks=2", DATA="parts", CKPT="ckpt",
                   TRAIN_ARGS=f"--epochs {epochs} --hidden 16 --fanouts 5,5 --batch-size 20 --eval-every 0 "
                              "--checkpoint-every 1 --no-progress --metrics-file run.jsonl")
    latest = tmp_path / "ckpt" / "latest"
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while not latest.exists():
        assert time.monotonic() < deadline and job_fields(train).get("JobState") in ("PENDING", "RUNNING"), \
            job_fields(train)
        time.sleep(0.2)
    assert run(["scancel", "--batch", "--signal=USR1", train]).returncode == 0
    # a requeued job waits before it is eligible again (SLURM holds it ~2 minutes): start it now
    wait_for(train, until={"PENDING"} | FINAL_STATES)
    assert run(["scontrol", "update", f"JobId={train}", "NumTasks=1"]).returncode == 0
    run(["scontrol", "update", f"JobId={train}", "StartTime=now"])
    fields = wait_for(train)[train]
    log = output(tmp_path, "hpcgnn-train", train)
    lines, last = completion_lines(train)
    print("\n" + "\n".join(lines) + "\n" + log.strip().splitlines()[-1])
    assert last[train] == ["COMPLETED", "0:0"], lines
    assert (fields["JobState"], fields["ExitCode"], fields["Restarts"]) == ("COMPLETED", "0:0", "1"), log
    assert "hpcgnn job: time limit near: requeueing job" in log, log
    resumed = [line for line in log.splitlines() if line.startswith("resumed from epoch ")]
    assert len(resumed) == 1 and 1 <= int(resumed[0].split()[3]) < epochs, log
    assert resumed[0].endswith(", 2 ranks -> 1 ranks)"), resumed
    assert latest.read_text().strip() == f"epoch-{epochs:04d}.pt"
    final = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()][-1]
    assert final["epochs"] == epochs, final


def test_a_copy_of_a_job_script_finds_the_project_or_says_how(slurm, graph, tmp_path):
    """Submitted from elsewhere, a copy of the script finds the project through the interpreter
    on PATH (an activated virtualenv); with no hint at all it fails with one line."""
    start_cluster(_cluster["mpi_default"] or "none")
    elsewhere = tmp_path / "scripts"
    elsewhere.mkdir()
    script = shutil.copy(JOBS / "partition.sbatch", elsewhere / "partition.sbatch")
    venv_path = f"{Path(sys.executable).parent}:/usr/bin:/bin"
    found = sbatch(tmp_path, script, "--ntasks=1", INPUT=graph, OUT="parts", PARTS=1, PATH=venv_path)
    lost = sbatch(tmp_path, script, "--ntasks=1", INPUT=graph, OUT="lost", PARTS=1, PATH="/usr/bin:/bin")
    fields = wait_for(found, lost)
    assert fields[found]["JobState"] == "COMPLETED", output(tmp_path, "hpcgnn-partition", found)
    log = output(tmp_path, "hpcgnn-partition", lost)
    assert (fields[lost]["JobState"], fields[lost]["ExitCode"]) == ("FAILED", "2:0"), log
    assert log.startswith("hpcgnn job: error: cannot find the hpcgnn project (tried: ") and \
        log.rstrip().endswith("set HPCGNN_HOME"), log
    assert not (tmp_path / "lost").exists()


def test_both_job_scripts_find_the_project_the_same_way():
    def finder(name):
        text = (JOBS / name).read_text()
        return text[text.index("find_project() {"):text.index('source "$HPCGNN_HOME/jobs/launch.sh"')]

    assert finder("partition.sbatch") == finder("train.sbatch")


def test_outside_slurm_the_training_job_runs_one_rank_per_part(graph, tmp_path):
    """The same scripts as plain bash (make demo): ranks come from PARTS and from meta.json."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PMI_"))}
    env.update(OMP_NUM_THREADS="1", INPUT=str(graph), OUT="parts", PARTS="3")
    proc = run(["bash", str(JOBS / "partition.sbatch")], timeout=300, cwd=tmp_path, env=env)
    assert proc.returncode == 0 and "verify: OK" in proc.stdout, proc.stderr
    assert "hpcgnn job: 3 ranks, launched with: " in proc.stderr
    env.update(DATA="parts", TRAIN_ARGS="--epochs 1 --hidden 8 --fanouts 3 --no-progress")
    proc = run(["bash", str(JOBS / "train.sbatch")], timeout=300, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "hpcgnn job: 3 ranks, launched with: " in proc.stderr and ", 3 ranks, " in proc.stdout, proc.stdout
