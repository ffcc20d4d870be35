"""ExcludedEdges: a batch's positive edges (and their reverses) never reach its blocks, rows keep
their fanout, and what is left is sampled fairly."""
import numpy as np
import pytest
from scipy.stats import chisquare

from hpcgnn.testing.datasets import make_dataset, oracle


def block_edges(batch):
    """Every (dst gid, src gid) edge of every block of a MiniBatch."""
    pairs = []
    nodes = batch.input_gids
    for block in batch.blocks:  # input side first: block l's sources are the node list of l
        src = nodes[block.src_pos]
        dst = nodes[:block.num_dst][block.dst_index()]
        pairs.append(np.stack([dst, src], axis=1))
        nodes = nodes[:block.num_dst]
    return np.concatenate(pairs)


def _positives(indptr, indices, rng, count):
    """``count`` stored edges (src, dst), drawn from the whole graph."""
    eids = rng.choice(indptr[-1], count, replace=False)
    dst = np.searchsorted(indptr, eids, side="right") - 1
    return indices[eids], dst


@pytest.mark.mpi(sizes=(1, 4))
@pytest.mark.parametrize("fanouts,prob", [([4, 3], None), ([-1, -1], None), ([4, 3], "weight")])
def test_no_block_holds_a_positive_or_its_reverse(nranks, comm, shared_tmp, fanouts, prob):
    from hpcgnn import DistGraph, NeighborSampler
    from hpcgnn.sampling.exclude import ExcludedEdges

    path, _ = make_dataset(comm, shared_tmp, nranks)
    orig, indptr, indices = oracle(path)
    rng = np.random.default_rng(comm.rank)
    with DistGraph(path, comm) as g:
        sampler = NeighborSampler(fanouts, prob=prob)
        for trial in range(5):
            src, dst = _positives(indptr, indices, rng, 40)
            view = ExcludedEdges(g, src, dst)
            seeds = np.unique(np.concatenate([src, dst]))
            batch = sampler.sample(view, seeds, seed=trial)
            got = block_edges(batch)
            banned = set(zip(dst.tolist(), src.tolist())) | set(zip(src.tolist(), dst.tolist()))
            assert not banned & set(map(tuple, got.tolist()))
            # every seed keeps its fanout among the in-edges left to it (the seeds' own hop)
            top = batch.blocks[-1]
            allowed = [sum((int(v), int(u)) not in banned for u in indices[indptr[v]:indptr[v + 1]]) for v in seeds]
            want = allowed if fanouts[-1] == -1 else np.minimum(allowed, fanouts[-1])
            assert np.array_equal(np.diff(top.indptr), want)
        # without exclusion the same batch does read the positives: the check above can fail
        plain = NeighborSampler([-1, -1]).sample(g, seeds, seed=0)
        assert banned & set(map(tuple, block_edges(plain).tolist()))


@pytest.mark.mpi(sizes=(1, 2))
def test_in_edges_drop_exactly_the_excluded_pairs(nranks, comm, shared_tmp):
    from hpcgnn import DistGraph
    from hpcgnn.sampling.exclude import ExcludedEdges

    path, _ = make_dataset(comm, shared_tmp, nranks)
    _, indptr, indices = oracle(path)
    rng = np.random.default_rng(7)
    src, dst = _positives(indptr, indices, rng, 30)
    banned = set(zip(dst.tolist(), src.tolist())) | set(zip(src.tolist(), dst.tolist()))
    with DistGraph(path, comm) as g:
        gids = np.unique(np.concatenate([src, dst, rng.integers(0, g.num_nodes, 20)]))
        offsets, got_src, eids = ExcludedEdges(g, src, dst).in_edges(gids)
        for i, v in enumerate(gids):
            want = [(u, e) for e, u in zip(range(indptr[v], indptr[v + 1]), indices[indptr[v]:indptr[v + 1]])
                    if (int(v), int(u)) not in banned]
            assert list(zip(got_src[offsets[i]:offsets[i + 1]], eids[offsets[i]:offsets[i + 1]])) == want


def test_the_rest_of_a_row_is_sampled_uniformly(tmp_path):
    """A node with one excluded in-edge: each allowed in-edge is picked with probability f / (d - 1)."""
    from mpi4py import MPI

    from hpcgnn import DistGraph
    from hpcgnn.sampling.exclude import ExcludedEdges

    path, _ = make_dataset(MPI.COMM_WORLD, str(tmp_path), 1, avg_degree=20)
    _, indptr, indices = oracle(path)
    node = int(np.argmax(np.diff(indptr)))
    row = indices[indptr[node]:indptr[node + 1]]
    victim = int(row[0])
    fanout, draws = 5, 4000
    with DistGraph(path, MPI.COMM_WORLD) as g:
        view = ExcludedEdges(g, np.array([victim]), np.array([node]))
        # the node sits among many others without exclusions, as in a real batch
        seeds = np.unique(np.concatenate([[node], np.arange(0, g.num_nodes, 7)]))
        at = int(np.searchsorted(seeds, node))
        counts = np.zeros(row.shape[0])
        for trial in range(draws):
            picked = view.sample_neighbors(seeds, fanout, seed=trial)
            begin = int(picked.counts[:at].sum())
            positions = picked.eids[begin:begin + picked.counts[at]] - indptr[node]
            assert positions.shape[0] == fanout and len(set(positions.tolist())) == fanout
            counts[positions] += 1
    assert not np.any(row[counts > 0] == victim)
    allowed = counts[row != victim]
    assert chisquare(allowed).pvalue > 1e-3
