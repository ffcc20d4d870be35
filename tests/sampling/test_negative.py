"""Negative samplers: their distributions (chi-square against the exact law), the pairing rules,
determinism across batches and rank counts, and the edge cases (K = 1, empty batches)."""
import types

import numpy as np
import pytest
from scipy.stats import chisquare

from hpcgnn.runtime.collectives import allreduce_
from hpcgnn.sampling.negative import (
    NEGATIVE_SAMPLERS,
    CorruptNegativeSampler,
    DegreeNegativeSampler,
    InBatchNegativeSampler,
    alias_table,
    build_negative_sampler,
)
from hpcgnn.store.partition_book import PartitionBook
from hpcgnn.testing.datasets import make_dataset, oracle

NODES = 200
#: about 11 of the 200 nodes have in-degree 0, the rest 1 to 12: enough spread for the degree law
GRAPH = dict(num_nodes=NODES, avg_degree=3)
#: a correct sampler passes with p above this; the seeds are fixed, so the outcome is too
P_MIN = 1e-3


def positives(path):
    """Every edge of the dataset as a positive: ``(src, dst, eids)``, global ids."""
    _, indptr, indices = oracle(path)
    dst = np.repeat(np.arange(indptr.shape[0] - 1, dtype=np.int64), np.diff(indptr))
    return indices, dst, np.arange(indices.shape[0], dtype=np.int64)


def pooled_counts(comm, values, size):
    """How often each of ``size`` values was drawn, summed over the ranks."""
    return allreduce_(np.bincount(values, minlength=size).astype(np.int64), comm)


def implied_probabilities(prob, alias):
    """The law an alias table samples: slot i gives i w.p. prob[i], alias[i] otherwise."""
    out = prob.copy()
    np.add.at(out, alias, 1.0 - prob)
    return out / prob.shape[0]


def test_alias_table_reproduces_the_weights_exactly():
    rng = np.random.default_rng(0)
    cases = [rng.random(50), rng.pareto(1.0, 300) ** 0.75, rng.integers(0, 4, 80).astype(float),
             np.ones(7) / 3, np.array([0.0, 0.0, 5.0]), np.array([2.5]), np.r_[np.zeros(40), 1e-9, 1e9]]
    for weights in cases:
        prob, alias = alias_table(weights)
        assert ((prob >= 0) & (prob <= 1)).all() and ((alias >= 0) & (alias < weights.shape[0])).all()
        assert np.allclose(implied_probabilities(prob, alias), weights / weights.sum(), rtol=0, atol=1e-12)
        zero = weights == 0
        assert (prob[zero] == 0).all()
        assert not zero[alias[prob < 1]].any(), "a weight-0 item is reachable as an alias"
    prob, alias = alias_table(np.zeros(4))  # nothing to draw: never consulted, but well formed
    assert (prob == 0).all() and alias.shape == (4,)


@pytest.mark.mpi(sizes=(1, 2))
def test_uniform_and_corrupt_draw_nodes_uniformly(nranks, comm, shared_tmp):
    from hpcgnn import DistGraph

    path, _ = make_dataset(comm, shared_tmp, nranks, **GRAPH)
    src, dst, eids = positives(path)
    mine = np.arange(comm.rank, eids.shape[0], comm.size)  # each rank a share of the edges
    k, seeds = 25, range(4)  # 600 edges * 25 * 4 = 60k draws in all: 300 per node expected
    with DistGraph(path, comm) as g:
        for name in ("uniform", "corrupt"):
            sampler = build_negative_sampler(name, k, g)
            neg = [sampler.sample(g, src[mine], dst[mine], eids[mine], seed) for seed in seeds]
            neg_src, neg_dst = (np.concatenate(side) for side in zip(*neg))
            assert neg_src.dtype == neg_dst.dtype == np.int64
            assert neg_dst.shape == (len(seeds) * mine.shape[0] * k,)
            dst_counts = pooled_counts(comm, neg_dst, NODES)
            assert chisquare(dst_counts).pvalue > P_MIN, name
            if name == "corrupt":
                assert np.array_equal(neg_src, np.tile(np.repeat(src[mine], k), len(seeds)))
                continue
            assert chisquare(pooled_counts(comm, neg_src, NODES)).pvalue > P_MIN
            # endpoints independent of each other: joint counts over 10 x 10 blocks of 20 nodes
            joint = pooled_counts(comm, (neg_src // 20) * 10 + neg_dst // 20, 100)
            assert chisquare(joint).pvalue > P_MIN
            sampler.close()


@pytest.mark.mpi(sizes=(1, 4))
def test_degree_sampler_follows_in_degree_to_the_three_quarters(nranks, comm, shared_tmp):
    from hpcgnn import DistGraph

    path, _ = make_dataset(comm, shared_tmp, nranks, **GRAPH)
    src, dst, eids = positives(path)
    degree = np.diff(oracle(path)[1])
    assert (degree == 0).any(), "the test graph should have nodes of in-degree 0"
    mine = np.arange(comm.rank, eids.shape[0], comm.size)
    k = 25
    with DistGraph(path, comm) as g:
        sampler = build_negative_sampler("degree", k, g)
        counts = np.zeros(NODES, dtype=np.int64)
        for seed in range(4):
            neg_src, neg_dst = sampler.sample(g, src[mine], dst[mine], eids[mine], seed)
            assert np.array_equal(neg_src, np.repeat(src[mine], k))
            assert neg_dst.dtype == np.int64 and neg_dst.shape == (mine.shape[0] * k,)
            counts += np.bincount(neg_dst, minlength=NODES)
        if comm.rank == 0:  # an empty batch on one rank only: the reads are one-sided, nobody waits
            empty = sampler.sample(g, src[:0], dst[:0], eids[:0], 9)
            assert empty[0].shape == empty[1].shape == (0,)
        allreduce_(counts, comm)
        assert counts[degree == 0].sum() == 0, "drew a node of in-degree 0"
        drawn = degree > 0
        expected = degree[drawn] ** 0.75
        assert chisquare(counts[drawn], expected * counts.sum() / expected.sum()).pvalue > P_MIN
        # the check has the power to tell degree**1 (a plausible bug) apart
        linear = degree[drawn].astype(np.float64)
        assert chisquare(counts[drawn], linear * counts.sum() / linear.sum()).pvalue < P_MIN
        sampler.close()


def test_in_batch_pairs_each_source_with_other_positives_destinations():
    graph = types.SimpleNamespace(num_nodes=NODES)  # only the batch-of-one fallback reads it
    rng = np.random.default_rng(3)
    batch, k = 6, 3000
    dst = rng.choice(NODES, batch, replace=False)  # distinct, so a value names its positive
    src = rng.integers(0, NODES, batch)
    eids = rng.choice(10**6, batch, replace=False)
    sampler = InBatchNegativeSampler(k)
    neg_src, neg_dst = sampler.sample(graph, src, dst, eids, 11)
    assert np.array_equal(neg_src, np.repeat(src, k))
    order = np.argsort(dst)
    pos = np.minimum(np.searchsorted(dst[order], neg_dst), batch - 1)
    assert np.array_equal(dst[order][pos], neg_dst), "a negative destination outside the batch"
    picked = order[pos].reshape(batch, k)
    for i, row in enumerate(picked):
        assert (row != i).all(), f"positive {i} paired with its own destination"
        # uniform over the other five: 600 expected each
        assert chisquare(np.delete(np.bincount(row, minlength=batch), i)).pvalue > P_MIN
    # a batch of one has no other positive: corrupt takes over
    alone = sampler.sample(graph, src[:1], dst[:1], eids[:1], 11)
    want = CorruptNegativeSampler(k).sample(graph, src[:1], dst[:1], eids[:1], 11)
    assert all(np.array_equal(a, b) for a, b in zip(alone, want))
    # same seed and batch, same negatives; another seed, others
    assert np.array_equal(sampler.sample(graph, src, dst, eids, 11)[1], neg_dst)
    assert not np.array_equal(sampler.sample(graph, src, dst, eids, 12)[1], neg_dst)


@pytest.mark.mpi(sizes=(1, 4))
def test_negatives_depend_only_on_the_seed_and_the_edge(nranks, comm, shared_tmp):
    from mpi4py import MPI

    from hpcgnn import DistGraph

    path, _ = make_dataset(comm, shared_tmp, nranks, **GRAPH)
    single, _ = make_dataset(comm, shared_tmp, 1, **GRAPH)
    src, dst, eids = positives(path)
    batch = np.random.default_rng(5).choice(eids.shape[0], 64, replace=False)  # same on every rank
    src, dst, eids = src[batch], dst[batch], eids[batch]
    # a rank's own sub-batch, in another order, with other edges missing
    sub = np.random.default_rng(comm.rank).permutation(64)[:20 + comm.rank]
    k = 4
    with DistGraph(path, comm) as g, DistGraph(single, MPI.COMM_SELF) as alone:
        for name in NEGATIVE_SAMPLERS:
            sampler = build_negative_sampler(name, k, g)
            full = sampler.sample(g, src, dst, eids, 7)
            assert all(np.array_equal(a, b) for a, b in zip(sampler.sample(g, src, dst, eids, 7), full))
            assert not np.array_equal(sampler.sample(g, src, dst, eids, 8)[1], full[1]), name
            for other in comm.allgather(full):  # whichever rank samples the batch
                assert all(np.array_equal(a, b) for a, b in zip(other, full)), name
            if name != "in-batch":  # in-batch draws from the batch by definition
                part = sampler.sample(g, src[sub], dst[sub], eids[sub], 7)
                for side in range(2):
                    assert np.array_equal(part[side].reshape(-1, k), full[side].reshape(-1, k)[sub]), name
            if name in ("uniform", "corrupt"):
                # a one-rank job over as many nodes gives the same negatives (ids are just numbers here)
                lone = build_negative_sampler(name, k, alone).sample(alone, src, dst, eids, 7)
                assert all(np.array_equal(a, b) for a, b in zip(lone, full)), name
            sampler.close()


@pytest.mark.mpi(sizes=(1, 2))
def test_shapes_for_one_negative_and_empty_batches(nranks, comm, shared_tmp):
    from hpcgnn import DistGraph

    path, _ = make_dataset(comm, shared_tmp, nranks, **GRAPH)
    src, dst, eids = positives(path)
    with DistGraph(path, comm) as g:
        for name in NEGATIVE_SAMPLERS:
            for k in (1, 3):
                sampler = build_negative_sampler(name, k, g)
                # rank 0 also samples an empty batch the others do not
                for size in ((0, 1, 5) if comm.rank == 0 else (1, 5)):
                    neg_src, neg_dst = sampler.sample(g, src[:size], dst[:size], eids[:size], 3)
                    assert neg_src.shape == neg_dst.shape == (size * k,), (name, k, size)
                    assert neg_src.dtype == neg_dst.dtype == np.int64
                    assert ((neg_dst >= 0) & (neg_dst < NODES)).all() and ((neg_src >= 0) & (neg_src < NODES)).all()
                sampler.close()
        with pytest.raises(ValueError, match="unknown negative sampler 'nope'"):
            build_negative_sampler("nope", 1, g)
        for bad_k in (0, -2, 1.5):
            with pytest.raises(ValueError, match="positive integer"):
                build_negative_sampler("corrupt", bad_k, g)
    # a graph without edges has nothing to weigh: every rank says so, nobody is left waiting
    edgeless = types.SimpleNamespace(indptr=np.zeros(3, dtype=np.int64), comm=comm, num_nodes=2 * nranks,
                                     book=PartitionBook(np.arange(nranks + 1) * 2))
    with pytest.raises(ValueError, match="no node of"):
        DegreeNegativeSampler(2, edgeless)
