import threading

import numpy as np
import pytest

from hpcgnn.testing.datasets import make_dataset


def prefetch_threads():
    return [t for t in threading.enumerate() if t.name == "hpcgnn-prefetch"]


@pytest.mark.mpi(sizes=(1, 2, 4))
def test_epochs_cover_seeds_with_equal_batch_counts(nranks, comm, shared_tmp):
    from hpcgnn import DistGraph, NeighborSampler, NodeDataLoader

    path, graph_in = make_dataset(comm, shared_tmp, nranks, num_nodes=600)
    with DistGraph(path, comm) as graph:
        # unequal seed counts: rank r gets 30 + 17 r of its own nodes
        start, end = graph.local_nodes
        seeds = np.arange(start, end)[: 30 + 17 * comm.rank]
        loader = NodeDataLoader(graph, seeds, NeighborSampler([3, 4]), batch_size=16, prefetch=2)
        counts = comm.allgather(len(loader))
        assert len(set(counts)) == 1 and counts[0] == -(-(30 + 17 * (nranks - 1)) // 16)
        orders = []
        for _epoch in range(2):
            seen = []
            for batch in loader:
                assert batch.feat.shape == (batch.input_gids.shape[0], 8)
                assert np.array_equal(batch.feat.numpy(), graph.ndata["feat"].gather(batch.input_gids))
                assert np.array_equal(batch.label.numpy(), graph.ndata["label"].gather(batch.seed_gids))
                seen.append(batch.seed_gids)
            assert len(seen) == counts[0]
            seen = np.concatenate(seen)
            assert set(seen.tolist()) == set(seeds.tolist())  # every seed, padding only repeats seeds
            orders.append(seen[: len(seeds)])
        assert not np.array_equal(orders[0], orders[1])  # reshuffled each epoch
        assert not prefetch_threads()


@pytest.mark.mpi(sizes=(1, 2))
def test_drop_last_agrees_on_full_batches(nranks, comm, shared_tmp):
    from hpcgnn import DistGraph, NeighborSampler, NodeDataLoader

    path, _ = make_dataset(comm, shared_tmp, nranks, num_nodes=600)
    with DistGraph(path, comm) as graph:
        seeds = np.arange(*graph.local_nodes)[: 20 + 40 * comm.rank]
        loader = NodeDataLoader(graph, seeds, NeighborSampler([2]), batch_size=10, drop_last=True, prefetch=0)
        batches = list(loader)
        assert len(batches) == 2 and all(b.seed_gids.shape[0] == 10 for b in batches)


def test_prefetch_thread_stops_on_error_and_on_break(tmp_path):
    from hpcgnn import DistGraph, NeighborSampler, NodeDataLoader
    from hpcgnn.prep.partition import partition_graph
    from hpcgnn.runtime.comm import world
    from hpcgnn.testing.graphs import clustered_graph

    partition_graph(clustered_graph(num_nodes=300), tmp_path / "d", 1, "random")
    with DistGraph(tmp_path / "d", world()) as graph:
        seeds = np.arange(300)

        class Failing(NeighborSampler):
            calls = 0

            def sample(self, graph, seed_gids, seed=None):
                Failing.calls += 1
                if Failing.calls == 3:
                    raise RuntimeError("sampler exploded")
                return super().sample(graph, seed_gids, seed)

        loader = NodeDataLoader(graph, seeds, Failing([2]), batch_size=20, prefetch=2)
        with pytest.raises(RuntimeError, match="exploded"):
            for _ in loader:
                pass
        assert not prefetch_threads()
        loader = NodeDataLoader(graph, seeds, NeighborSampler([2]), batch_size=20, prefetch=3)
        iterator = iter(loader)
        next(iterator)
        iterator.close()
        assert not prefetch_threads()
        for _ in loader:  # left by break: the dropped iterator waits for its producer
            break
        assert not prefetch_threads()
        assert len(list(loader)) == 15  # a later epoch is unaffected


@pytest.mark.mpi(sizes=(2,))
def test_max_batches_caps_every_rank_alike_and_epochs_differ(nranks, comm):
    from hpcgnn.loading import BatchPlan

    seeds = np.arange(100 + 37 * comm.rank)  # uneven: the longer rank sets the full count
    full = BatchPlan(seeds, 10, comm, seed=1)
    capped = BatchPlan(seeds, 10, comm, seed=1, max_batches=3)
    assert full.num_batches == 14 and capped.num_batches == 3
    for epoch in range(2):
        pairs = zip(capped.batches(epoch), list(full.batches(epoch))[:3])
        assert all(np.array_equal(np.sort(a), np.sort(b)) for a, b in pairs)
    assert not np.array_equal(next(iter(capped.batches(0))), next(iter(capped.batches(1))))
    assert BatchPlan(seeds, 10, comm, max_batches=50).num_batches == 14
