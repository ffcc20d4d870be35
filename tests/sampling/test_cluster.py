"""Cluster-GCN batches (``--sampler cluster``): clusters partition each rank's nodes, a batch is the
subgraph its clusters induce (checked against the whole graph's CSC), training nodes first."""
import numpy as np
import pytest

from hpcgnn.testing.datasets import make_dataset, oracle
from tests.sampling.test_saint import assert_whole_input_block


def induced_edges(indptr, indices, nodes):
    """Oracle: every in-edge ``(src, dst, eid)`` of the global CSC with both ends in ``nodes``."""
    inside = np.zeros(indptr.shape[0] - 1, dtype=bool)
    inside[nodes] = True
    dst = np.repeat(np.arange(indptr.shape[0] - 1), np.diff(indptr))
    eids = np.flatnonzero(inside[indices] & inside[dst])
    return {(int(indices[e]), int(dst[e]), int(e)) for e in eids}


@pytest.mark.mpi(sizes=(1, 2, 4))
def test_cluster_batches_are_the_induced_subgraphs(nranks, comm, shared_tmp):
    from hpcgnn import DistGraph
    from hpcgnn.sampling.cluster import ClusterSampler

    path, _ = make_dataset(comm, shared_tmp, nranks, num_nodes=600, avg_degree=8)
    _, indptr, indices = oracle(path)
    dst_all = np.repeat(np.arange(indptr.shape[0] - 1), np.diff(indptr))
    with DistGraph(path, comm) as graph:
        start, end = graph.local_nodes
        sampler = ClusterSampler(graph, num_layers=3, num_clusters=6, seed=3)
        again = ClusterSampler(graph, num_layers=3, num_clusters=6, seed=3)
        assert np.array_equal(sampler.cluster, again.cluster)  # deterministic
        # the clusters partition this rank's nodes, in sizes METIS balances
        assert sampler.cluster.shape == (end - start,) and set(np.unique(sampler.cluster)) == set(range(6))
        assert sampler.cluster_sizes().sum() == end - start and sampler.cluster_sizes().min() > 0
        train = np.asarray(graph.ndata["train_mask"].local).astype(bool)
        rng = np.random.default_rng(comm.rank)
        for clusters in ([0], [1, 4], rng.permutation(6)[:3], list(range(6))):
            batch = sampler.sample(graph, np.array(clusters))
            local = np.flatnonzero(np.isin(sampler.cluster, clusters))
            nodes = start + local
            first, whole, last = batch.blocks
            assert sorted(batch.input_gids[:whole.num_src]) == sorted(nodes)
            seeds = np.sort(start + local[train[local]])
            assert np.array_equal(batch.seed_gids, seeds)
            assert np.array_equal(batch.input_gids[:seeds.shape[0]], seeds)  # loss nodes first
            assert_whole_input_block(first, batch.input_gids, nodes.shape[0], indptr, indices, dst_all)
            assert whole.num_src == whole.num_dst == nodes.shape[0]
            assert last.num_src == nodes.shape[0] and last.num_dst == seeds.shape[0]
            gids = batch.input_gids
            got = {(int(gids[s]), int(gids[d]), int(e))
                   for s, d, e in zip(whole.src_pos, whole.dst_index(), whole.eids)}
            assert got == induced_edges(indptr, indices, nodes)
            got_last = {(int(gids[s]), int(gids[d]), int(e))
                        for s, d, e in zip(last.src_pos, last.dst_index(), last.eids)}
            assert got_last == {edge for edge in got if edge[1] in set(seeds.tolist())}
        empty = sampler.sample(graph, np.zeros(0, dtype=np.int64))  # a padding step
        assert empty.seed_gids.shape == (0,) and empty.blocks[-1].num_dst == 0


@pytest.mark.mpi(sizes=(1, 2, 4))
def test_cluster_gcn_training_learns_with_equal_steps(nranks, comm, shared_tmp):
    from hpcgnn.testing.training import assert_learns
    from hpcgnn.training.config import parse_train_config

    path, _ = make_dataset(comm, shared_tmp, nranks, name="cl", num_nodes=1200, avg_degree=10)
    args = parse_train_config(["--data", path, "--sampler", "cluster", "--num-clusters", "8",
                       "--clusters-per-batch", "2",
                       "--model", "gcn", "--hidden", "32", "--epochs", "12", "--lr", "0.01", "--no-progress",
                       "--eval-every", "12", "--prefetch", "0", "--seed", "1"])
    assert_learns(comm, args, 0.6)  # chance is 1 / classes (the generated graph has 4)


@pytest.mark.parametrize("flags, needle", [
    (["--sampler", "cluster", "--fanouts", "5,5"], "'--fanouts': applies to --sampler neighbor\\|relational only"),
    (["--sampler", "cluster", "--batch-size", "50"], "'--batch-size': does not apply to --sampler cluster"),
    (["--sampler", "cluster", "--task", "link"], "'--task': does not apply to --sampler cluster"),
    (["--sampler", "cluster", "--num-clusters", "0"], "'--num-clusters': must be 'auto' (sized from the graph) or an"),
    (["--num-clusters", "8"], "'--num-clusters': applies to --sampler cluster only"),
    (["--clusters-per-batch", "2"], "'--clusters-per-batch': applies to --sampler cluster only"),
])
def test_flags_of_the_other_sampler_are_refused(tmp_path, flags, needle):
    from hpcgnn.runtime.errors import InputError
    from hpcgnn.training.config import parse_train_config

    with pytest.raises(InputError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        parse_train_config(["--data", str(tmp_path), *flags])


def test_cluster_sampler_sets_the_layer_count(tmp_path):
    from hpcgnn.training.config import parse_train_config

    args = parse_train_config(["--data", str(tmp_path), "--sampler", "cluster", "--layers", "3"])
    assert args.model.layers == 3 and args.sampler.name == "cluster"


@pytest.mark.mpi(sizes=(2,))
def test_cluster_gcn_resume_is_bit_exact(nranks, comm, shared_tmp):
    from hpcgnn.testing.training import assert_resume_bit_exact
    from hpcgnn.training.config import parse_train_config

    path, _ = make_dataset(comm, shared_tmp, nranks, name="clr", num_nodes=600, avg_degree=8)

    def flags(epochs, directory, *extra):
        return parse_train_config(["--data", path, "--sampler", "cluster", "--num-clusters", "6",
                                   "--clusters-per-batch", "2",
                           "--hidden", "16", "--epochs", str(epochs), "--no-progress", "--prefetch", "1",
                           "--eval-every", "2", "--checkpoint-every", "1", "--checkpoint-dir", directory, *extra])

    assert_resume_bit_exact(comm, flags, shared_tmp, "cl")


@pytest.mark.mpi(sizes=(2,))
def test_auto_sizes_hold_the_target_share_of_neighbourhoods(nranks, comm, shared_tmp, monkeypatch):
    from hpcgnn import DistGraph
    from hpcgnn.sampling import subgraph
    from hpcgnn.sampling.cluster import CLUSTER_NODES, ClusterSampler

    monkeypatch.setattr(subgraph, "TARGET_SEEDS", 1)  # the share of neighbourhoods alone decides
    path, _ = make_dataset(comm, shared_tmp, nranks, name="auto", num_nodes=1600, avg_degree=12, p_inside=0.6)
    with DistGraph(path, comm) as graph:
        sampler = ClusterSampler(graph, num_layers=2, seed=1)
        local, c, q = sampler.local, sampler.num_clusters, sampler.clusters_per_batch
        assert c == -(-local.num_nodes // CLUSTER_NODES) and 1 < q < c
        target = subgraph.target_share(local)
        assert target == min(0.5, 10 / local.mean_degree)
        # the fewest clusters that hold the target share on the rank that needs most; the ranks agree
        shares = comm.allgather(q / c)
        assert max(shares) - min(shares) <= 1 / min(comm.allgather(c))
        assert sampler.expected_share(q) >= target
        assert any(comm.allgather(sampler.expected_share(q - 1) < target))
        # the expected share is what random batches of q clusters hold (in-part in-edges of their nodes)
        rng = np.random.default_rng(comm.rank)
        held = total = 0
        for _ in range(400):
            batch = sampler.sample(graph, rng.permutation(c)[:q])
            nodes = batch.input_gids[:batch.blocks[-1].num_src] - local.start
            held += local.induced(nodes)[1][-1]  # the in-part edges above the input layer
            total += local.in_degree[nodes].sum()
        assert held / total == pytest.approx(sampler.expected_share(q), abs=0.02)


@pytest.mark.mpi(sizes=(2,))
def test_auto_batches_of_a_graph_with_few_labels_hold_every_loss_node(nranks, comm, shared_tmp):
    from hpcgnn import DistGraph
    from hpcgnn.sampling.cluster import ClusterSampler

    path, _ = make_dataset(comm, shared_tmp, nranks, name="auto", num_nodes=1600, avg_degree=12, p_inside=0.6)
    with DistGraph(path, comm) as graph:
        sampler = ClusterSampler(graph, num_layers=2, seed=1)
        assert sampler.local.is_seed.sum() < 1000  # fewer than a default batch: every one in each batch
        assert sampler.clusters_per_batch == sampler.num_clusters
        explicit = ClusterSampler(graph, num_layers=2, num_clusters=8, clusters_per_batch=2, seed=1)
        assert (explicit.num_clusters, explicit.clusters_per_batch) == (8, 2)  # given sizes are kept


def test_small_batches_of_given_sizes_are_warned_about(capsys):
    from types import SimpleNamespace

    from hpcgnn.sampling.subgraph import size_warning

    local = SimpleNamespace(mean_degree=20.0, in_part_share=0.75, is_seed=np.ones(3000, dtype=bool))
    size_warning(SimpleNamespace(rank=0), "--budget 100", local, 0.1, 50)
    line = capsys.readouterr().err.strip()
    assert line.startswith("hpcgnn: warning: --budget 100: a batch holds 10% of a node's 20.0 in-part "
                           "neighbours and 50 of 3,000 loss nodes; 25% of in-edges cross"), line
    assert "'auto' sizes hold 50% and 1,000" in line and "\n" not in line
    size_warning(SimpleNamespace(rank=0), "--budget 100", local, 0.5, 1000)  # as large as auto: nothing
    size_warning(SimpleNamespace(rank=1), "--budget 100", local, 0.1, 50)  # rank 0 speaks for the job
    assert capsys.readouterr().err == ""
