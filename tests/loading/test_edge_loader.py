"""The link-prediction loader as training builds it: no block of a batch reads the batch's answers."""
import pytest

from hpcgnn.testing.datasets import make_link_dataset
from tests.sampling.test_exclude import block_edges


def positive_pairs(batch) -> set:
    """The batch's positive edges (seed edges) as (dst, src) and (src, dst) global-id pairs."""
    seeds = batch.seed_gids
    src = seeds[batch.extra["pos_src"].numpy()].tolist()
    dst = seeds[batch.extra["pos_dst"].numpy()].tolist()
    return set(zip(dst, src)) | set(zip(src, dst))


def batches_leaking_positives(graph, *flags) -> list:
    """Per batch of one epoch of the training command's link loader (its defaults, and ``flags``):
    how many of its block edges are one of its positive pairs, either way round."""
    from hpcgnn.sampling import SamplerRun, sampler_spec
    from hpcgnn.tasks.link import build_link_loader
    from hpcgnn.training.config import parse_train_config

    config = parse_train_config(["--data", graph.path, "--task", "link", "--batch-size", "64", *flags])
    sampler = sampler_spec(config.sampler.name).build(graph, config.sampler.options,
                                                      SamplerRun(config.model.layers, config.seed))
    loader = build_link_loader(graph, config, sampler, prefetch=0)
    try:
        leaks = []
        for batch in loader:
            assert batch.extra["pos_src"].shape[0] > 0
            banned = positive_pairs(batch)
            leaks.append(sum(pair in banned for pair in map(tuple, block_edges(batch).tolist())))
        return leaks
    finally:
        loader.close()


@pytest.mark.mpi(sizes=(2,))
def test_no_block_of_a_default_link_batch_holds_a_positive_pair(nranks, comm, shared_tmp):
    from hpcgnn import DistGraph

    path, _ = make_link_dataset(comm, shared_tmp, nranks, divisible_by=nranks)
    with DistGraph(path, comm) as graph:
        leaks = batches_leaking_positives(graph)  # default: --exclude self
        assert len(leaks) >= 3 and leaks == [0] * len(leaks), leaks
        # the same batches with their positives left in: the check above does see them
        assert sum(batches_leaking_positives(graph, "--exclude", "none")) > 0
