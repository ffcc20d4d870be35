"""VR-GCN (``--sampler vr``): its blocks against neighbour sampling and the whole graph's CSC, the
control variate exact with current histories, unbiased with stale ones and no noisier than the
exact aggregation under dropout (CVD), the deterministic
collective history write, training at 1, 2 and 4 ranks (resume: test_resume.py)."""
import numpy as np
import pytest
import torch

from hpcgnn.testing.datasets import make_dataset, oracle


@pytest.mark.mpi(sizes=(1, 2, 4))
def test_vr_blocks_are_sampled_neighbours_plus_one_constant_row(nranks, comm, shared_tmp):
    from hpcgnn import DistGraph
    from hpcgnn.sampling import NeighborSampler
    from hpcgnn.sampling.vr import ControlVariateSampler

    path, _ = make_dataset(comm, shared_tmp, nranks, name="vrb", num_nodes=400, avg_degree=6)
    _, indptr, indices = oracle(path)
    seeds = np.random.default_rng(comm.rank).choice(400, 12, replace=False)
    with DistGraph(path, comm) as graph:
        batch = ControlVariateSampler(3, 2).sample(graph, seeds, seed=7)
        plain = NeighborSampler([5, 2, 2]).sample(graph, seeds, seed=7)  # same streams for the top two hops
    for i in (1, 2):
        block, want = batch.blocks[i], plain.blocks[i]
        live = batch.extra["vr_nodes"][i]
        n = live.shape[0]
        counts = (np.diff(block.indptr) - 1) // 2
        assert np.array_equal(counts, np.diff(want.indptr)) and block.num_src == 2 * n + block.num_dst
        nodes = live[:block.num_dst]
        degree = indptr[nodes + 1] - indptr[nodes]
        for v in range(block.num_dst):
            edges = slice(block.indptr[v], block.indptr[v + 1])
            src, weight, eids = block.src_pos[edges], block.edge_weight[edges], block.eids[edges]
            c, a = counts[v], 1 / np.sqrt(degree[v] * max(counts[v], 1))
            # CVD: each sampled source after dropout (weight a), before it (1/c - a), then the constant row
            assert np.array_equal(eids[:c], want.eids[want.indptr[v]:want.indptr[v + 1]])
            assert np.array_equal(src[c:2 * c], n + src[:c]) and np.array_equal(eids[c:2 * c], eids[:c])
            assert src[-1] == 2 * n + v and eids[-1] == -1 and weight[-1] == 1
            assert np.allclose(weight[:c], a) and np.allclose(weight[c:2 * c], 1 / max(c, 1) - a, atol=1e-7)
        # whole and sampled in-neighbour lists of the destinations, for the history term
        offsets, full_src = batch.extra["vr_full"][i]
        assert np.array_equal(full_src, np.concatenate([indices[indptr[v]:indptr[v + 1]] for v in nodes]))
        assert np.array_equal(np.diff(offsets), degree)
        sampled_counts, sampled_src = batch.extra["vr_sampled"][i]
        assert np.array_equal(sampled_counts, counts) and np.array_equal(sampled_src, indices[want.eids])
    first = batch.blocks[0]
    assert first.num_src == 2 * first.num_dst and (first.eids == -1).all()
    assert np.array_equal(batch.input_gids, batch.extra["vr_nodes"][0])


def sage(in_dim, classes, layers=3):
    from hpcgnn.nn import SAGE

    torch.manual_seed(3)
    return SAGE(in_dim, 16, classes, num_layers=layers, dropout=0.0)


@pytest.mark.mpi(sizes=(1, 2, 4))
def test_control_variate_is_exact_when_histories_are_current(nranks, comm, shared_tmp):
    from hpcgnn import DistGraph
    from hpcgnn.sampling.vr import ControlVariateSampler
    from hpcgnn.tasks.inference import layerwise_inference
    from hpcgnn.training.control_variate import ControlVariate

    path, _ = make_dataset(comm, shared_tmp, nranks, name="vre", num_nodes=500, avg_degree=8)
    with DistGraph(path, comm) as graph, torch.no_grad():
        model = sage(graph.ndata["feat"].shape[1], 4)
        with ControlVariate(graph, model) as control:
            def current(i, rows):  # every hidden layer's exact output becomes its history
                if i < len(control.histories):
                    control.histories[i].local[...] = rows
                    control.histories[i].barrier()

            exact = layerwise_inference(model, graph, on_layer=current)
            local = graph.local_node_ids()
            pick = np.random.default_rng(comm.rank).choice(local.shape[0], 20, replace=False)
            batch = ControlVariateSampler(3, 1).sample(graph, local[pick], seed=comm.rank)
            control.fill(batch)
            out = model(batch.blocks, torch.from_numpy(graph.ndata["feat"].gather(batch.input_gids)))
            assert torch.allclose(out, exact[pick], atol=1e-4), (out - exact[pick]).abs().max()
            comm.Barrier()  # no rank still reads the current histories
            for history in control.histories:  # stale (zero) histories: one sampled neighbour is not exact
                history.local[...] = 0
                history.barrier()
            control.fill(batch)
            stale = model(batch.blocks, torch.from_numpy(graph.ndata["feat"].gather(batch.input_gids)))
            assert comm.allreduce(float((stale - exact[pick]).abs().max())) > 1e-2


def test_control_variate_is_unbiased_and_reduces_variance(tmp_path):
    from mpi4py import MPI

    from hpcgnn import DistGraph
    from hpcgnn.nn.block_tensors import BlockTensors
    from hpcgnn.sampling.vr import ControlVariateSampler
    from hpcgnn.training.control_variate import ControlVariate

    path, _ = make_dataset(MPI.COMM_WORLD, str(tmp_path), 1, name="vru", num_nodes=300, avg_degree=8)
    _, indptr, indices = oracle(path)
    h = np.random.default_rng(0).standard_normal(300)
    seeds = np.arange(0, 300, 10)
    exact = np.array([h[indices[indptr[v]:indptr[v + 1]]].mean() if indptr[v + 1] > indptr[v] else 0.0
                      for v in seeds])
    rounds, sampler = 2000, ControlVariateSampler(2, 2)
    with DistGraph(path, MPI.COMM_WORLD) as graph:
        with ControlVariate(graph, sage(graph.ndata["feat"].shape[1], 4, layers=2)) as control:
            history = control.histories[0]
            spread = {}
            close = h + 0.1 * np.random.default_rng(1).standard_normal(300)
            for name, stale, keep in (("close", close, 1.0), ("zero", np.zeros(300), 1.0),
                                      ("close, dropout", close, 0.5), ("current, dropout", h, 0.5)):
                history.local[...] = np.repeat(stale[:, None].astype(np.float32), 16, axis=1)
                estimates, noise = np.empty((rounds, seeds.shape[0])), np.random.default_rng(2)
                for r in range(rounds):
                    batch = sampler.sample(graph, seeds, seed=r)
                    control.fill(batch)
                    mean_rows = h[batch.extra["vr_nodes"][1]]
                    dropped = mean_rows * (noise.random(mean_rows.shape[0]) < keep) / keep
                    x = np.concatenate([dropped, mean_rows, batch.blocks[1].extra_rows[:, 0].numpy()])
                    estimates[r] = BlockTensors(batch.blocks[1]).mean_neighbours(
                        torch.from_numpy(x.astype(np.float32))[:, None])[:, 0].numpy()
                mean, stderr = estimates.mean(0), estimates.std(0) / np.sqrt(rounds)
                assert (np.abs(mean - exact) <= 5 * stderr + 1e-4).all(), (name, np.abs(mean - exact) / stderr)
                spread[name] = estimates.std(0).mean()
            # with current histories only dropout noise is left, and CVD leaves as much of it as the
            # exact aggregation has: var(keep mask) * sum h_u^2 / deg^2 per seed. Plain control
            # variates (weight 1/c on the dropped rows) would leave deg/c times that.
            degree = (indptr[seeds + 1] - indptr[seeds]).astype(np.float64)
            squares = np.array([(h[indices[indptr[v]:indptr[v + 1]]] ** 2).sum() for v in seeds])
            exact_var = (1 - keep) / keep * squares / np.maximum(degree, 1) ** 2
            ratio = estimates.var(0).sum() / exact_var.sum()
            assert 0.8 < ratio < 1.25, ratio
    # zero histories are plain neighbour sampling; close ones cancel most of its variance
    assert spread["close"] < 0.3 * spread["zero"], spread


@pytest.mark.mpi(sizes=(1, 2, 4))
def test_assign_keeps_the_highest_ranks_write(nranks, comm):
    from hpcgnn.store import DistTensor

    with DistTensor((10, 3), np.float32, "assign", comm=comm) as tensor:
        gids = np.array([1, 4, 4, 7, 9 - comm.rank])
        values = np.array([comm.rank, comm.rank, 100 + comm.rank, comm.rank, -comm.rank], np.float32)
        tensor.assign(gids, values[:, None])
        got = tensor.gather(np.arange(10))[:, 0]
    top = nranks - 1
    assert got[1] == got[7] == top
    assert got[4] == 100 + top  # within a rank the last write wins
    for r in range(nranks):
        if 9 - r not in (1, 4, 7):
            assert got[9 - r] == -r


@pytest.mark.mpi(sizes=(4,))  # the blocks and the estimator are checked at 1, 2 and 4 ranks above
def test_vr_training_learns(nranks, comm, shared_tmp):
    from hpcgnn.testing.training import assert_learns
    from hpcgnn.training.config import parse_train_config

    path, _ = make_dataset(comm, shared_tmp, nranks, name="vr_train", num_nodes=1200, avg_degree=10)
    args = parse_train_config(["--data", path, "--sampler", "vr", "--hidden", "64", "--dropout", "0.2", "--epochs",
                       "30",
                       "--batch-size", "50", "--lr", "0.02", "--no-progress", "--eval-every", "30", "--prefetch", "0",
                       "--seed", "1"])
    assert_learns(comm, args, 0.55)  # chance: 0.25


@pytest.mark.parametrize("flags, needle", [
    (["--vr-neighbors", "3"], "'--vr-neighbors': applies to --sampler vr only"),
    (["--sampler", "vr", "--vr-neighbors", "0"], "'--vr-neighbors': must be an integer"),
    (["--sampler", "vr", "--embed-dim", "8"], "'--embed-dim': does not apply to --sampler vr"),
    (["--sampler", "vr", "--task", "link"], "'--task': does not apply to --sampler vr"),
    (["--sampler", "vr", "--model", "gcn"], "'--model': does not apply to --sampler vr"),
    (["--sampler", "vr", "--fanouts", "5,5"], "'--fanouts': applies to --sampler neighbor\\|relational only"),
])
def test_vr_flags_are_checked(tmp_path, flags, needle):
    from hpcgnn.runtime.errors import InputError
    from hpcgnn.training.config import parse_train_config

    with pytest.raises(InputError, match=needle):
        parse_train_config(["--data", str(tmp_path), *flags])
