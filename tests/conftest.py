"""Test helpers, including the ``mpi`` marker.

``@pytest.mark.mpi(sizes=(1, 2, 4))`` parametrises a test over ``nranks``; the test process
then re-runs that one test under ``mpiexec -n nranks`` with a timeout, so a deadlock fails the
test instead of hanging the suite. Inside the ranks the ``comm`` fixture is MPI.COMM_WORLD and
``shared_tmp`` is one directory seen by every rank. A failing rank aborts the whole job at
once rather than leaving the others waiting in a collective.

``@pytest.mark.mpi(sizes=(2,), machines=2)`` runs the ranks on that many emulated machines
(``../shared/tools/netns_mpirun.sh``: separate network, IPC and mount namespaces, so MPI talks
TCP between them, as across the nodes of a cluster). That needs root and the tool; without
them the test is skipped, saying why.

Every rank writes its outcome (its rank, the world size it saw, passed / failed / skipped) to a
results directory; the parent passes the test only when all ``nranks`` ranks of a world of that
size report "passed". A rank that leaves early with exit 0, a test skipped on some ranks, or a
world of the wrong size fails the test; a test skipped on every rank is reported skipped.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

CHILD_ENV = "HPCGNN_MPI_CHILD"
SHARED_ENV = "HPCGNN_TEST_DIR"
RESULTS_ENV = "HPCGNN_TEST_RESULTS"
# generous: 4 ranks oversubscribed on a loaded 2-core machine are slow, and only a real hang
# should reach it
DEFAULT_TIMEOUT = 300
NETNS_TOOL = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                          "shared", "tools", "netns_mpirun.sh")


def kill_tree(proc):
    """SIGKILL a launched job: the launcher and every process under it (MPICH starts each rank
    in a session of its own, so killing the launcher's process group misses them)."""
    import psutil

    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    for victim in [*children, proc]:
        try:
            victim.kill()
        except (psutil.NoSuchProcess, ProcessLookupError):
            pass


def finish(proc, timeout=120):
    """``(exit status, stdout, stderr)`` of a launched job; a job still running after ``timeout``
    seconds is killed (every process under it) and the test fails as a hang."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc)
        out, err = proc.communicate()
        pytest.fail(f"hang: the job did not end within {timeout}s\n{err[-3000:]}")
    return proc.returncode, out, err


def rank_process(proc, rank, timeout=60):
    """The psutil process of MPI rank ``rank`` under the launched job ``proc`` (MPICH sets
    PMI_RANK), waiting up to ``timeout`` seconds for it to start."""

    import psutil

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for child in psutil.Process(proc.pid).children(recursive=True):
            try:
                if "python" in child.name() and child.environ().get("PMI_RANK") == str(rank):
                    return child
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        time.sleep(0.1)
    pytest.fail(f"rank {rank} never started")


def in_mpi_child():
    return os.environ.get(CHILD_ENV) == "1"


if in_mpi_child() and os.environ.get(SHARED_ENV):
    # Each rank is a pytest session of its own. In one temp root they would race on pytest's
    # "pytest-current" link and on cleaning old numbered directories (one rank unlinking what
    # another just removed fails the test), so each rank gets a root inside the shared directory.
    os.environ["PYTEST_DEBUG_TEMPROOT"] = tempfile.mkdtemp(prefix="rank-tmp-", dir=os.environ[SHARED_ENV])


def mpiexec_path():
    local = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return local if os.path.exists(local) else shutil.which("mpiexec")


def pytest_generate_tests(metafunc):
    marker = metafunc.definition.get_closest_marker("mpi")
    if marker is not None and "nranks" in metafunc.fixturenames:
        sizes = marker.kwargs.get("sizes", marker.args[0] if marker.args else (1, 2, 4))
        metafunc.parametrize("nranks", sizes, ids=[f"np{n}" for n in sizes])


@pytest.fixture
def shared_tmp(tmp_path):
    """A directory shared by every rank of an MPI test (the parent's tmp_path)."""
    return os.environ.get(SHARED_ENV, str(tmp_path)) if in_mpi_child() else str(tmp_path)


@pytest.fixture
def comm():
    from mpi4py import MPI

    return MPI.COMM_WORLD


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    marker = pyfuncitem.get_closest_marker("mpi")
    if marker is None or in_mpi_child():
        return None
    nranks = pyfuncitem.funcargs["nranks"]
    exe = mpiexec_path()
    if exe is None:
        pytest.fail("mpiexec not found (run 'make install')")
    shared = pyfuncitem.funcargs.get("shared_tmp") or pyfuncitem.funcargs.get("tmp_path")
    if shared is None:  # a test without a temp directory: one of its own, removed after the run
        owned = tempfile.mkdtemp(prefix="hpcgnn-mpi-test-")
        try:
            return run_under_mpiexec(pyfuncitem, marker, exe, nranks, owned)
        finally:
            shutil.rmtree(owned, ignore_errors=True)
    return run_under_mpiexec(pyfuncitem, marker, exe, nranks, str(shared))


def run_under_mpiexec(pyfuncitem, marker, exe, nranks, shared):
    """Run one test on ``nranks`` ranks, every rank's pytest session writing its outcome under ``shared``."""
    timeout = marker.kwargs.get("timeout", DEFAULT_TIMEOUT)
    results = tempfile.mkdtemp(prefix="mpi-results-", dir=shared)
    env = dict(os.environ, **{CHILD_ENV: "1", SHARED_ENV: shared, RESULTS_ENV: results, "OMP_NUM_THREADS": "1"})
    program = [sys.executable, "-m", "pytest", "-q", "-x", "--no-header", "-p", "no:cacheprovider", pyfuncitem.nodeid]
    machines = marker.kwargs.get("machines", 0)
    if machines:
        if os.geteuid() != 0 or not os.path.exists(NETNS_TOOL):
            pytest.skip(f"emulated machines need root and {NETNS_TOOL}")
        env.update(MPIEXEC=exe, PPN=str(-(-nranks // machines)))
        cmd = ["bash", NETNS_TOOL, str(machines), "-n", str(nranks), *program]
    else:
        cmd = [exe, "-n", str(nranks), *program]
    proc = subprocess.Popen(cmd, cwd=str(pyfuncitem.config.rootpath), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"deadlock or hang: {nranks} ranks did not finish within {timeout}s\n{out[-4000:]}")
    if proc.returncode != 0:
        pytest.fail(f"failed under mpiexec -n {nranks} (exit {proc.returncode}):\n{out[-6000:]}")
    check_rank_results(results, nranks, out)
    return True


def check_rank_results(results, nranks, out):
    """Pass only if every one of ``nranks`` ranks, in a world of that size, reported "passed"."""
    reports = {}
    for name in os.listdir(results):
        with open(os.path.join(results, name)) as fh:
            report = json.load(fh)
        reports[report["rank"]] = report
    wrong_size = sorted({r["size"] for r in reports.values()} - {nranks})
    if wrong_size:
        pytest.fail(f"ran in a world of size {wrong_size}, not {nranks}:\n{out[-3000:]}")
    missing = sorted(set(range(nranks)) - set(reports))
    if missing:
        pytest.fail(f"ranks {missing} of {nranks} never reported an outcome (left early?):\n{out[-3000:]}")
    outcomes = {r["outcome"] for r in reports.values()}
    if outcomes == {"skipped"}:
        pytest.skip(reports[0]["reason"])
    if outcomes != {"passed"}:
        by = {o: sorted(r["rank"] for r in reports.values() if r["outcome"] == o) for o in outcomes}
        pytest.fail(f"ranks did not all pass: {by}:\n{out[-3000:]}")


_RANK_OUTCOMES = {}


def record_outcome(item, report):
    """In an MPI child: note the worst outcome of the test's phases; write it after teardown."""
    worst = _RANK_OUTCOMES.get(item.nodeid, ("passed", ""))
    if report.failed:
        worst = ("failed", "")
    elif report.skipped and worst[0] == "passed":
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        worst = ("skipped", reason)
    _RANK_OUTCOMES[item.nodeid] = worst
    if report.when == "teardown" and os.environ.get(RESULTS_ENV):
        from mpi4py import MPI

        world = MPI.COMM_WORLD
        path = os.path.join(os.environ[RESULTS_ENV], f"rank-{world.rank}.json")
        with open(path, "w") as fh:
            json.dump({"rank": world.rank, "size": world.size, "outcome": worst[0], "reason": worst[1]}, fh)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if in_mpi_child() and item.get_closest_marker("mpi") is not None:
        record_outcome(item, report)
    if in_mpi_child() and report.failed:
        from mpi4py import MPI

        if MPI.COMM_WORLD.size > 1:
            print(f"[rank {MPI.COMM_WORLD.rank}] {report.nodeid} failed:\n{report.longreprtext}",
                  file=sys.stderr, flush=True)
            MPI.COMM_WORLD.Abort(1)
