import os

import numpy as np
import pytest

from hpcgnn.runtime.comm import FORCE_RMA_ENV


def sharded_table(comm, row_shape=(3,), dtype=np.float32):
    """Rank r owns 4 + 3r rows; row g (global) holds g * 10 + column."""
    counts = np.array([4 + 3 * r for r in range(comm.size)])
    starts = np.concatenate([[0], np.cumsum(counts)])
    width = int(np.prod(row_shape))
    full = (np.arange(starts[-1])[:, None] * 10 + np.arange(width)).astype(dtype).reshape((-1, *row_shape))
    return counts, starts, full


def lookup(starts, gids):
    owners = np.searchsorted(starts, gids, side="right") - 1
    return owners, gids - starts[owners]


def id_cases(comm, starts, rng):
    mine = np.arange(starts[comm.rank], starts[comm.rank + 1])
    others = np.setdiff1d(np.arange(starts[-1]), mine)
    yield "random", rng.integers(0, starts[-1], 200)
    yield "duplicates", np.repeat(rng.integers(0, starts[-1], 5), 7)
    yield "empty", np.zeros(0, dtype=np.int64)
    yield "all-local", rng.permutation(mine)
    if others.size:
        yield "all-remote", rng.choice(others, 50)
    yield "reversed", np.arange(starts[-1])[::-1]
    # consecutive runs are read as one block each
    yield "runs", np.concatenate([np.arange(a, min(a + 5, starts[-1])) for a in rng.integers(0, starts[-1], 8)])


@pytest.mark.mpi(sizes=(1, 2, 4))
@pytest.mark.parametrize("route", ["shm", "rma"])
@pytest.mark.parametrize("row_shape,dtype", [((3,), np.float32), ((), np.int64), ((2, 2), np.float64)])
def test_reads_and_writes_match_numpy(nranks, comm, route, row_shape, dtype, monkeypatch):
    from hpcgnn.store.window import RowWindow

    monkeypatch.setenv(FORCE_RMA_ENV, "1" if route == "rma" else "0")
    counts, starts, full = sharded_table(comm, row_shape, dtype)
    rng = np.random.default_rng(comm.rank)
    with RowWindow(comm, counts[comm.rank], row_shape, dtype) as win:
        win.local[:] = full[starts[comm.rank]:starts[comm.rank + 1]]
        win.sync()
        for name, gids in id_cases(comm, starts, rng):
            owners, lids = lookup(starts, gids)
            out = np.empty((gids.shape[0], *row_shape), dtype=dtype)
            assert np.array_equal(win.read(owners, lids, out), full[gids]), name
            # with destinations: row i lands at where[i], the other rows stay untouched
            where = rng.permutation(2 * gids.shape[0])[: gids.shape[0]]
            wide = np.full((2 * gids.shape[0], *row_shape), -7, dtype=dtype)
            win.read(owners, lids, wide, where=where)
            untouched = np.setdiff1d(np.arange(wide.shape[0]), where)
            assert np.array_equal(wide[where], full[gids]) and (wide[untouched] == -7).all(), name
        win.sync()  # nobody writes while another rank still reads
        # every rank overwrites a disjoint set of rows spread over all owners
        mine = np.arange(comm.rank, starts[-1], comm.size)
        owners, lids = lookup(starts, mine)
        win.write(owners, lids, -full[mine] - 1)
        win.sync()
        expected = -full - 1
        owners, lids = lookup(starts, np.arange(starts[-1]))
        out = np.empty_like(full)
        assert np.array_equal(win.read(owners, lids, out), expected)
        assert np.array_equal(win.local, expected[starts[comm.rank]:starts[comm.rank + 1]])


@pytest.mark.mpi(sizes=(4,))
def test_mixed_shared_and_rma_routes(nranks, comm):
    """Ranks paired into two 'nodes': reads mix shared-memory peers and RMA owners."""
    from hpcgnn.store.window import RowWindow

    counts, starts, full = sharded_table(comm)
    pairs = comm.Split(comm.rank // 2, comm.rank)
    with RowWindow(comm, counts[comm.rank], (3,), np.float32, ncomm=pairs) as win:
        assert win.ncomm.size == 2
        win.local[:] = full[starts[comm.rank]:starts[comm.rank + 1]]
        win.sync()
        gids = np.random.default_rng(comm.rank).integers(0, starts[-1], 300)
        owners, lids = lookup(starts, gids)
        assert (win.node_slot[owners] >= 0).any() and (win.node_slot[owners] < 0).any()
        out = np.empty((300, 3), dtype=np.float32)
        assert np.array_equal(win.read(owners, lids, out), full[gids])
    pairs.Free()


def open_fds():
    return len(os.listdir("/proc/self/fd"))


def rss_mib():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.mpi(sizes=(2,))
@pytest.mark.parametrize("route", ["shm", "rma"])
def test_create_close_repeatedly_leaks_nothing(nranks, comm, route, monkeypatch):
    from hpcgnn.store.window import RowWindow

    monkeypatch.setenv(FORCE_RMA_ENV, "1" if route == "rma" else "0")

    def cycle():
        with RowWindow(comm, 20_000, (16,), np.float32) as win:
            win.local[:] = 1.0
            win.sync()
            out = np.empty((100, 16), dtype=np.float32)
            win.read(np.full(100, comm.size - 1 - comm.rank), np.arange(100), out)
            assert (out == 1.0).all()

    for _ in range(5):
        cycle()
    fds, rss = open_fds(), rss_mib()
    for _ in range(60):
        cycle()
    assert open_fds() <= fds
    assert rss_mib() - rss < 20, "memory grew over 60 create/close cycles of 1.2 MiB windows"


LEAKY_SCRIPT = """
import sys
import numpy as np
from hpcgnn.graph.dist_graph import DistGraph
from hpcgnn.runtime.comm import world
from hpcgnn.store import DistEmbedding, DistTensor
comm = world()
graph = DistGraph(sys.argv[2], comm)
table = DistTensor((100, 4), np.float32, "left_open", comm=comm)
labels = DistTensor((50,), np.int64, "also_left_open", comm=comm)
embedding = DistEmbedding(80, 3, name="embedding_left_open", comm=comm)
feats = graph.ndata["feat"][np.arange(0, graph.num_nodes, 3)]
sys.stdout.write(f"{tuple(table.gather(np.arange(100)).shape)} {feats.shape[0] > 0} {graph.progress is not None}\\n")
if sys.argv[1] == "raise" and comm.rank == 1:
    raise RuntimeError("rank 1 gives up with its windows open")
"""

# Every route between ranks: shared memory, RMA forced between ranks of one machine, and
# MPICH's network module for every peer (MPIR_CVAR_NOLOCAL=1), the route between machines.
EXIT_ROUTES = {"shm": {}, "rma": {FORCE_RMA_ENV: "1"}, "nolocal": {"MPIR_CVAR_NOLOCAL": "1"}}


@pytest.mark.parametrize("route", sorted(EXIT_ROUTES))
@pytest.mark.parametrize("ending", ["normal", "raise"])
def test_resources_left_open_are_released_at_exit(tmp_path, ending, route):
    """A script that forgets close() on a graph (its windows and progress thread), tensors and an
    embedding exits with status 0 on every route: no crash in MPI_Finalize (a progress thread
    left polling corrupted the heap on the RMA route), no transport warnings about in-use
    memory; and a rank that dies with them open ends the job instead of hanging it."""
    import subprocess
    import sys

    from hpcgnn.prep.partition import partition_graph
    from hpcgnn.testing.graphs import clustered_graph
    from tests.conftest import mpiexec_path

    data = tmp_path / "ds"
    partition_graph(clustered_graph(num_nodes=200), str(data), 2, "random")
    script = tmp_path / "leaky.py"
    script.write_text(LEAKY_SCRIPT)
    env = dict(os.environ, OMP_NUM_THREADS="1", **EXIT_ROUTES[route])
    for _ in range(2 if ending == "normal" else 1):  # the crash was not certain on every run
        proc = subprocess.run([mpiexec_path(), "-n", "2", sys.executable, str(script), ending, str(data)],
                              capture_output=True, text=True, timeout=90, env=env)
        if ending == "normal":
            assert proc.returncode == 0, proc.stderr[-3000:]
            assert proc.stdout.count("(100, 4) True") == 2, proc.stdout
            # the progress thread runs wherever a peer is on another (emulated) machine
            assert proc.stdout.count("True True") == (0 if route == "shm" else 2), proc.stdout
            assert "WARN" not in proc.stderr and "inuse" not in proc.stderr, proc.stderr[:2000]
        else:
            assert proc.returncode != 0
            assert "gives up with its windows open" in proc.stderr


def test_copy_rows_is_one_pass_scatter_and_checks_bounds():
    from hpcgnn import _rows
    from hpcgnn.store.window import scatter_rows

    rng = np.random.default_rng(0)
    table = rng.random((50, 3)).astype(np.float32)
    rows, where = rng.integers(0, 50, 30), rng.permutation(40)[:30]
    out = np.zeros((40, 3), dtype=np.float32)
    expected = out.copy()
    expected[where] = table[rows]
    assert np.array_equal(scatter_rows(table, rows, out, where), expected)
    as_bytes = table.view(np.uint8)
    with pytest.raises(IndexError, match="outside"):
        _rows.copy_rows(as_bytes, np.array([50]), out.view(np.uint8), np.array([0]))
    with pytest.raises(IndexError, match="outside"):
        _rows.copy_rows(as_bytes, np.array([0]), out.view(np.uint8), np.array([-1]))
    with pytest.raises(ValueError, match="destinations"):
        _rows.copy_rows(as_bytes, np.array([0, 1]), out.view(np.uint8), np.array([0]))
    strided = np.zeros((40, 6), dtype=np.float32)[:, ::2]  # not contiguous: the numpy fallback
    assert np.array_equal(scatter_rows(table, rows, strided, where), expected)
