"""PinSAGE random-walk neighbourhoods (``--sampler randomwalk``): bit for bit against a numpy oracle
on the whole graph's CSC at 1, 2 and 4 ranks, the visit distribution by chi-square, the weighted
mean they feed, training."""
import numpy as np
import pytest
import torch

from hpcgnn.runtime.rng import derive_seed
from hpcgnn.testing.datasets import make_dataset, oracle


def reference_neighbourhood(indptr, indices, nodes, walks, walk_length, topk, seed):
    """The walks with the reference kernel, visits counted and ranked in plain Python."""
    from hpcgnn.testing.reference import reference_sample_positions

    origin = np.repeat(np.arange(len(nodes)), walks)
    at = np.asarray(nodes, dtype=np.int64)[origin]
    visits = [dict() for _ in nodes]
    for step in range(walk_length):
        begin = indptr[at]
        counts, positions = reference_sample_positions(begin, indptr[at + 1] - begin, 1, True,
                                                       derive_seed(seed, "walk", step))
        alive = np.asarray(counts) > 0
        origin, at = origin[alive], indices[np.asarray(positions, dtype=np.int64)]
        for o, node in zip(origin.tolist(), at.tolist()):
            if node != nodes[o]:
                visits[o][node] = visits[o].get(node, 0) + 1
    out = []
    for seen in visits:
        ranked = sorted(seen.items(), key=lambda item: (-item[1], item[0]))[:topk]
        total = sum(c for _, c in ranked)
        out.append([(node, c / total) for node, c in ranked])
    return out


@pytest.mark.mpi(sizes=(1, 2, 4))
def test_random_walk_neighbourhoods_equal_the_oracle(nranks, comm, shared_tmp):
    from hpcgnn import DistGraph
    from hpcgnn.sampling.randomwalk import RandomWalkSampler

    path, _ = make_dataset(comm, shared_tmp, nranks, num_nodes=500, avg_degree=6)
    _, indptr, indices = oracle(path)
    sampler = RandomWalkSampler(num_layers=2, walks=7, walk_length=3, topk=4)
    seeds = np.random.default_rng(5).choice(500, 12, replace=False)  # the same seeds on every rank
    with DistGraph(path, comm) as graph:
        batch = sampler.sample(graph, seeds, seed=9)
        again = sampler.sample(graph, seeds, seed=9)
    assert np.array_equal(batch.input_gids, again.input_gids)
    nodes = batch.seed_gids
    for hop, block in enumerate(reversed(batch.blocks)):  # seeds outwards, as sampled
        want = reference_neighbourhood(indptr, indices, nodes.tolist(), 7, 3, 4, derive_seed(9, "hop", hop))
        assert np.array_equal(np.diff(block.indptr), [len(w) for w in want])
        # every layer's node list is a prefix of the next one's: the block's sources, in order
        src_nodes = batch.input_gids[:block.num_src]
        assert np.array_equal(src_nodes[:block.num_dst], nodes)
        assert src_nodes[block.src_pos].tolist() == [node for w in want for node, _ in w]
        assert np.allclose(block.edge_weight, [weight for w in want for _, weight in w], rtol=1e-6)
        assert (block.eids == -1).all()
        nodes = src_nodes


def test_visits_follow_the_two_step_walk_distribution():
    """One node, walks of two steps, every visited node kept: the visit frequencies match the
    exact probability of being at a node after one or two steps (chi-square, 5 sigma)."""
    from hpcgnn.sampling.randomwalk import RandomWalkSampler

    class CSCGraph:  # the sample_neighbors primitive over an in-memory CSC
        def __init__(self, indptr, indices):
            self.indptr, self.indices, self.num_nodes = indptr, indices, indptr.shape[0] - 1

        def sample_neighbors(self, seeds, fanout, replace=False, prob=None, seed=0):
            from hpcgnn import _sample

            begin = self.indptr[seeds]
            counts, positions = _sample.sample_positions(begin, self.indptr[seeds + 1] - begin, fanout, replace, seed)
            return type("Picked", (), {"counts": counts, "src": self.indices[positions]})

    rng = np.random.default_rng(0)
    n = 30
    src, dst = rng.integers(0, n, 200), rng.integers(0, n, 200)
    order = np.argsort(dst, kind="stable")
    indptr = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=n))]).astype(np.int64)
    indices = src[order].astype(np.int64)
    graph = CSCGraph(indptr, indices)
    start = int(np.argmax(np.diff(indptr)))
    transition = np.zeros((n, n))  # transition[v, u]: probability of stepping from v to u
    for v in range(n):
        for u in indices[indptr[v]:indptr[v + 1]]:
            transition[v, u] += 1.0 / (indptr[v + 1] - indptr[v])
    one = transition[start]
    expected = one + one @ transition  # expected visits per walk, steps 1 and 2
    expected[start] = 0.0  # the walk's own start is not counted
    walks = 20000
    sampler = RandomWalkSampler(1, walks=walks, walk_length=2, topk=n)
    origin, visited, count = sampler.visits(graph, np.array([start]), seed=3)
    observed = np.zeros(n)
    observed[visited] = count
    support = expected > 0
    assert observed[~support].sum() == 0
    want = expected[support] * walks
    chi2 = float(((observed[support] - want) ** 2 / want).sum())
    dof = int(support.sum()) - 1
    assert chi2 < dof + 5 * np.sqrt(2 * dof), (chi2, dof)


def test_a_weighted_block_aggregates_the_weighted_mean():
    from hpcgnn.nn.block_tensors import BlockTensors
    from hpcgnn.sampling.block import Block

    indptr = np.array([0, 2, 3, 3])
    block = Block(5, 3, indptr, np.array([3, 4, 1]), np.full(3, -1), edge_weight=np.array([0.25, 0.75, 1.0],
                                                                                         dtype=np.float32))
    h = torch.arange(10, dtype=torch.float32).view(5, 2)
    got = BlockTensors(block).mean_neighbours(h)
    want = torch.stack([0.25 * h[3] + 0.75 * h[4], h[1], torch.zeros(2)])
    assert torch.allclose(got, want)


@pytest.mark.mpi(sizes=(2,))  # the neighbourhoods are checked at 1, 2 and 4 ranks above
def test_random_walk_training_learns(nranks, comm, shared_tmp):
    from hpcgnn.testing.training import assert_learns
    from hpcgnn.training.config import parse_train_config

    path, _ = make_dataset(comm, shared_tmp, nranks, name="rw", num_nodes=1200, avg_degree=10)
    args = parse_train_config(["--data", path, "--sampler", "randomwalk", "--walks", "10", "--topk", "8",
                       "--hidden", "32",
                       "--epochs", "20", "--batch-size", "32", "--lr", "0.01", "--no-progress", "--eval-every", "20",
                       "--prefetch", "0", "--seed", "1"])
    assert_learns(comm, args, 0.6)



@pytest.mark.parametrize("flags, needle", [
    (["--sampler", "randomwalk", "--model", "gcn"], "'--model': does not apply to --sampler randomwalk"),
    (["--sampler", "randomwalk", "--aggregator", "gcn"], "'--aggregator': does not apply to --sampler randomwalk"),
    (["--sampler", "randomwalk", "--fanouts", "4,4"], "'--fanouts': applies to --sampler neighbor\\|relational only"),
    (["--walks", "3"], "'--walks': applies to --sampler randomwalk only"),
    (["--sampler", "cluster", "--topk", "3"], "'--topk': applies to --sampler randomwalk only"),
    (["--sampler", "randomwalk", "--walk-length", "0"], "'--walk-length': must be an integer"),
])
def test_flags_that_do_not_apply_are_refused(tmp_path, flags, needle):
    from hpcgnn.runtime.errors import InputError
    from hpcgnn.training.config import parse_train_config

    with pytest.raises(InputError, match=needle):
        parse_train_config(["--data", str(tmp_path), *flags])


def test_a_random_walk_model_is_evaluated_on_random_walk_neighbourhoods():
    from hpcgnn.sampling.randomwalk import RandomWalkSampler
    from hpcgnn.tasks.inference import inference_sampler
    from hpcgnn.training.config import train_config

    walks = {"sampler": "randomwalk", "walks": 5, "walk_length": 2, "topk": 3, "seed": 4}
    sampler = inference_sampler(train_config(walks))
    assert isinstance(sampler, RandomWalkSampler) and sampler.num_layers == 1
    assert (sampler.walks, sampler.walk_length, sampler.topk) == (5, 2, 3)
    assert sampler.seed == inference_sampler(train_config(walks)).seed  # repeatable evaluations
    assert sampler.seed != inference_sampler(train_config(dict(walks, seed=5))).seed
    assert inference_sampler(train_config({"sampler": "neighbor"})) is None
    assert inference_sampler(train_config({"sampler": "cluster"})) is None
