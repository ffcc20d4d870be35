"""Every fault ends the whole job promptly with one line: unwritable or full outputs, signals.

Faults are injected without root: an unwritable directory is a path under a regular file, a
full disk is a small RLIMIT_FSIZE, and signals go to the job's process group as SLURM sends them
to every task.
"""
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from tests.conftest import finish, kill_tree, mpiexec_path

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def launch(nranks, *args, preexec_fn=None):
    cmd = [mpiexec_path(), "-n", str(nranks), sys.executable, *args] if nranks > 1 else [sys.executable, *args]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, OMP_NUM_THREADS="1"), start_new_session=True, preexec_fn=preexec_fn)


def ranks_of(proc, script):
    return [p for p in psutil.Process(proc.pid).children(recursive=True) if script in " ".join(p.cmdline())]


def error_lines(err, prog):
    return [line for line in err.splitlines() if line.startswith(f"{prog}: error:")]


def assert_one_line_error(code, err, prog, *words, nranks=1):
    """Exit 2, no traceback, one error line per rank at most (a rank that fails prints its own;
    ranks that fail together with it may say so), each naming ``words``."""
    assert code == 2, err
    assert "Traceback" not in err, err
    lines = error_lines(err, prog)
    assert 1 <= len(lines) <= nranks, err
    for line in lines:
        for word in words:
            assert word in line, line


@pytest.fixture(scope="module")
def graph_npz(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("graph") / "g.npz")
    subprocess.run([sys.executable, "-m", "hpcgnn.generate", "rmat", "--nodes", "3000", "--edges", "30000",
                    "--out", path], check=True, cwd=ROOT, capture_output=True)
    return path


def leftovers(directory):
    return [n for n in os.listdir(directory) if n.startswith(".") or ".tmp" in n or ".old-" in n]


@pytest.mark.parametrize("nranks", [1, 2])
def test_partition_into_an_unwritable_directory_is_one_line(nranks, graph_npz, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    code, _, err = finish(launch(nranks, "-m", "hpcgnn.partition", graph_npz, "--parts", "2",
                                 "--out", str(blocker / "out")))
    assert_one_line_error(code, err, "hpcgnn partition", str(blocker / "out"), nranks=nranks)


FULL_DISK = textwrap.dedent("""
    import resource, runpy, signal, sys
    from hpcgnn.runtime.comm import world

    world()  # MPI's own shared-memory files exist before the disk "fills"
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # the program itself must turn the signal into an error
    limit = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    sys.argv = ["hpcgnn.partition", *sys.argv[2:]]
    runpy.run_module("hpcgnn.partition", run_name="__main__")
""")


@pytest.mark.parametrize("nranks", [1, 2])
def test_partition_onto_a_full_disk_is_one_line_and_leaves_nothing(nranks, graph_npz, tmp_path):
    script = tmp_path / "full_disk.py"
    script.write_text(FULL_DISK)
    work = tmp_path / "work"
    work.mkdir()
    out = work / "out"
    code, _, err = finish(launch(nranks, str(script), str(64 * 1024), graph_npz, "--parts", "2", "--out", str(out)))
    assert_one_line_error(code, err, "hpcgnn partition", "File too large", nranks=nranks)
    assert not out.exists()
    assert leftovers(work) == []


@pytest.fixture(scope="module")
def dataset(graph_npz, tmp_path_factory):
    data = str(tmp_path_factory.mktemp("data") / "d")
    subprocess.run([sys.executable, "-m", "hpcgnn.partition", graph_npz, "--parts", "2", "--out", data],
                   check=True, cwd=ROOT, capture_output=True)
    return data


@pytest.mark.parametrize("flag", ["--metrics-file", "--checkpoint-dir"])
def test_train_with_an_unwritable_output_is_one_line(flag, dataset, tmp_path):
    data = dataset
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    target = str(blocker / ("m.jsonl" if flag == "--metrics-file" else "dir"))
    extra = ["--checkpoint-every", "1"] if flag == "--checkpoint-dir" else []
    code, _, err = finish(launch(2, "-m", "hpcgnn.train", "--data", str(data), "--epochs", "1", "--hidden", "8",
                                 "--fanouts", "3,3", "--no-progress", flag, target, *extra))
    assert_one_line_error(code, err, "hpcgnn train", str(blocker), nranks=2)


SIGNALLED = textwrap.dedent("""
    import os, sys, time
    from hpcgnn.runtime.abort import entry_point
    from hpcgnn.runtime.comm import world
    from hpcgnn.runtime.files import atomic_path, make_temp_dir

    @entry_point("sigtest")
    def main(argv=None):
        comm = world()
        out = sys.argv[1]
        make_temp_dir(os.path.join(out, f"dataset{comm.rank}"))
        with atomic_path(os.path.join(out, f"file{comm.rank}.h5")) as tmp:
            with open(tmp, "wb") as fh:
                fh.write(b"x" * 4096)
            open(os.path.join(sys.argv[2], f"ready-{comm.rank}"), "w").close()
            if comm.rank == 0 and comm.size > 1:
                comm.Barrier()  # rank 0 waits inside MPI: the signal must still be acted on
            else:
                time.sleep(120)
        return 0

    sys.exit(main())
""")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=["SIGTERM", "SIGINT", "SIGHUP"])
@pytest.mark.parametrize("nranks", [1, 2])
def test_a_signal_removes_unfinished_outputs_and_ends_the_job(nranks, signum, tmp_path):
    script = tmp_path / "signalled.py"
    script.write_text(SIGNALLED)
    out, ready = tmp_path / "out", tmp_path / "ready"
    out.mkdir()
    ready.mkdir()
    proc = launch(nranks, str(script), str(out), str(ready))
    deadline = time.monotonic() + 60
    while len(os.listdir(ready)) < nranks and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)  # marker files, not stdout: mpiexec may join two ranks' lines into one
    if len(os.listdir(ready)) < nranks:
        kill_tree(proc)
        pytest.fail(f"the ranks did not get ready: {proc.communicate()[1][-2000:]}")
    assert len(leftovers(out)) == 2 * nranks  # a temp directory and a temp file per rank
    t0 = time.monotonic()
    targets = ranks_of(proc, str(script)) if nranks > 1 else [psutil.Process(proc.pid)]
    assert len(targets) == nranks
    for rank in targets:  # as SLURM signals every task of a cancelled or timed-out step
        rank.send_signal(signum)
    code, _, err = finish(proc, timeout=30)
    assert time.monotonic() - t0 < 10, err
    assert code != 0
    assert f"stopped by {signum.name}" in err, err
    assert os.listdir(out) == []


SHARED = textwrap.dedent("""
    import os, sys, time
    from hpcgnn.runtime.abort import entry_point
    from hpcgnn.runtime.comm import world
    from hpcgnn.runtime.files import make_temp_dir, track_temporary
    from hpcgnn.runtime.lock import FileLock, held_by_rank0

    @entry_point("sigtest")
    def main(argv=None):
        comm = world()
        out = sys.argv[1]
        lock = os.path.join(out, ".dataset.lock")
        with held_by_rank0(comm, lambda: FileLock(lock), out):
            # rank 0 makes the output's temporary directory; every rank writes into it, as the
            # partition writers do
            tmp = comm.bcast(make_temp_dir(os.path.join(out, "dataset")) if comm.rank == 0 else None, root=0)
            track_temporary(tmp)
            with open(os.path.join(tmp, f"part-{comm.rank}.h5"), "wb") as fh:
                fh.write(b"x" * (1 << 20))
            open(os.path.join(sys.argv[2], f"ready-{comm.rank}"), "w").close()
            time.sleep(120)
        return 0

    sys.exit(main())
""")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
@pytest.mark.parametrize("target", [0, 1], ids=["rank0", "rank1"])
def test_a_signal_to_one_rank_removes_the_jobs_shared_temporaries_and_lock(target, signum, tmp_path):
    """MPI_Abort kills the other ranks with SIGKILL: the signalled rank alone must remove the
    output directory every rank writes into, and the job's lock, whichever rank it is."""
    script = tmp_path / "shared.py"
    script.write_text(SHARED)
    out, ready = tmp_path / "out", tmp_path / "ready"
    out.mkdir()
    ready.mkdir()
    proc = launch(2, str(script), str(out), str(ready))
    deadline = time.monotonic() + 60
    while len(os.listdir(ready)) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    if len(os.listdir(ready)) < 2:
        kill_tree(proc)
        pytest.fail(f"the ranks did not get ready: {proc.communicate()[1][-2000:]}")
    assert sorted(n.split("-")[0] for n in leftovers(out)) == [".dataset.lock", ".dataset.tmp"]
    ranks = {int(p.environ()["PMI_RANK"]): p for p in ranks_of(proc, str(script))}
    ranks[target].send_signal(signum)
    code, _, err = finish(proc, timeout=60)
    assert code != 0
    assert f"stopped by {signum.name}" in err, err
    assert os.listdir(out) == [], err
