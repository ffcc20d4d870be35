import numpy as np
import pytest

from hpcgnn.runtime.comm import FORCE_RMA_ENV
from hpcgnn.runtime.rng import derive_seed
from hpcgnn.testing.datasets import input_eids, make_dataset, oracle


def reference_blocks(indptr, indices, seeds, fanouts, replace, seed):
    """The multi-layer procedure on the global CSC with the numpy reference kernels."""
    from hpcgnn.testing.reference import reference_relabel, reference_sample_positions

    nodes, blocks = np.asarray(seeds, dtype=np.int64), []
    for depth, fanout in enumerate(reversed(fanouts)):
        layer_seed = derive_seed(seed, "hop", depth)
        begin = indptr[nodes]
        counts, positions = reference_sample_positions(begin, indptr[nodes + 1] - begin, fanout, replace, layer_seed)
        next_nodes, src_pos = reference_relabel(nodes, indices[positions])
        blocks.append((counts, src_pos, positions))
        nodes = next_nodes
    return nodes, blocks[::-1]


@pytest.mark.mpi(sizes=(1, 2, 4))
@pytest.mark.parametrize("route", ["shm", "rma"])
def test_distributed_sampling_equals_reference(nranks, comm, shared_tmp, route, monkeypatch):
    from hpcgnn import DistGraph, NeighborSampler

    monkeypatch.setenv(FORCE_RMA_ENV, "1" if route == "rma" else "0")
    path, _ = make_dataset(comm, shared_tmp, nranks, num_nodes=800, avg_degree=15)
    _, indptr, indices = oracle(path)
    rng = np.random.default_rng(comm.rank)
    with DistGraph(path, comm) as graph:
        start, end = graph.local_nodes
        cases = {"mixed": rng.choice(graph.num_nodes, 60, replace=False),
                 "local": rng.choice(np.arange(start, end), 20, replace=False),
                 "remote": rng.choice(np.setdiff1d(np.arange(graph.num_nodes), np.arange(start, end)), 20,
                                      replace=False) if nranks > 1 else np.arange(5)}
        for replace in (False, True):
            for fanouts in ([4, 6], [-1, 3], [2, 2, 2]):
                sampler = NeighborSampler(fanouts, replace=replace)
                for name, seeds in cases.items():
                    batch = sampler.sample(graph, seeds, seed=11)
                    want_nodes, want_blocks = reference_blocks(indptr, indices, seeds, fanouts, replace, 11)
                    assert np.array_equal(batch.input_gids, want_nodes), (name, fanouts)
                    assert np.array_equal(batch.seed_gids, seeds)
                    for block, (counts, src_pos, eids) in zip(batch.blocks, want_blocks):
                        assert np.array_equal(np.diff(block.indptr), counts)
                        assert np.array_equal(block.src_pos, src_pos) and np.array_equal(block.eids, eids)
                    # blocks map back to real edges: src -> dst is the in-edge with that global eid
                    src_nodes = batch.input_gids
                    for block, fanout in zip(batch.blocks, fanouts):  # block l samples fanouts[l]
                        dst_nodes = src_nodes[:block.num_dst]
                        src, dst = src_nodes[block.src_pos], dst_nodes[block.dst_index()]
                        assert np.array_equal(indices[block.eids], src)
                        assert ((block.eids >= indptr[dst]) & (block.eids < indptr[dst + 1])).all()
                        if not replace:
                            pairs = block.dst_index() * graph.num_edges + block.eids
                            assert np.unique(pairs).shape[0] == pairs.shape[0]
                        if fanout > 0:
                            assert (np.diff(block.indptr) <= fanout).all()
                        src_nodes = dst_nodes
        # same seed -> same batch, another seed -> another batch
        sampler = NeighborSampler([5, 5])
        a, b = sampler.sample(graph, cases["mixed"], seed=1), sampler.sample(graph, cases["mixed"], seed=1)
        c = sampler.sample(graph, cases["mixed"], seed=2)
        assert np.array_equal(a.input_gids, b.input_gids)
        assert not np.array_equal(a.blocks[-1].eids, c.blocks[-1].eids)


@pytest.mark.mpi(sizes=(2,))
def test_weighted_sampling_reads_remote_weights(nranks, comm, shared_tmp):
    from hpcgnn import DistGraph, NeighborSampler
    from hpcgnn.testing.reference import reference_sample_positions_weighted

    path, graph_in = make_dataset(comm, shared_tmp, nranks, num_nodes=500)
    _, indptr, indices = oracle(path)
    weight = graph_in.edata["weight"][input_eids(path)].astype(np.float64)
    with DistGraph(path, comm) as graph:
        seeds = np.random.default_rng(comm.rank).choice(graph.num_nodes, 40, replace=False)
        batch = NeighborSampler([3], prob="weight").sample(graph, seeds, seed=4)
        begin = indptr[seeds]
        degree = indptr[seeds + 1] - begin
        rows = np.concatenate([weight[b:b + d] for b, d in zip(begin, degree)])
        layer_seed = derive_seed(4, "hop", 0)
        counts, positions = reference_sample_positions_weighted(begin, degree, rows, 3, False, layer_seed)
        assert np.array_equal(batch.blocks[0].eids, positions)
        assert np.array_equal(np.diff(batch.blocks[0].indptr), counts)
