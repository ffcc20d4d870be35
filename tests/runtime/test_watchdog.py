"""The watchdog ends a job whose rank stopped (SIGSTOP) or got stuck outside MPI, naming it."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tests.conftest import kill_tree, mpiexec_path, rank_process

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_job(nranks, args, timeout, on_start=None):
    proc = subprocess.Popen([mpiexec_path(), "-n", str(nranks), sys.executable, *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, OMP_NUM_THREADS="1"), start_new_session=True)
    try:
        if on_start is not None:
            on_start(proc)
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc)
        out, err = proc.communicate()
        pytest.fail(f"hang: the job did not end within {timeout}s\n{err[-3000:]}")
    finally:
        kill_tree(proc)
    return proc.returncode, out, err


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    base = tmp_path_factory.mktemp("wd")
    graph = str(base / "g.npz")
    subprocess.run([sys.executable, "-m", "hpcgnn.generate", "rmat", "--nodes", "3000", "--edges", "30000",
                    "--out", graph], check=True, cwd=ROOT, capture_output=True)
    data = {}
    for parts in (2, 3):
        data[parts] = str(base / f"d{parts}")
        subprocess.run([sys.executable, "-m", "hpcgnn.partition", graph, "--parts", str(parts), "--out", data[parts]],
                       check=True, cwd=ROOT, capture_output=True)
    return data


@pytest.mark.parametrize("nranks", [3])
def test_a_stopped_rank_ends_the_job_naming_it(nranks, dataset, tmp_path):
    metrics = tmp_path / "m.jsonl"
    stopped = nranks - 1

    def stop_a_rank_mid_training(proc):
        deadline = time.monotonic() + 120
        while not (metrics.exists() and len(metrics.read_text().splitlines()) > 1) and time.monotonic() < deadline:
            time.sleep(0.1)  # the header and one epoch written: every rank is in the training loop
        rank_process(proc, stopped).send_signal(signal.SIGSTOP)

    t0 = time.monotonic()
    code, out, err = run_job(nranks, ["-m", "hpcgnn.train", "--data", dataset[nranks], "--epochs", "100000",
                                    "--hidden", "8", "--fanouts", "3,3", "--batch-size", "20", "--eval-every", "0",
                                    "--no-progress", "--metrics-file", str(metrics), "--watchdog-s", "3"],
                           timeout=150, on_start=stop_a_rank_mid_training)
    assert code != 0
    lines = [line for line in err.splitlines() if "watchdog:" in line]
    assert len(lines) == 1, (code, out[-3000:], err)
    assert f"rank {stopped} did not answer" in lines[0], lines[0]
    assert "rank 0" in lines[0] or "ranks 0" in lines[0], lines[0]
    assert time.monotonic() - t0 < 140
    assert json.loads(metrics.read_text().splitlines()[1])["epoch"] == 1


MODES = {"allreduce": [], "staleness": ["--staleness", "2"], "local-sgd": ["--average-every", "4"],
         "async": ["--sync", "async"], "step-balance": ["--step-balance", "speed"]}


@pytest.mark.parametrize("mode", list(MODES))
def test_a_rank_killed_mid_epoch_ends_the_job_in_every_exchange_mode(mode, dataset, tmp_path):
    metrics = tmp_path / "m.jsonl"

    def kill_a_rank_mid_epoch(proc):
        deadline = time.monotonic() + 120
        while not (metrics.exists() and len(metrics.read_text().splitlines()) > 1) and time.monotonic() < deadline:
            time.sleep(0.1)  # the header and one epoch written: every rank is in the training loop
        time.sleep(0.2)  # into the next epoch's steps
        rank_process(proc, 1).send_signal(signal.SIGKILL)

    t0 = time.monotonic()
    code, out, err = run_job(2, ["-m", "hpcgnn.train", "--data", dataset[2], "--epochs", "100000", "--hidden", "8",
                                 "--fanouts", "3,3", "--batch-size", "20", "--eval-every", "0", "--no-progress",
                                 "--metrics-file", str(metrics), "--watchdog-s", "5", *MODES[mode]],
                           timeout=150, on_start=kill_a_rank_mid_epoch)
    assert code != 0, (out[-2000:], err[-2000:])
    assert time.monotonic() - t0 < 140


def test_a_stopped_rank_in_asynchronous_training_is_named_at_the_epochs_end(dataset, tmp_path):
    # the other rank runs on through its steps (no barrier between them) and waits at the epoch's end
    metrics = tmp_path / "m.jsonl"

    def stop_a_rank_mid_training(proc):
        deadline = time.monotonic() + 120
        while not (metrics.exists() and len(metrics.read_text().splitlines()) > 1) and time.monotonic() < deadline:
            time.sleep(0.1)
        rank_process(proc, 1).send_signal(signal.SIGSTOP)

    code, out, err = run_job(2, ["-m", "hpcgnn.train", "--data", dataset[2], "--epochs", "100000", "--hidden", "8",
                                 "--fanouts", "3,3", "--batch-size", "20", "--eval-every", "0", "--no-progress",
                                 "--metrics-file", str(metrics), "--watchdog-s", "3", "--sync", "async"],
                           timeout=150, on_start=stop_a_rank_mid_training)
    assert code != 0
    lines = [line for line in err.splitlines() if "watchdog:" in line]
    assert len(lines) == 1 and "rank 1 did not answer" in lines[0], (out[-2000:], err[-3000:])


STUCK = textwrap.dedent("""
    import sys, time
    from hpcgnn.runtime.comm import world
    from hpcgnn.runtime.watchdog import Watchdog, beat, waiting_in

    comm = world()
    if comm.rank == 0 and len(sys.argv) > 2:  # the reporting rank is slow to report
        fire = Watchdog._fire
        Watchdog._fire = lambda self, answers: (time.sleep(float(sys.argv[2])), fire(self, answers))
    watchdog = Watchdog(comm, float(sys.argv[1]), "stuck-test")
    for step in range(3):
        beat(f"step {step}")
        comm.Barrier()
    if comm.rank == 1:
        beat("reading a file")
        time.sleep(120)  # stuck outside MPI, still alive: its watchdog thread answers
    waiting_in("the final barrier")
    comm.Barrier()
    watchdog.close()
""")


def watchdog_line(tmp_path, nranks, source, *args):
    """Run ``source`` on ``nranks`` ranks; the job must fail with exactly one watchdog line."""
    script = tmp_path / "job.py"
    script.write_text(source)
    code, out, err = run_job(nranks, [str(script), *args], timeout=90)
    assert code != 0
    lines = [line for line in err.splitlines() if "watchdog:" in line]
    assert len(lines) == 1, (code, out[-3000:], err)
    return lines[0]


def test_a_rank_stuck_outside_mpi_is_named_with_where_it_is(tmp_path):
    t0 = time.monotonic()
    line = watchdog_line(tmp_path, 3, STUCK, "2")
    assert "rank 1 at reading a file" in line, line
    assert "ranks 0,2 at the final barrier" in line, line
    assert "did not answer" not in line
    assert time.monotonic() - t0 < 60


def test_the_report_is_not_lost_when_the_reporting_rank_is_slow(tmp_path):
    # the other ranks fire as well; none may end the job before the lowest live rank has printed
    line = watchdog_line(tmp_path, 3, STUCK, "2", "5")
    assert "rank 1 at reading a file" in line, line


BUSY = textwrap.dedent("""
    import sys, time
    from hpcgnn.runtime.comm import world
    from hpcgnn.runtime.watchdog import Watchdog, beat

    comm = world()
    watchdog = Watchdog(comm, 2.0, "busy-test")
    comm.Barrier()
    if comm.rank == 1:
        beat("reading a file")
        time.sleep(120)
    for batch in range(600):  # local work that keeps beating, and never meets rank 1
        beat(f"local batch {batch}")
        time.sleep(0.1)
    comm.Barrier()
    watchdog.close()
""")


def test_a_rank_that_still_progresses_reports_another_ranks_stall(tmp_path):
    t0 = time.monotonic()
    line = watchdog_line(tmp_path, 2, BUSY)
    assert "rank 1 at reading a file" in line, line
    assert "rank 0 at local batch" in line, line
    assert time.monotonic() - t0 < 45


def test_no_watchdog_message_when_every_rank_progresses(tmp_path):
    script = tmp_path / "fine.py"
    script.write_text(STUCK.replace("time.sleep(120)", "time.sleep(0.5)"))
    code, _, err = run_job(3, [str(script), "2"], timeout=90)
    assert code == 0, err
    assert "watchdog" not in err


STOPPED_AT_START = textwrap.dedent("""
    import os, signal, sys
    from hpcgnn.runtime.launch import start_world

    if os.environ.get("PMI_RANK") == "1":
        os.kill(os.getpid(), signal.SIGSTOP)  # stopped before MPI_Init: rank 0 waits inside it
    comm = start_world(watchdog_s=float(sys.argv[1]), prog="init-test")
    print("MPI_Init returned", flush=True)
""")


def test_a_rank_stopped_before_mpi_init_ends_the_job(tmp_path):
    # MPI_Init waits holding the interpreter lock: only the separate timer process can end it
    line = watchdog_line(tmp_path, 2, STOPPED_AT_START, "2")
    assert line.startswith("init-test: error: watchdog: MPI_Init did not return within 2s"), line
    assert "rank 0" in line, line


PHASE = textwrap.dedent("""
    import sys, time
    from hpcgnn.runtime.launch import start_world
    from hpcgnn.runtime.watchdog import beat, end_phase

    comm = start_world(watchdog_s=1.0, prog="phase-test")
    if comm.rank == 0:
        beat("partitioning")
        time.sleep(4)  # long work of one rank (METIS): the other waits, answering, in a barrier
    comm.Barrier()
    end_phase()
    print("done", comm.rank, flush=True)
""")


def test_the_liveness_watchdog_lets_ranks_wait_on_one_ranks_long_work(tmp_path):
    script = tmp_path / "phase.py"
    script.write_text(PHASE)
    code, out, err = run_job(2, [str(script)], timeout=90)
    assert code == 0, err
    assert "watchdog" not in err
    assert out.count("done") == 2, out  # both ranks got through (mpiexec may join their lines)


def test_the_liveness_watchdog_names_a_stopped_rank(tmp_path):
    source = PHASE.replace("time.sleep(4)", "import os, signal; os.kill(os.getpid(), signal.SIGSTOP)")
    source = source.replace("if comm.rank == 0:", "if comm.rank == 1:")
    line = watchdog_line(tmp_path, 2, source)
    assert line.startswith("phase-test: error: watchdog: a rank stopped answering for 1s"), line
    assert "rank 1 did not answer" in line and "rank 0 at" in line, line


CAUGHT = textwrap.dedent("""
    import time
    from hpcgnn.runtime.comm import world
    from hpcgnn.runtime.watchdog import Watchdog, beat

    comm = world()
    try:
        with Watchdog(comm, 1.0, "caught-test"):
            beat("training")
            raise ValueError("a refused input, caught by the program")
    except ValueError:
        pass
    time.sleep(4)  # the program goes on without beating: a stale clock would end it here
    print("still running", flush=True)
""")


def test_an_error_leaving_the_watchdog_stops_its_clock(tmp_path):
    script = tmp_path / "caught.py"
    script.write_text(CAUGHT)
    code, out, err = run_job(1, [str(script)], timeout=60)
    assert code == 0 and "still running" in out, err
    assert "watchdog" not in err
