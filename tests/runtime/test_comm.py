import os

import pytest


def expected_cores(nranks):
    return max(1, len(os.sched_getaffinity(0)) // nranks)


@pytest.mark.mpi(sizes=(1, 2))
def test_ranks_on_one_host_share_its_cores(nranks, comm):
    from hpcgnn.runtime.comm import cores_per_rank

    assert cores_per_rank(comm) == expected_cores(nranks)


@pytest.mark.mpi(sizes=(2,), machines=2)
def test_emulated_machines_on_one_kernel_share_its_cores(nranks, comm):
    """Separate namespaces are separate nodes to MPI, but their ranks run on the same cores."""
    from hpcgnn.runtime.comm import cores_per_rank, host_id, node_comm

    ncomm = node_comm(comm)
    assert ncomm.size == 1  # MPI sees two machines
    ncomm.Free()
    assert len(set(comm.allgather(host_id()))) == 1
    assert cores_per_rank(comm) == expected_cores(nranks)
