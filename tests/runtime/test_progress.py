import threading
import time

import numpy as np
import pytest

from hpcgnn.runtime.comm import FORCE_RMA_ENV
from hpcgnn.testing.datasets import make_dataset

OWNER_BUSY_S = 4.0


def timed_remote_read(comm, tensor, rows):
    """Rank 0 reads ``rows`` rows of rank 1 while rank 1 sleeps outside MPI; rank 0 gets the seconds."""
    comm.Barrier()
    if comm.rank == 1:
        time.sleep(OWNER_BUSY_S)  # no MPI call: only a progress thread can serve the read
        seconds = None
    else:
        time.sleep(0.5)  # let the owner leave the barrier: a request it sees inside MPI is served at once
        gids = np.arange(tensor.book.starts[1], tensor.book.starts[1] + rows)
        t0 = time.perf_counter()
        got = tensor.gather(gids)
        seconds = time.perf_counter() - t0
        assert np.array_equal(got[:, 0], gids.astype(np.float32))
    comm.Barrier()
    return seconds


@pytest.mark.mpi(sizes=(2,), machines=2, timeout=180)
def test_remote_reads_complete_while_the_owner_computes(nranks, comm):
    from hpcgnn.runtime.progress import ProgressThread
    from hpcgnn.store import DistTensor

    rows = 20_000
    tensor = DistTensor((2 * rows, 16), np.float32, comm=comm,
                        init=lambda gids, shape, dtype: np.repeat(gids[:, None], 16, 1).astype(dtype))
    # control: without progress the read waits for the owner, so this really is the network path
    waited = timed_remote_read(comm, tensor, rows)
    progress = ProgressThread(comm)
    served = timed_remote_read(comm, tensor, rows)
    assert progress.polls > 0 and progress.compiled  # the GIL-free loop found MPI_Iprobe
    progress.close()
    tensor.close()
    if comm.rank == 0:
        assert waited > OWNER_BUSY_S / 2, f"read took {waited:.2f}s: the owner's progress was not needed"
        assert served < OWNER_BUSY_S / 4, f"read took {served:.2f}s with a progress thread"


def progress_threads():
    return [t for t in threading.enumerate() if t.name == "hpcgnn-progress"]


@pytest.mark.mpi(sizes=(2,))
@pytest.mark.parametrize("route", ["shm", "rma"])
def test_a_graph_runs_a_progress_thread_only_across_nodes(nranks, comm, shared_tmp, route, monkeypatch):
    from hpcgnn import DistGraph

    if route == "rma":
        monkeypatch.setenv(FORCE_RMA_ENV, "1")
    path, _ = make_dataset(comm, shared_tmp, nranks, num_nodes=200)
    with DistGraph(path, comm) as graph:
        assert (graph.progress is not None) == (route == "rma")
        assert len(progress_threads()) == (route == "rma")
    assert not progress_threads()
    with DistGraph(path, comm, progress_interval=0) as graph:
        assert graph.progress is None
    with DistGraph(path, comm, progress_interval=0.002) as graph:
        assert graph.progress.interval == 0.002


def test_progress_interval_must_be_positive():
    from hpcgnn.runtime.comm import world
    from hpcgnn.runtime.progress import ProgressThread

    with pytest.raises(ValueError, match="interval"):
        ProgressThread(world(), 0)
