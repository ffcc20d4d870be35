"""Training with R-GCN's featureless input layer (``--featureless relational``) end to end: the
per-relation rows live in the node embedding (fetched per batch, updated by their owners), learn
where only featureless nodes carry the signal, and resume bit for bit."""
import os

import numpy as np
import pytest

FLAGS = ("--model", "rgcn", "--featureless", "relational", "--hidden", "8", "--fanouts", "4,4", "--batch-size",
         "60", "--lr", "0.02", "--embed-lr", "0.05", "--no-progress", "--prefetch", "0")


def venue_graph(num_papers=300, num_classes=4, venues_per_class=2, feat_dim=6, seed=0):
    """Papers (labelled, features pure noise) in venues (no features) mostly of their class, and
    random citations: only the venues' learned rows reveal a paper's class."""
    from hpcgnn.prep.typed import typed_graph

    rng = np.random.default_rng(seed)
    label = rng.integers(0, num_classes, num_papers)
    venue = label * venues_per_class + rng.integers(0, venues_per_class, num_papers)
    stray = rng.random(num_papers) < 0.1
    venue[stray] = rng.integers(0, num_classes * venues_per_class, int(stray.sum()))
    split = rng.random(num_papers)
    return typed_graph(
        {"paper": num_papers, "venue": num_classes * venues_per_class},
        [("paper", "published_in", "venue", np.arange(num_papers), venue),
         ("paper", "cites", "paper", rng.integers(0, num_papers, 2 * num_papers),
          rng.integers(0, num_papers, 2 * num_papers))],
        typed_fields={"paper": {"feat": rng.standard_normal((num_papers, feat_dim)).astype(np.float32)}},
        target="paper", label=label.astype(np.int64),
        masks={"train_mask": split < 0.6, "val_mask": (split >= 0.6) & (split < 0.8), "test_mask": split >= 0.8},
        name="venues", add_reverse=True)


def venue_dataset(comm, shared_tmp, parts):
    """Collective over comm. Rank 0 partitions :func:`venue_graph` once."""
    from hpcgnn.prep.partition import partition_graph

    path = os.path.join(shared_tmp, f"venues{parts}")
    if comm.rank == 0 and not os.path.exists(path):
        partition_graph(venue_graph(), path, parts, "metis")
    comm.barrier()
    return path


def train_config(path, *extra):
    from hpcgnn.training.config import parse_train_config

    return parse_train_config(["--data", path, *FLAGS, *extra])


@pytest.mark.mpi(sizes=(1, 2))
def test_featureless_rows_learn_what_only_featureless_nodes_reveal(nranks, comm, shared_tmp):
    from hpcgnn.training.loop import run

    path = venue_dataset(comm, shared_tmp, nranks)
    model, history = run(train_config(path, "--epochs", "10"), comm)
    # 4 relations (published_in, cites and their reverses) and the own term: 5 slices of 8 per row
    assert model.projection.featureless_slices == 5 and history[0]["loss"] > history[-1]["loss"]
    assert history[-1]["test_acc"] > 0.7, history[-1]  # chance: 0.25


@pytest.mark.mpi(sizes=(2,))
def test_featureless_rows_resume_bit_exact(nranks, comm, shared_tmp):
    from hpcgnn.testing.training import assert_resume_bit_exact

    path = venue_dataset(comm, shared_tmp, nranks)

    def flags(epochs, checkpoint_dir, *extra):
        return train_config(path, "--epochs", str(epochs), "--checkpoint-dir", checkpoint_dir,
                            "--checkpoint-every", "1", "--eval-every", "1", *extra)

    assert_resume_bit_exact(comm, flags, shared_tmp, "venues")
