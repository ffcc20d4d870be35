"""Work-balanced steps (--step-balance speed): batch sizes follow the ranks' measured speeds within a
factor of 2 per epoch, the step count never changes, a resized plan still yields unique seeds of
the rank's own, and a balanced run learns and records its sizes."""
import numpy as np
import pytest

from hpcgnn.training.balance import speed_sizes


def test_sizes_follow_speed_sum_to_the_total_and_move_at_most_twofold():
    assert speed_sizes([1.0, 1.0], [100, 100], 200).tolist() == [100, 100]
    assert speed_sizes([1.0, 2.0], [100, 100], 200).tolist() == [133, 67]  # twice the cost: half the seeds
    assert speed_sizes([1.0, 100.0], [100, 100], 200).tolist() == [198, 50]  # bounded: at most halved
    assert speed_sizes([1.0, 100.0], [198, 50], 200).tolist() == [198, 25]
    assert speed_sizes([1.0, 1e9], [2, 1], 3).min() >= 1


@pytest.mark.mpi(sizes=(1, 2))
def test_a_resized_plan_keeps_its_batch_count_and_the_ranks_own_unique_seeds(nranks, comm):
    from hpcgnn.loading.batch_plan import BatchPlan

    mine = np.arange(50) + 1000 * comm.rank
    for drop_last in (False, True):
        plan = BatchPlan(mine, 10, comm, drop_last=drop_last, seed=3)
        assert len(plan) == 5
        for size in (25, 4, 10):
            plan.resize(size)
            batches = plan.batches(epoch=size)
            assert len(batches) == 5
            for batch in batches:
                assert np.isin(batch, mine).all() and np.unique(batch).shape == batch.shape
                assert batch.shape[0] <= size and (size > 10 or batch.shape[0] == size)
            covered = np.unique(np.concatenate(batches))
            assert covered.shape[0] == min(50, 5 * size) if size <= 10 else covered.shape[0] == 50
    with pytest.raises(ValueError, match="positive"):
        plan.resize(0)


@pytest.mark.mpi(sizes=(2,))
def test_the_slower_rank_gets_the_smaller_batches(nranks, comm):
    from hpcgnn.loading.batch_plan import BatchPlan
    from hpcgnn.training.balance import StepBalancer

    plan = BatchPlan(np.arange(400) + 1000 * comm.rank, 100, comm)
    balancer = StepBalancer(plan, comm)
    busy = 2.0 if comm.rank == 1 else 1.0  # rank 1 takes twice as long per seed
    assert balancer.update(busy, 400) == [133, 67]
    assert plan.batch_size == (133, 67)[comm.rank] and len(plan) == 4
    # the next epoch at the new sizes took equal time: the sizes stay
    assert balancer.update(busy * plan.batch_size / 100, 4 * plan.batch_size) == [133, 67]


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
