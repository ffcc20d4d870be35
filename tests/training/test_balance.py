"""Work-balanced steps (--step-balance speed): batch sizes follow the ranks' measured speeds within a
factor of 2 per update, from within the epoch, the step count never changes, a resized plan still yields unique seeds of
the rank's own, and a balanced run learns and records its sizes."""
import numpy as np
import pytest

from hpcgnn.training.balance import speed_sizes


def test_sizes_follow_speed_sum_to_the_total_move_at_most_twofold_and_not_for_noise():
    assert speed_sizes([1.0, 1.0], [100, 100], 200).tolist() == [100, 100]
    assert speed_sizes([1.0, 2.0], [100, 100], 200).tolist() == [133, 67]  # twice the cost: half the seeds
    assert speed_sizes([1.0, 100.0], [100, 100], 200).tolist() == [198, 50]  # bounded: at most halved
    assert speed_sizes([1.0, 100.0], [198, 50], 200).tolist() == [198, 25]
    assert speed_sizes([1.0, 1e9], [2, 1], 3).min() >= 1
    assert speed_sizes([1.0, 1.15], [100, 100], 200).tolist() == [100, 100]  # within the dead band: kept
    assert speed_sizes([1.0, 1.25], [100, 100], 200).tolist() == [111, 89]


@pytest.mark.mpi(sizes=(1, 2))
def test_a_resized_plan_keeps_its_batch_count_and_the_ranks_own_unique_seeds(nranks, comm):
    from hpcgnn.loading.batch_plan import BatchPlan

    mine = np.arange(50) + 1000 * comm.rank
    for drop_last in (False, True):
        plan = BatchPlan(mine, 10, comm, drop_last=drop_last, seed=3)
        assert len(plan) == 5
        for size in (25, 4, 10):
            plan.resize(size)
            batches = list(plan.batches(epoch=size))
            assert len(batches) == 5
            for batch in batches:
                assert np.isin(batch, mine).all() and np.unique(batch).shape == batch.shape
                assert batch.shape[0] <= size and (size > 10 or batch.shape[0] == size)
            covered = np.unique(np.concatenate(batches))
            assert covered.shape[0] == min(50, 5 * size) if size <= 10 else covered.shape[0] == 50
    with pytest.raises(ValueError, match="positive"):
        plan.resize(0)


@pytest.mark.mpi(sizes=(1,))
def test_a_resize_within_an_epoch_applies_from_the_next_batch_taken(nranks, comm):
    from hpcgnn.loading.batch_plan import BatchPlan

    mine = np.arange(100)
    plan = BatchPlan(mine, 10, comm)
    fixed = list(plan.batches(epoch=0))
    batches = iter(plan.batches(epoch=0))
    first = next(batches)
    plan.resize(30)  # the rest: 9 batches of 30 need 270 seeds, the order has 90 left
    rest = list(batches)
    assert np.array_equal(first, fixed[0]) and len(rest) == 9
    assert [b.shape[0] for b in rest[:3]] == [30, 30, 30]
    assert np.array_equal(rest[0], np.sort(np.concatenate(fixed[1:4])))  # the same order, made unique
    assert all(np.isin(b, mine).all() and np.unique(b).shape == b.shape for b in rest)
    plan.resize(10)
    assert all(np.array_equal(a, b) for a, b in zip(plan.batches(epoch=0), fixed))  # a size kept: as before


@pytest.mark.mpi(sizes=(2,))
def test_the_slower_rank_gets_the_smaller_batches_within_the_epoch(nranks, comm):
    from hpcgnn.loading.batch_plan import BatchPlan
    from hpcgnn.training.balance import StepBalancer

    plan = BatchPlan(np.arange(4000) + 10_000 * comm.rank, 100, comm)
    balancer = StepBalancer(plan, comm, window=3)
    per_seed = 0.002 if comm.rank == 1 else 0.001  # rank 1 takes twice as long per seed
    sizes = []
    for _ in range(6):
        balancer.observe(per_seed * plan.batch_size, plan.batch_size)
        sizes.append(plan.batch_size)
    # the first window's costs are posted at step 3 and applied by step 6 at the latest
    assert sizes[:3] == [100] * 3 and sizes[-1] == (133, 67)[comm.rank]
    # the steps since at the new sizes took equal time: the sizes stay
    balancer.observe(per_seed * plan.batch_size, plan.batch_size)
    assert balancer.settle() == [133, 67] and len(plan) == 40
    assert balancer.settle() == [133, 67]  # nothing observed since: nothing changes


@pytest.mark.mpi(sizes=(2,))
def test_the_runs_first_step_does_not_count(nranks, comm):
    """A first step slowed alike on every rank by one-time costs leaves the first window's shares
    to the steps after it."""
    from hpcgnn.loading.batch_plan import BatchPlan
    from hpcgnn.training.balance import StepBalancer

    plan = BatchPlan(np.arange(4000) + 10_000 * comm.rank, 100, comm)
    balancer = StepBalancer(plan, comm, window=3)
    per_seed = 0.002 if comm.rank == 1 else 0.001
    balancer.observe(5.0 + per_seed * plan.batch_size, plan.batch_size)  # 5 s of start-up on both ranks
    for _ in range(5):
        balancer.observe(per_seed * plan.batch_size, plan.batch_size)
    assert plan.batch_size == (133, 67)[comm.rank]


def test_split_counts_are_proportional_integers_that_sum_to_the_total():
    from hpcgnn.loading.batch_plan import split_count

    assert split_count(300, [2, 1]).tolist() == [200, 100]
    assert split_count(10, [1, 1, 1]).tolist() == [4, 3, 3]  # the rest to the lower rank on a tie
    assert split_count(7, [5, 0]).tolist() == [7, 0]
    assert split_count(0, [3, 1]).tolist() == [0, 0]


@pytest.mark.mpi(sizes=(2, 4))
def test_lent_seeds_cover_each_step_once_and_weigh_the_ranks_by_their_share(nranks, comm):
    from hpcgnn.loading.batch_plan import BatchPlan

    # unequal seed counts: the ranks with fewer pad their own batches, as without lending
    mine = np.arange(40 + 7 * comm.rank) + 1000 * comm.rank
    plan = BatchPlan(mine, 10, comm, seed=5)
    planned = [comm.allgather(b) for b in plan.batches(epoch=1)]  # every rank's own batches, step by step
    plan.lend()
    shares = [3 if r == 0 else 1 for r in range(nranks)]
    plan.share(shares, 0)
    plan.share([1] * nranks, from_batch=3)  # equal again from the fourth step
    batches = plan.batches(epoch=1)
    taken = list(batches)
    assert len(taken) == len(planned) == len(plan)
    for index, batch in enumerate(taken):
        everyone = comm.allgather(batch)
        step = np.concatenate(everyone)
        # the step's seeds are the ranks' own batches taken together, each once
        assert np.array_equal(np.sort(step), np.sort(np.concatenate(planned[index])))
        counts = [b.shape[0] for b in everyone]
        if index < 3 and nranks == 2:
            assert abs(counts[0] - 3 * counts[1]) <= 3, counts
        if index >= 3:
            assert max(counts) - min(counts) <= 1, counts
        weights = comm.allgather(batches.weight(index))
        assert np.isclose(sum(weights), nranks)
        assert np.isclose(weights[comm.rank], nranks * counts[comm.rank] / step.size)


@pytest.mark.mpi(sizes=(2,))
def test_lending_follows_the_measured_speeds_from_a_batch_no_rank_has_cut(nranks, comm):
    from hpcgnn.loading.batch_plan import BatchPlan
    from hpcgnn.training.balance import StepBalancer

    plan = BatchPlan(np.arange(4000) + 10_000 * comm.rank, 100, comm)
    balancer = StepBalancer(plan, comm, window=2, lend=True, ahead=2)
    per_seed = 0.002 if comm.rank == 1 else 0.001
    batches = iter(plan.batches(epoch=0))
    counts = []
    for _ in range(8):
        batch = next(batches)
        counts.append(batch.shape[0])
        balancer.observe(per_seed * batch.shape[0], batch.shape[0])
    # posted at step 2, applied at step 3, from batch 3 + 2 + 1 on (0-based): two batches ahead
    assert counts[:6] == [100] * 6 and counts[6] == (133, 67)[comm.rank]
    assert plan.batch_size == 100 and balancer.settle() == [133, 67]


@pytest.mark.mpi(sizes=(2,))
def test_a_balanced_run_learns_with_equal_steps_and_records_its_sizes(nranks, comm, shared_tmp):
    from hpcgnn.testing.datasets import make_dataset
    from hpcgnn.testing.training import assert_learns
    from hpcgnn.training.config import parse_train_config
    from hpcgnn.training.loop import run

    path, _ = make_dataset(comm, shared_tmp, nranks, name="balance", num_nodes=300, avg_degree=6, p_inside=0.9)
    base = ["--data", path, "--fanouts", "4,4", "--batch-size", "10", "--hidden", "16", "--no-progress",
            "--prefetch", "0", "--lr", "0.02", "--step-balance", "speed"]
    _, history = run(parse_train_config([*base, "--epochs", "3", "--eval-every", "0"]), comm)
    assert len({r["steps"] for r in history}) == 1
    for record in history:
        sizes = record["batch_sizes"]
        assert len(sizes) == nranks and min(sizes) >= 1 and abs(sum(sizes) - 10 * nranks) <= nranks
    assert_learns(comm, parse_train_config([*base, "--epochs", "12"]), 0.5)
