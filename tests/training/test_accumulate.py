"""Gradient accumulation: K micro-batches per optimizer step train exactly as one batch of all
their seeds, and every rank reduces and steps at the same batches."""
import os

import numpy as np
import pytest
import torch

from hpcgnn.training.loop import micro_batch_role


def test_groups_of_k_with_a_shorter_last_group():
    roles = [micro_batch_role(i, 5, 2) for i in range(5)]
    assert roles == [(0.5, True, False), (0.5, False, True), (0.5, True, False), (0.5, False, True),
                     (1.0, True, True)]
    assert all(role == (1.0, True, True) for role in (micro_batch_role(i, 3, 1) for i in range(3)))


@pytest.mark.mpi(sizes=(2,))
def test_accumulated_micro_batches_equal_one_large_batch(nranks, comm, shared_tmp):
    from hpcgnn.prep.partition import partition_graph
    from hpcgnn.testing.graphs import clustered_graph
    from hpcgnn.training.config import parse_train_config
    from hpcgnn.training.loop import run

    graph = clustered_graph(num_nodes=400, avg_degree=6)
    train = np.zeros(400, dtype=bool)
    train[np.random.default_rng(1).choice(400, 160, replace=False)] = True  # 80 per rank
    graph.ndata["train_mask"] = train
    path = os.path.join(shared_tmp, "d")
    if comm.rank == 0:
        partition_graph(graph, path, nranks, "metis")
    comm.barrier()
    # weight decay: Adam alone is nearly blind to the gradient's scale, which accumulation must get right
    common = ["--data", path, "--fanouts", "all,all", "--dropout", "0", "--epochs", "3", "--lr", "0.01",
              "--weight-decay", "0.05", "--eval-every", "0", "--hidden", "8", "--no-progress", "--prefetch", "0"]
    large, large_history = run(parse_train_config(common + ["--batch-size", "40"]), comm)
    small, small_history = run(parse_train_config(common + ["--batch-size", "20", "--accumulate", "2"]), comm)
    plain, _ = run(parse_train_config(common + ["--batch-size", "20"]), comm)

    def flat(model):
        return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()

    assert np.allclose(flat(small), flat(large), rtol=1e-4, atol=1e-6)
    assert np.allclose([h["loss"] for h in small_history], [h["loss"] for h in large_history], rtol=1e-5)
    assert not np.allclose(flat(plain), flat(large), rtol=1e-4, atol=1e-6)  # twice the steps: another model
