"""A partition under concurrent runs, stopped ranks and signals: a second run on the same
--out is refused while the first writes it, a stopped rank ends the job with the watchdog's
line, and a signal to any one rank leaves no temporaries and no lock behind.

The first run is held at a known point without timing: its input is a FIFO nobody writes to
yet (it has taken the output's lock and waits to read), or its second rank is stopped, so
that rank 0 waits inside MPI to send it its part.
"""
import glob
import os
import signal
import subprocess
import sys
import time

import pytest

from hpcgnn.prep.read import write_npz
from hpcgnn.testing.graphs import clustered_graph
from tests.conftest import finish, kill_tree, mpiexec_path, rank_process
from tests.prep.test_read_streams import assert_dataset_holds, big_edges

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = dict(os.environ, OMP_NUM_THREADS="1")


def partition(nranks, *args):
    cmd = [sys.executable, "-m", "hpcgnn.partition", *map(str, args)]
    if nranks > 1:
        cmd = [mpiexec_path(), "-n", str(nranks), *cmd]
    return subprocess.Popen(cmd, cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def wait_for(predicate, proc, what, timeout=120, skip_if_finished=False, poll_s=0.05):
    deadline = time.monotonic() + timeout
    while not predicate() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(poll_s)
    if not predicate():
        finished_cleanly = proc.poll() == 0
        kill_tree(proc)
        if finished_cleanly and skip_if_finished:
            # the write window is short: a loaded machine can let the whole job finish between polls
            pytest.skip(f"the job finished before {what} could be seen, so it could not be signalled mid-write")
        pytest.fail(f"never saw {what}: {proc.communicate()[1][-3000:]}")


def lock_of(out):
    return os.path.join(os.path.dirname(out), "." + os.path.basename(out) + ".lock")


def leftovers(directory):
    return sorted(n for n in os.listdir(directory) if n.startswith(".") or ".tmp" in n or ".old-" in n)


def feed(fifo, data):
    with open(fifo, "wb") as fh:
        fh.write(data)


def test_a_second_partition_into_the_same_output_is_refused_and_the_first_survives(tmp_path):
    src, dst, text = big_edges(count=3000, nodes=400, seed=7)
    fifo, plain, out = tmp_path / "first.txt", tmp_path / "second.txt", str(tmp_path / "out")
    os.mkfifo(fifo)
    plain.write_bytes(text)
    first = partition(1, fifo, "--parts", 2, "--out", out)
    try:
        wait_for(lambda: os.path.exists(lock_of(out)), first, "the first run's lock")
        for extra in ([], ["--force"]):  # --force replaces a finished dataset, never one being written
            code, _, err = finish(partition(1, plain, "--parts", 2, "--out", out, *extra))
            assert code == 2, err
            assert err.count("\n") == 1 and "Traceback" not in err, err
            assert lock_of(out) in err and "being written by another partition run" in err, err
            assert f"pid {first.pid}" in err, err
        feed(fifo, text)
        code, _, err = finish(first)
    finally:
        kill_tree(first)
    assert code == 0, err
    verified = subprocess.run([sys.executable, "-m", "hpcgnn.inspect", "--verify", out], cwd=ROOT, env=ENV,
                              capture_output=True, text=True, timeout=120)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert_dataset_holds(out, src, dst)  # the first run's edges, not the refused run's
    assert leftovers(tmp_path) == []  # the lock went with the run


def test_the_lock_of_a_killed_partition_is_taken_over(tmp_path):
    _, _, text = big_edges(count=300, nodes=50, seed=8)
    fifo, plain, out = tmp_path / "first.txt", tmp_path / "second.txt", str(tmp_path / "out")
    os.mkfifo(fifo)
    plain.write_bytes(text)
    first = partition(1, fifo, "--parts", 2, "--out", out)
    wait_for(lambda: os.path.exists(lock_of(out)), first, "the first run's lock")
    first.kill()  # SIGKILL: its lock stays, naming a pid that is gone
    first.communicate()
    code, _, err = finish(partition(1, plain, "--parts", 2, "--out", out))
    assert code == 0, err
    assert f"taking over the lock {lock_of(out)}" in err and f"pid {first.pid} is gone" in err, err
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("stopped", [0, 1])
def test_a_stopped_rank_ends_a_partition_with_the_watchdog_line(tmp_path, stopped):
    fifo, out = tmp_path / "never.txt", str(tmp_path / "out")
    os.mkfifo(fifo)  # rank 0 waits to read it; rank 1 waits for rank 0
    job = partition(2, fifo, "--parts", 2, "--out", out, "--watchdog-s", 2)
    try:
        wait_for(lambda: os.path.exists(lock_of(out)), job, "the job's lock")
        rank_process(job, stopped).send_signal(signal.SIGSTOP)
        code, _, err = finish(job)
    finally:
        kill_tree(job)
    assert code != 0
    lines = [line for line in err.splitlines() if "watchdog:" in line]
    assert len(lines) == 1, err
    assert lines[0].startswith("hpcgnn partition: error: watchdog: a rank stopped answering for 2s"), lines[0]
    assert f"rank {stopped} did not answer" in lines[0], lines[0]
    assert leftovers(tmp_path) == [], err  # the reporting rank removed the job's lock


@pytest.fixture(scope="module")
def medium_npz(tmp_path_factory):
    # parts large enough (25 MB each) that rank 0's send of part 1 waits for rank 1 to receive it and
    # the write takes over 0.1 s on a fast disk, many times the test's polling interval
    path = tmp_path_factory.mktemp("medium") / "g.npz"
    write_npz(clustered_graph(num_nodes=50_000, avg_degree=8, feat_dim=256), path)
    return path


@pytest.mark.parametrize("signum, stopped, target", [(signal.SIGTERM, 1, 1), (signal.SIGHUP, 1, 0),
                                                     (signal.SIGTERM, 0, 1)],
                         ids=["SIGTERM-rank1", "SIGHUP-rank0", "SIGTERM-rank1-while-rank0-stopped"])
def test_a_signal_to_one_rank_mid_write_leaves_no_temporaries(tmp_path, medium_npz, signum, stopped, target):
    out = str(tmp_path / "out")
    job = partition(2, medium_npz, "--parts", 2, "--out", out)
    try:
        temporary = os.path.join(glob.escape(str(tmp_path)), ".out.tmp-*")
        wait_for(lambda: glob.glob(temporary), job, "the temporary output directory", skip_if_finished=True)
        rank1 = rank_process(job, 1)
        # rank 0 writes part 0 first, so every rank has passed the collective that follows tracking
        # the temporary directory (under load the directory appears before that collective)
        wait_for(lambda: glob.glob(os.path.join(temporary, "*part-00000*")), job,
                 "rank 0's part file in the temporary directory", skip_if_finished=True, poll_s=0.005)
        if stopped == 1:
            # rank 0 is writing part 0 or waiting to send rank 1 its part (in MPI, where signals
            # are still acted on); the job cannot commit while rank 1 is stopped
            rank1.send_signal(signal.SIGSTOP)
        if stopped == 0:
            # rank 1 waits inside MPI for its part, writing nothing: only what it tracks goes
            rank_process(job, 0).send_signal(signal.SIGSTOP)
        rank_process(job, target).send_signal(signum)
        if target == stopped:
            rank1.send_signal(signal.SIGCONT)  # a stopped process acts on the signal once it runs
        code, _, err = finish(job)
    finally:
        kill_tree(job)
    assert code != 0
    assert f"stopped by {signal.Signals(signum).name}" in err, err
    if os.path.isdir(out) and not glob.glob(temporary):
        # a loaded machine can let the job commit between seeing part 0 and the stop: the signal then
        # came after the last write, and the output it left must be whole
        assert {"part-00000.h5", "part-00001.h5", "meta.json"} <= set(os.listdir(out)), os.listdir(out)
        pytest.skip("the job committed its output before the signal, so it was not signalled mid-write")
    assert sorted(os.listdir(tmp_path)) == [], (os.listdir(tmp_path), err)
