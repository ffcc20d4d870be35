"""Every block sampler's run cut in two and resumed equals one uninterrupted run (their random
streams, and VR-GCN's histories, are in the checkpoints); Cluster-GCN's and GraphSAINT's are with
their own tests."""
import pytest

from hpcgnn.testing.datasets import make_dataset

SAMPLER_FLAGS = {
    "layer": ["--sampler", "layer", "--layer-sizes", "120,60"],
    "randomwalk": ["--sampler", "randomwalk", "--walks", "8"],
    "vr": ["--sampler", "vr"],
}


@pytest.mark.mpi(sizes=(2,))
@pytest.mark.parametrize("sampler", sorted(SAMPLER_FLAGS))
def test_resume_is_bit_exact(nranks, comm, shared_tmp, sampler):
    from hpcgnn.testing.training import assert_resume_bit_exact
    from hpcgnn.training.config import parse_train_config

    path, _ = make_dataset(comm, shared_tmp, nranks, name="resume", num_nodes=600, avg_degree=8)

    def flags(epochs, directory, *extra):
        return parse_train_config(["--data", path, *SAMPLER_FLAGS[sampler], "--hidden", "16", "--batch-size", "60",
                           "--epochs", str(epochs), "--no-progress", "--prefetch", "1", "--eval-every", "2",
                           "--checkpoint-every", "1", "--checkpoint-dir", directory, *extra])

    assert_resume_bit_exact(comm, flags, shared_tmp, sampler)
