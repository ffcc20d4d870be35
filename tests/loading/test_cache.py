from types import SimpleNamespace

import numpy as np
import pytest

from hpcgnn.runtime.comm import FORCE_RMA_ENV
from hpcgnn.testing.datasets import make_dataset, oracle


def expected_features(path, graph_in):
    """Feature row of every new (partitioned) id, from the generator's arrays."""
    orig, _, _ = oracle(path)
    return graph_in.ndata["feat"][orig]


def check_cache(comm, shared_tmp, nranks):
    from hpcgnn import DistGraph, NeighborSampler, NodeDataLoader
    from hpcgnn.loading.cache import off_node

    path, graph_in = make_dataset(comm, shared_tmp, nranks, num_nodes=900)
    want = expected_features(path, graph_in)
    with DistGraph(path, comm) as graph:
        seeds = np.arange(*graph.local_nodes)[::2]
        feat = graph.ndata["feat"]
        row_bytes = feat.window.row_bytes
        loaders = {budget: NodeDataLoader(graph, seeds, NeighborSampler([4, 5]), batch_size=40, prefetch=0,
                                          seed=3, cache_bytes=budget)
                   for budget in (0, 60 * row_bytes, 10**9)}
        cache = loaders[60 * row_bytes].cache
        assert 0 < len(cache) <= 60 and cache.nbytes == len(cache) * row_bytes
        assert off_node(feat, cache.gids).all()  # only rows that would cross the network
        assert np.array_equal(cache.rows, want[cache.gids])
        traffic = {}
        for budget, loader in loaders.items():
            for batch in loader:
                assert np.array_equal(batch.feat.numpy(), want[batch.input_gids])
            stats = loader.stats
            assert 0 <= stats.cache_hits <= stats.remote_rows
            assert stats.cache_saved_bytes == stats.cache_hits * row_bytes
            traffic[budget] = stats
        # the same batches: the cache removes exactly the bytes of its hits from the network
        base = traffic[0].network_bytes
        for budget, stats in traffic.items():
            assert stats.remote_rows == traffic[0].remote_rows
            assert stats.network_bytes == base - stats.cache_saved_bytes, budget
        assert traffic[0].cache_hits == 0
        assert comm.allreduce(traffic[10**9].cache_hits) > comm.allreduce(traffic[60 * row_bytes].cache_hits) > 0

        # a snapshot: rows written later are seen after refresh()
        big = loaders[10**9].cache
        mine = np.arange(*graph.local_nodes)
        feat[mine] = -feat.local - 1.0
        feat.barrier()
        assert np.array_equal(big.rows, want[big.gids])
        big.refresh()
        assert np.array_equal(big.rows, -want[big.gids] - 1.0)
        rows, remote, hits = big.gather(big.gids[:7])
        assert np.array_equal(rows, -want[big.gids[:7]] - 1.0) and remote == hits == min(7, len(big))


@pytest.mark.mpi(sizes=(2, 4))
def test_cache_returns_exactly_the_owners_rows(nranks, comm, shared_tmp, monkeypatch):
    monkeypatch.setenv(FORCE_RMA_ENV, "1")  # every other rank is off-node
    check_cache(comm, shared_tmp, nranks)


@pytest.mark.mpi(sizes=(2,), machines=2, timeout=180)
def test_cache_across_emulated_machines(nranks, comm, shared_tmp):
    check_cache(comm, shared_tmp, nranks)


@pytest.mark.mpi(sizes=(1, 2))
def test_no_cache_inside_one_node(nranks, comm, shared_tmp):
    from hpcgnn import DistGraph, NeighborSampler, NodeDataLoader

    path, _ = make_dataset(comm, shared_tmp, nranks, num_nodes=300)
    with DistGraph(path, comm) as graph:
        loader = NodeDataLoader(graph, np.arange(*graph.local_nodes), NeighborSampler([3]), batch_size=50,
                                prefetch=0, cache_bytes=10**6)
        assert len(loader.cache) == 0  # every row is in this node's shared memory
        list(loader)
        assert loader.stats.remote_rows == loader.stats.network_bytes == 0


class _Presampling:
    """What :func:`hot_remote_rows` reads, made up: rows ``>= 100`` live on a rank of another node,
    batch ``i``'s sampled inputs are ``inputs[i]``."""

    def __init__(self, inputs):
        self.inputs = [np.asarray(ids, dtype=np.int64) for ids in inputs]
        self.window = SimpleNamespace(node_slot=np.array([0, -1]))  # rank 0 on this node, rank 1 elsewhere
        self.book = SimpleNamespace(owner=lambda gids: (np.asarray(gids) >= 100).astype(np.int64))
        self.comm = SimpleNamespace(rank=0)
        self.sampled = 0

    def batches(self, epoch):
        return [np.array([index]) for index in range(len(self.inputs))]

    def sample(self, graph, seeds, seed):
        self.sampled += 1
        return SimpleNamespace(input_gids=self.inputs[int(seeds[0])])


def test_cache_holds_the_rows_the_presampling_counted_most():
    from hpcgnn.loading.cache import READS_PER_SLOT, hot_remote_rows

    # remote rows 100..107 read 1..8 times in an order unrelated to their ids; local rows read
    # more often than any of them must not count
    counts = {100: 5, 101: 8, 102: 1, 103: 6, 104: 3, 105: 7, 106: 2, 107: 4}
    reads = np.repeat(list(counts), list(counts.values()))
    reads = np.concatenate([reads, np.repeat([3, 7], 20)])
    np.random.default_rng(0).shuffle(reads)
    stub = _Presampling(np.array_split(reads, 3))
    capacity = 4
    assert sum(counts.values()) < READS_PER_SLOT * capacity  # every batch is counted
    hot = hot_remote_rows(stub, stub, stub, stub, capacity)
    assert stub.sampled == 3
    assert hot.tolist() == [100, 101, 103, 105]  # the four most read (8, 7, 6, 5 times), sorted
    # presampling stops once it has seen READS_PER_SLOT reads per slot: only the first batch counts
    first = np.repeat([100, 101, 102], [2, READS_PER_SLOT - 1, 1])
    stub = _Presampling([first, np.repeat([103], 50)])
    assert hot_remote_rows(stub, stub, stub, stub, 1).tolist() == [101] and stub.sampled == 1
