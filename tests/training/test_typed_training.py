"""Training on a typed graph end to end: typed partitions, per-relation sampling, the per-type input
projection (a learned embedding for a type without features), RGCN and RGAT, distributed
inference on the labelled type, and resume."""
import pytest

from hpcgnn.testing.datasets import make_dataset, partition_once
from hpcgnn.testing.graphs import typed_toy_graph

FLAGS = ("--hidden", "16", "--fanouts", "4,4", "--batch-size", "40", "--lr", "0.02", "--no-progress",
         "--prefetch", "0")


def train_config(path, *extra):
    from hpcgnn.training.config import parse_train_config

    return parse_train_config(["--data", path, *FLAGS, *extra])


@pytest.mark.mpi(sizes=(2,))
def test_rgcn_and_rgat_learn_what_only_relations_reveal(nranks, comm, shared_tmp):
    """Papers' own features are noise: accuracy well above chance (0.25) needs the authors' features
    and the venues' learned embeddings, reached through their relations (both models, one launch)."""
    from hpcgnn.testing.training import assert_learns

    path = partition_once(comm, shared_tmp, typed_toy_graph(), nranks, "typed")
    assert_learns(comm, train_config(path, "--model", "rgcn", "--epochs", "12"), 0.6)
    assert_learns(comm, train_config(path, "--model", "rgat", "--heads", "2", "--epochs", "12"), 0.6)


def test_one_process_rgcn_learns_and_a_featureless_type_takes_an_embedding_of_the_hidden_width(tmp_path):
    """RGCN learns on one process too, every row local (run in the test process); paper and author
    project their 8 features, venue has none: its input is the embedding, passed through."""
    from mpi4py import MPI

    from hpcgnn.training.loop import run

    comm = MPI.COMM_WORLD
    path = partition_once(comm, str(tmp_path), typed_toy_graph(), 1, "typed")
    model, history = run(train_config(path, "--model", "rgcn", "--epochs", "12"), comm)
    assert history[0]["loss"] > history[-1]["loss"]
    assert history[-1]["test_acc"] > 0.6, history[-1]
    assert model.projection.type_dims == (8, 8, 0)


@pytest.mark.mpi(sizes=(2,))
def test_typed_resume_is_bit_exact(nranks, comm, shared_tmp):
    from hpcgnn.testing.training import assert_resume_bit_exact

    path = partition_once(comm, shared_tmp, typed_toy_graph(), nranks, "typed")

    def flags(epochs, checkpoint_dir, *extra):
        return train_config(path, "--model", "rgcn", "--epochs", str(epochs), "--checkpoint-dir", checkpoint_dir,
                            "--checkpoint-every", "1", "--eval-every", "1", *extra)

    assert_resume_bit_exact(comm, flags, shared_tmp, "typed")


@pytest.mark.mpi(sizes=(2,))
def test_a_homogeneous_dataset_trains_the_same_through_the_typed_sampler(nranks, comm, shared_tmp):
    """The per-relation sampler on a dataset of one relation draws exactly what the neighbour
    sampler draws, so a run through the typed path repeats today's losses bit for bit."""
    from hpcgnn.training.loop import run

    path, _ = make_dataset(comm, shared_tmp, nranks, num_nodes=400)
    runs = {name: run(train_config(path, "--model", "sage", "--epochs", "2", "--eval-every", "0", "--sampler", name),
                      comm)[1] for name in ("neighbor", "relational")}
    assert [h["loss"] for h in runs["relational"]] == [h["loss"] for h in runs["neighbor"]]
    assert runs["relational"][-1]["test_acc"] == runs["neighbor"][-1]["test_acc"]


def test_link_prediction_on_a_typed_dataset_is_refused_in_one_line(tmp_path):
    from mpi4py import MPI

    from hpcgnn.runtime.errors import InputError
    from hpcgnn.training.loop import run

    comm = MPI.COMM_WORLD
    path = partition_once(comm, str(tmp_path), typed_toy_graph(), 1, "typed")
    with pytest.raises(InputError, match=r"meta.json: field '--task': link prediction on a typed dataset \(3 node "
                                         r"types, 6 relations\) is not supported: train it with --task node"):
        run(train_config(path, "--task", "link", "--epochs", "1"), comm)


def test_a_sampler_that_loses_the_relations_is_refused(tmp_path):
    from mpi4py import MPI

    from hpcgnn.runtime.errors import InputError
    from hpcgnn.training.config import parse_train_config
    from hpcgnn.training.loop import run

    comm = MPI.COMM_WORLD
    path = partition_once(comm, str(tmp_path), typed_toy_graph(), 1, "typed")
    with pytest.raises(InputError, match=r"field '--sampler': the cluster sampler does not keep each edge's relation"):
        run(parse_train_config(["--data", path, "--sampler", "cluster", "--num-clusters", "4", "--epochs", "1",
                                 "--no-progress"]), comm)
