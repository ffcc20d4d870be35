"""LADIES layer-wise sampling (``--sampler layer``): against a plain-Python oracle on the whole
graph's CSC at 1, 2 and 4 ranks, the weighted aggregation unbiased, training."""

import numpy as np
import pytest
import torch

from hpcgnn.runtime.rng import derive_seed, unit_uniform
from hpcgnn.testing.datasets import make_dataset, oracle


def reference_inclusion(p, size):
    """pi_u = min(1, c p_u) summing to ``size``, by trying each count k of saturated entries
    (the k largest) until the scale of the rest leaves the (k+1)-th below 1."""
    if size >= np.count_nonzero(p):
        return (p > 0).astype(float)
    order = np.argsort(-p, kind="stable")
    for k in range(len(p)):
        scale = (size - k) / p[order[k:]].sum()
        if scale * p[order[k]] < 1:
            pi = np.minimum(scale * p, 1.0)
            pi[order[:k]] = 1.0
            return pi
    raise AssertionError("no scale found")


def reference_layer(indptr, indices, nodes, size, seed, normalize):
    """One layer by the definition: P[v, u] = multiplicity / in-degree, p_u = column norm^2 / total,
    u kept with probability pi_u = min(1, c p_u) (sum ``size``), u's uniform that of its gid under
    ``seed``; weight P[v, u] / pi_u per edge copy; with ``normalize`` each node's weights divided
    by their sum."""
    candidates = sorted({int(u) for v in nodes for u in indices[indptr[v]:indptr[v + 1]]})
    column = {u: i for i, u in enumerate(candidates)}
    norms = np.zeros(len(candidates))
    for v in nodes:
        row = indices[indptr[v]:indptr[v + 1]]
        for u, m in zip(*np.unique(row, return_counts=True)):
            norms[column[int(u)]] += (m / row.shape[0]) ** 2
    if not candidates:
        return [[] for _ in nodes]
    pi = reference_inclusion(norms / norms.sum(), size)
    kept = unit_uniform(np.array(candidates, dtype=np.uint64), seed) < pi
    scale = {u: 1.0 / pi[i] for i, u in enumerate(candidates) if kept[i]}
    rows = [[(int(u), 1.0 / (indptr[v + 1] - indptr[v]) * scale[int(u)])
             for u in indices[indptr[v]:indptr[v + 1]] if int(u) in scale] for v in nodes]
    if normalize:
        rows = [[(u, x / sum(w for _, w in row)) for u, x in row] for row in rows]
    return rows


def simple_dataset(comm, shared_tmp, nranks):
    """The test graph without its parallel edges, partitioned as ``partition --dedup`` records it."""
    from hpcgnn.prep.transform import dedup
    from hpcgnn.testing.datasets import clustered_graph, partition_once

    graph = dedup(clustered_graph(num_nodes=500, avg_degree=6))
    return partition_once(comm, shared_tmp, graph, nranks, "simple", source={"dedup": True})


@pytest.mark.mpi(sizes=(1, 2, 4))
def test_layer_sampling_equals_the_oracle(nranks, comm, shared_tmp):
    check_against_oracle(nranks, comm, shared_tmp, simple=False)


@pytest.mark.mpi(sizes=(2,))
def test_layer_sampling_of_a_simple_graph_equals_the_oracle(nranks, comm, shared_tmp):
    check_against_oracle(nranks, comm, shared_tmp, simple=True)


def check_against_oracle(nranks, comm, shared_tmp, simple):
    from hpcgnn import DistGraph
    from hpcgnn.sampling.layer import LayerSampler

    if simple:  # no parallel edges (the general graph has some: their entries add up before squaring)
        path = simple_dataset(comm, shared_tmp, nranks)
    else:
        path, _ = make_dataset(comm, shared_tmp, nranks, num_nodes=500, avg_degree=6)
    _, indptr, indices = oracle(path)
    pairs = np.repeat(np.arange(500), np.diff(indptr)) * 500 + indices
    assert (np.unique(pairs).shape[0] == pairs.shape[0]) == simple
    seeds = np.random.default_rng(comm.rank).choice(500, 15, replace=False)
    with DistGraph(path, comm) as graph:
        assert graph.simple == simple
        for normalize in (True, False):
            batch = LayerSampler([30, 20], normalize=normalize).sample(graph, seeds, seed=4)
            check_batch(batch, indptr, indices, normalize)


def check_batch(batch, indptr, indices, normalize):
    nodes = batch.seed_gids
    for hop, block in enumerate(reversed(batch.blocks)):
        want = reference_layer(indptr, indices, nodes.tolist(), [30, 20][::-1][hop],
                               derive_seed(4, "layer_sample", hop), normalize)
        src_nodes = batch.input_gids[:block.num_src]
        assert np.array_equal(src_nodes[:block.num_dst], nodes)
        assert np.array_equal(np.diff(block.indptr), [len(w) for w in want])
        assert src_nodes[block.src_pos].tolist() == [u for w in want for u, _ in w]
        assert np.allclose(block.edge_weight, [x for w in want for _, x in w], rtol=1e-5)
        assert np.array_equal(indices[block.eids], src_nodes[block.src_pos])  # real edges
        nodes = src_nodes


@pytest.mark.parametrize("num_edges", [0, 7, 60_000])  # 60,000: many buckets, several edges per candidate
def test_layer_kernels_equal_numpy(num_edges):
    from hpcgnn import _layerwise

    rng = np.random.default_rng(num_edges)
    degree = rng.multinomial(num_edges, np.full(300, 1 / 300)) * (rng.random(300) < 0.8)
    offsets = np.concatenate([[0], np.cumsum(degree)]).astype(np.int64)
    src = rng.integers(0, 5_000, offsets[-1]).astype(np.int64)  # parallel edges in most long rows
    row = np.repeat(np.arange(300), degree)
    candidates, norms, order, column = _layerwise.column_norms(offsets, src)
    assert np.array_equal(np.sort(candidates), np.unique(src))
    assert np.array_equal(np.sort(order), np.arange(src.shape[0]))
    assert np.array_equal(candidates[column], src[order])
    pairs, copies = np.unique(row * 5_000 + src, return_counts=True)  # (v, u) and its copies
    want = np.bincount(pairs % 5_000, weights=(copies / degree[pairs // 5_000]) ** 2, minlength=5_000)
    assert np.allclose(norms, want[candidates], rtol=1e-12)

    chosen = rng.random(candidates.shape[0]) < 0.3
    slot = np.where(chosen, rng.permutation(candidates.shape[0]), -1).astype(np.int32)  # distinct positions
    scale = np.zeros(candidates.shape[0])
    scale[slot[chosen]] = rng.random(np.count_nonzero(chosen)) + 1
    keep = np.isin(src, candidates[chosen])
    of_gid = {u: (s, scale[s] if s >= 0 else 0.0) for u, s in zip(candidates.tolist(), slot.tolist())}
    raw = np.array([of_gid[u][1] for u in src[keep]]) / degree[row[keep]]
    for normalize in (False, True):
        counts, kept, src_pos, weight = _layerwise.keep_edges(offsets, order, column, slot, scale, normalize)
        assert np.array_equal(counts, np.bincount(row[keep], minlength=300))
        assert np.array_equal(kept, np.flatnonzero(keep))
        assert np.array_equal(src_pos, [of_gid[u][0] for u in src[keep]])
        want_weight = raw / np.bincount(row[keep], weights=raw, minlength=300)[row[keep]] if normalize else raw
        assert np.allclose(weight, want_weight, rtol=1e-6)


def test_importance_weighted_aggregation_is_unbiased(tmp_path):
    from mpi4py import MPI

    from hpcgnn import DistGraph
    from hpcgnn.nn.block_tensors import BlockTensors
    from hpcgnn.sampling.layer import LayerSampler

    path, _ = make_dataset(MPI.COMM_WORLD, str(tmp_path), 1, name="ladies", num_nodes=300, avg_degree=6)
    _, indptr, indices = oracle(path)
    h = np.random.default_rng(0).standard_normal(300)
    seeds = np.arange(0, 300, 10)
    exact = np.array([h[indices[indptr[v]:indptr[v + 1]]].mean() if indptr[v + 1] > indptr[v] else 0.0
                      for v in seeds])
    rounds, sampler = 3000, LayerSampler([8], normalize=False)
    total, square = np.zeros(seeds.shape[0]), np.zeros(seeds.shape[0])
    with DistGraph(path, MPI.COMM_WORLD) as graph:
        for r in range(rounds):
            batch = sampler.sample(graph, seeds, seed=r)
            x = torch.from_numpy(h[batch.input_gids].astype(np.float32))[:, None]
            agg = BlockTensors(batch.blocks[0]).mean_neighbours(x)[:, 0].numpy().astype(np.float64)
            total += agg
            square += agg ** 2
    mean = total / rounds
    stderr = np.sqrt(np.maximum(square / rounds - mean ** 2, 0) / rounds)
    assert (np.abs(mean - exact) <= 5 * stderr + 1e-3).all(), np.abs(mean - exact) / (stderr + 1e-12)


@pytest.mark.mpi(sizes=(2,))  # the batches are checked at 1, 2 and 4 ranks above
def test_layer_sampled_training_learns(nranks, comm, shared_tmp):
    from hpcgnn.testing.training import assert_learns
    from hpcgnn.training.config import parse_train_config

    path, _ = make_dataset(comm, shared_tmp, nranks, name="ladies_train", num_nodes=1200, avg_degree=10)
    args = parse_train_config(["--data", path, "--sampler", "layer", "--layer-sizes", "300,150", "--hidden", "64",
                       "--dropout", "0.2", "--epochs", "40", "--batch-size", "50", "--lr", "0.02", "--no-progress",
                       "--eval-every", "40", "--prefetch", "0", "--seed", "1"])
    assert_learns(comm, args, 0.55)  # chance: 0.25



@pytest.mark.parametrize("flags, needle", [
    (["--layer-sizes", "64,64"], "'--layer-sizes': applies to --sampler layer only"),
    (["--sampler", "cluster", "--layer-weights", "unbiased"], "'--layer-weights': applies to --sampler layer only"),
    (["--sampler", "layer", "--layer-sizes", "64,x"], "'--layer-sizes': must be comma-separated integers"),
    (["--sampler", "layer", "--layer-sizes", "64,0"], "'--layer-sizes': must be 1 to 64 sizes"),
    (["--sampler", "layer", "--layers", "3"], "'--layer-sizes': needs one size per layer"),
    (["--sampler", "layer", "--model", "gat"], "'--model': does not apply to --sampler layer"),
])
def test_layer_flags_are_checked(tmp_path, flags, needle):
    from hpcgnn.runtime.errors import InputError
    from hpcgnn.training.config import parse_train_config

    with pytest.raises(InputError, match=needle):
        parse_train_config(["--data", str(tmp_path), *flags])
