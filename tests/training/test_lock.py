"""The checkpoint directory's lock: a second run is refused naming the holder, --force takes
over, a stale lock (dead pid, requeued SLURM job, expired lease) is taken over."""
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from hpcgnn.runtime.errors import InputError
from hpcgnn.training import lock as lock_module
from hpcgnn.training.lock import LOCK_NAME, DirectoryLock, checkpoint_lock


@pytest.fixture(autouse=True)
def outside_slurm(monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)


def write_lock(directory, age_s=0.0, **holder):
    """A lock as another run would have left it, last refreshed ``age_s`` seconds ago."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, LOCK_NAME)
    record = {"host": "elsewhere.example", "pid": 4242, "started": time.time() - age_s,
              "started_at": "2030-01-01T00:00:00+0000", "slurm_job_id": None, "token": "theirs"}
    record.update(holder)
    with open(path, "w") as fh:
        json.dump(record, fh)
    then = time.time() - age_s
    os.utime(path, (then, then))
    return path


def dead_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()  # reaped: the pid names no process now
    return proc.pid


def test_the_lock_records_its_holder_and_refuses_a_second_run(tmp_path, monkeypatch):
    directory = str(tmp_path / "ck")
    first = DirectoryLock(directory)
    with open(first.path) as fh:
        record = json.load(fh)
    assert (record["host"], record["pid"], record["slurm_job_id"]) == (socket.gethostname(), os.getpid(), None)
    assert abs(record["started"] - time.time()) < 60
    with pytest.raises(InputError) as exc:
        DirectoryLock(directory)
    message = str(exc.value)
    assert "\n" not in message and first.path in message, message
    assert f"host {socket.gethostname()} pid {os.getpid()}" in message and "--force" in message, message
    first.release()
    assert not os.path.exists(first.path)
    monkeypatch.setenv("SLURM_JOB_ID", "1234")
    second = DirectoryLock(directory)
    with open(second.path) as fh:
        assert json.load(fh)["slurm_job_id"] == "1234"
    second.release()
    assert os.listdir(directory) == []  # no temporary files left behind


def test_only_one_of_many_simultaneous_runs_takes_the_lock(tmp_path):
    directory = str(tmp_path / "ck")
    outcomes = []
    start = threading.Barrier(8)

    def contend():
        start.wait()
        try:
            outcomes.append(DirectoryLock(directory))
        except InputError as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=contend) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [o for o in outcomes if isinstance(o, DirectoryLock)]
    assert len(winners) == 1 and len(outcomes) == 8
    assert winners[0].held()
    winners[0].release()
    assert os.listdir(directory) == []


def test_force_takes_over_and_the_previous_holder_leaves_the_new_lock(tmp_path, capsys):
    directory = str(tmp_path / "ck")
    first = DirectoryLock(directory)
    second = DirectoryLock(directory, force=True)
    assert "taking over" in capsys.readouterr().err
    assert second.held() and not first.held()
    first.release()  # must not remove the lock it lost
    assert second.held()
    second.release()
    assert not os.path.exists(second.path)


def test_stale_locks_are_taken_over_and_live_ones_are_not(tmp_path, monkeypatch, capsys):
    directory = str(tmp_path / "ck")
    here = socket.gethostname()
    cases = [  # (holder, age in s, taken over?, why)
        ({"host": here, "pid": dead_pid()}, 0, True, "gone from this host"),
        ({"host": here, "pid": os.getpid()}, 0, False, None),
        ({}, 0, False, None),  # another host, refreshed just now
        ({}, lock_module.LEASE_S - 60, False, None),
        ({}, lock_module.LEASE_S + 60, True, "not refreshed"),
        ({"host": here, "pid": os.getpid()}, lock_module.LEASE_S + 60, True, "not refreshed"),
    ]
    for holder, age, taken, why in cases:
        path = write_lock(directory, age, **holder)
        if taken:
            DirectoryLock(directory).release()
            assert why in capsys.readouterr().err
            assert not os.path.exists(path)
        else:
            with pytest.raises(InputError, match=f"pid {holder.get('pid', 4242)}"):
                DirectoryLock(directory)
    with open(os.path.join(directory, LOCK_NAME), "w") as fh:
        fh.write("not json")  # edited by hand: only its age can make it stale
    with pytest.raises(InputError, match="unknown holder"):
        DirectoryLock(directory)
    old = time.time() - lock_module.LEASE_S - 60
    os.utime(os.path.join(directory, LOCK_NAME), (old, old))
    DirectoryLock(directory).release()


def test_a_requeued_slurm_job_takes_over_its_own_lock(tmp_path, monkeypatch, capsys):
    from hpcgnn.runtime import lock as generic_lock

    monkeypatch.setattr(generic_lock, "REFRESH_S", 0.1)  # the requeued run watches the lease for 0.25 s
    directory = str(tmp_path / "ck")
    write_lock(directory, slurm_job_id="777")  # the job's earlier start, on another host, no longer refreshing
    monkeypatch.setenv("SLURM_JOB_ID", "778")
    with pytest.raises(InputError, match="SLURM job 777"):
        DirectoryLock(directory)
    monkeypatch.setenv("SLURM_JOB_ID", "777")
    taken = DirectoryLock(directory)
    assert taken.held()
    assert "SLURM job 777 and was not refreshed" in capsys.readouterr().err
    taken.release()
    write_lock(directory, slurm_job_id="777", host=socket.gethostname(), pid=dead_pid())  # requeued on this host
    DirectoryLock(directory).release()
    assert "is gone from this host" in capsys.readouterr().err


HOLDER = """
import sys, time
from hpcgnn.training.lock import DirectoryLock
lock = DirectoryLock(sys.argv[1])
print("held", flush=True)
sys.stdin.read()  # until the test closes stdin, or kills this process
lock.release()
"""


def test_a_live_holder_of_the_same_slurm_job_is_not_taken_over(tmp_path, monkeypatch, capsys):
    """Two runs in one allocation carry the same SLURM_JOB_ID: the second must not take the
    first's lock while the first runs, on this host (its pid) or on another (its lease)."""
    from hpcgnn.runtime import lock as generic_lock

    directory = str(tmp_path / "ck")
    monkeypatch.setenv("SLURM_JOB_ID", "777")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, directory], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=dict(os.environ, SLURM_JOB_ID="777"))
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(InputError) as exc:
            DirectoryLock(directory)
        assert f"pid {holder.pid}" in str(exc.value) and "SLURM job 777" in str(exc.value), str(exc.value)
    finally:
        holder.kill()
        holder.wait()
    DirectoryLock(directory).release()  # killed: now it is stale
    assert f"its pid {holder.pid} is gone from this host" in capsys.readouterr().err

    monkeypatch.setattr(generic_lock, "REFRESH_S", 0.1)
    path = write_lock(directory, slurm_job_id="777")  # a live step of the job on another host
    stop = threading.Event()

    def refresh():  # as its holder's lease thread does
        while not stop.wait(0.05):
            os.utime(path)

    refresher = threading.Thread(target=refresh)
    refresher.start()
    try:
        with pytest.raises(InputError, match="host elsewhere.example pid 4242"):
            DirectoryLock(directory)
    finally:
        stop.set()
        refresher.join()
    assert os.path.exists(path)


def test_a_reused_pid_does_not_keep_a_lock(tmp_path, capsys):
    """The holder died and its pid now names another process (pids are reused; in a fresh
    container they start over): the process started after the lock was taken, so it is not the holder."""
    directory = str(tmp_path / "ck")
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        write_lock(directory, host=socket.gethostname(), pid=other.pid, started=time.time() - 30)
        DirectoryLock(directory).release()
        assert f"its pid {other.pid} now names a process started after the lock was taken" in capsys.readouterr().err
        write_lock(directory, host=socket.gethostname(), pid=other.pid, started=time.time())  # its own lock
        with pytest.raises(InputError, match=f"pid {other.pid}"):
            DirectoryLock(directory)
    finally:
        other.kill()
        other.wait()


def test_the_holder_refreshes_its_lease(tmp_path, monkeypatch):
    from hpcgnn.runtime import lock as generic_lock  # the refresher reads the generic lock's interval

    monkeypatch.setattr(generic_lock, "REFRESH_S", 0.05)
    held = DirectoryLock(str(tmp_path / "ck"))
    long_ago = time.time() - 3600
    os.utime(held.path, (long_ago, long_ago))
    deadline = time.time() + 10
    while os.stat(held.path).st_mtime < long_ago + 60 and time.time() < deadline:
        time.sleep(0.02)
    assert os.stat(held.path).st_mtime > time.time() - 60
    held.release()
    assert not [t for t in threading.enumerate() if t.name == "hpcgnn-lock"]  # the refresher stopped


@pytest.mark.mpi(sizes=(1, 2, 4))
def test_every_rank_fails_together_on_a_locked_directory(nranks, comm, shared_tmp, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    directory = os.path.join(shared_tmp, "ck")
    if comm.rank == 0:
        write_lock(directory)
    comm.Barrier()
    with pytest.raises(InputError, match="host elsewhere.example pid 4242"):  # on every rank, none left waiting
        with checkpoint_lock(directory, comm):
            pytest.fail("entered a locked directory")
    comm.Barrier()
    with checkpoint_lock(directory, comm, force=True) as held:
        assert (held is not None) == (comm.rank == 0)
        if comm.rank == 0:
            assert held.held()
        comm.Barrier()
    comm.Barrier()
    assert not os.path.exists(os.path.join(directory, LOCK_NAME))
    comm.Barrier()
    with pytest.raises(RuntimeError, match="failed inside"):  # an error inside releases the lock
        with checkpoint_lock(directory, comm):
            raise RuntimeError("failed inside")
    comm.Barrier()
    assert not os.path.exists(os.path.join(directory, LOCK_NAME))
    with checkpoint_lock(None, comm) as nothing:  # a run that writes no checkpoints locks nothing
        assert nothing is None


def test_a_training_run_is_refused_on_a_locked_directory_unless_forced(tmp_path):
    from hpcgnn.prep.partition import partition_graph
    from hpcgnn.runtime.comm import world
    from hpcgnn.testing.graphs import clustered_graph
    from hpcgnn.training.config import parse_train_config
    from hpcgnn.training.loop import run

    partition_graph(clustered_graph(num_nodes=300), tmp_path / "d", 1, "metis")
    ck = str(tmp_path / "ck")
    path = write_lock(ck)
    argv = ["--data", str(tmp_path / "d"), "--checkpoint-dir", ck, "--checkpoint-every", "1", "--epochs", "1",
            "--hidden", "8", "--fanouts", "3,3", "--batch-size", "50", "--eval-every", "0", "--no-progress"]
    with pytest.raises(InputError, match="host elsewhere.example pid 4242"):
        run(parse_train_config(argv), world())
    assert sorted(os.listdir(ck)) == [LOCK_NAME]  # refused before writing anything
    run(parse_train_config([*argv, "--force"]), world())
    assert sorted(os.listdir(ck)) == ["best", "epoch-0001.pt", "latest"]  # and the lock it took is released
    assert not os.path.exists(path)


def test_a_second_training_run_on_the_same_directory_is_refused(tmp_path):
    """The issue end to end: a run is training into a directory, a second one is started on it."""
    from hpcgnn.prep.partition import partition_graph
    from hpcgnn.testing.graphs import clustered_graph

    partition_graph(clustered_graph(num_nodes=300), tmp_path / "d", 1, "metis")
    ck = tmp_path / "ck"
    lock_path = ck / LOCK_NAME
    env = {k: v for k, v in os.environ.items() if k != "SLURM_JOB_ID"}
    env["OMP_NUM_THREADS"] = "1"
    train = [sys.executable, "-m", "hpcgnn.train", "--data", str(tmp_path / "d"), "--checkpoint-dir", str(ck),
             "--checkpoint-every", "1", "--hidden", "8", "--fanouts", "3,3", "--batch-size", "50", "--eval-every", "0",
             "--no-progress"]
    first = subprocess.Popen([*train, "--epochs", "100000"], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while not (lock_path.exists() or (ck / "latest").exists()) and first.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        assert first.poll() is None, first.stderr.read()
        assert lock_path.exists(), "a run writing checkpoints holds no lock"
        assert json.loads(lock_path.read_text())["pid"] == first.pid
        second = subprocess.run([*train, "--epochs", "1"], env=env, capture_output=True, text=True, timeout=120)
        assert second.returncode == 2 and "Traceback" not in second.stderr, second.stderr
        assert second.stderr.count("\n") == 1, second.stderr
        assert str(lock_path) in second.stderr and f"host {socket.gethostname()} pid {first.pid}" in second.stderr
    finally:
        first.kill()  # SIGKILL: no chance to remove its lock
        first.wait()
    assert json.loads(lock_path.read_text())["pid"] == first.pid
    third = subprocess.run([*train, "--epochs", "1"], env=env, capture_output=True, text=True, timeout=120)
    assert third.returncode == 0, third.stderr
    assert "taking over" in third.stderr and f"pid {first.pid} is gone" in third.stderr, third.stderr
    assert not lock_path.exists()
