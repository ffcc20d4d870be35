"""``hpcgnn train --task link``: training edges split evenly, learning, N ranks = 1 rank, resume,
evaluation of a link checkpoint, and bad input."""
import json
import os

import numpy as np
import pytest
import torch

from hpcgnn.testing.datasets import make_dataset, make_link_dataset

LINK_KEYS = ("auc", "ap", "mrr", "hits@10", "hits@50", "hits@100")


def flat_params(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()


def link_args(path, *extra):
    from hpcgnn.training.config import parse_train_config

    return parse_train_config(["--data", path, "--task", "link", "--hidden", "16", "--fanouts", "4,4",
                       "--batch-size", "64",
                       "--no-progress", "--prefetch", "1", "--lr", "0.01", *extra])


@pytest.mark.mpi(sizes=(2, 4))
def test_edge_split_is_disjoint_complete_even_and_local_first(nranks, comm, shared_tmp):
    from hpcgnn import DistGraph
    from hpcgnn.graph import edge_split

    path, graph = make_link_dataset(comm, shared_tmp, nranks)
    with DistGraph(path, comm) as g:
        mine = edge_split(g, seed=3)
        everyone = comm.allgather(mine)
        eids = np.concatenate([s.eids for s in everyone])
        assert np.unique(eids).shape[0] == eids.shape[0]  # disjoint
        assert max(len(s.eids) for s in everyone) - min(len(s.eids) for s in everyone) <= 1
        assert eids.shape[0] == g.link_meta["num_train"]  # every training edge, each undirected edge once
        assert np.all(mine.src < mine.dst)
        own = (mine.eids >= g.local_edges[0]) & (mine.eids < g.local_edges[1])
        # src -> dst of each own edge is stored at that position of this rank's CSC
        positions = mine.eids[own] - g.local_edges[0]
        assert np.array_equal(g.indices[positions], mine.src[own])
        owned_dst = np.searchsorted(g.indptr, positions, side="right") - 1 + g.local_nodes[0]
        assert np.array_equal(owned_dst, mine.dst[own])
        # a rank keeps its own edges before taking others': at most its surplus leaves
        local_candidates = int((g.indices.astype(np.int64) < np.repeat(
            np.arange(*g.local_nodes), np.diff(g.indptr))).sum())
        assert own.sum() == min(local_candidates, len(mine.eids))


@pytest.mark.mpi(sizes=(2,))  # 4 ranks: the edge batches and link metrics tests above and below
def test_link_training_learns_planted_communities(nranks, comm, shared_tmp):
    from hpcgnn.training.loop import run

    path, _ = make_link_dataset(comm, shared_tmp, nranks, num_nodes=600, avg_degree=10)
    metrics = os.path.join(shared_tmp, f"m{nranks}.jsonl")
    plots = os.path.join(shared_tmp, f"plots{nranks}")
    model, history = run(link_args(path, "--epochs", "6", "--eval-every", "3", "--metrics-file", metrics,
                                   "--plot", plots), comm)
    assert history[-1]["loss"] < history[0]["loss"]
    # 4 planted communities, 10% of edges across: about 0.83 is the most any model gets (chance 0.5)
    assert history[-1]["val_auc"] > 0.75 and history[-1]["test_auc"] > 0.75, history[-1]
    assert history[-1]["test_mrr"] > 0.2
    params = flat_params(model)
    assert all(np.array_equal(params, other) for other in comm.allgather(params))
    if comm.rank == 0:
        final = [json.loads(line) for line in open(metrics)][-1]
        assert final["final"]
        for split in ("val", "test"):
            for key in LINK_KEYS:
                assert 0.0 <= final[f"{split}_{key}"] <= 1.0, (split, key)
        assert final["metric"] == "auc" and final["selected_by"] == "val_auc"
        assert final["selected_test_auc"] == final["test_auc_at_best_val"]
        assert sorted(os.listdir(plots)) == ["curves.png", "time_breakdown.png"]


def large_count_dataset(comm, shared_tmp, nranks):
    """Collective over comm. The planted-communities link dataset with its features turned into
    raw counts of a large unit (Poisson counts times 1000), as some real graphs ship them."""
    from hpcgnn.prep.edge_split import hold_out_edges
    from hpcgnn.prep.partition import partition_graph
    from hpcgnn.testing.datasets import EDGE_SPLIT, link_graph

    path = os.path.join(shared_tmp, f"counts{nranks}")
    if comm.rank == 0:
        graph = link_graph(num_nodes=600, avg_degree=10)
        rng = np.random.default_rng(0)
        graph.ndata["feat"] = (1000.0 * rng.poisson(2.0 * np.exp(graph.ndata["feat"]))).astype(np.float32)
        partition_graph(hold_out_edges(graph, EDGE_SPLIT, 20, seed=0), path, nranks, "metis")
    comm.barrier()
    return path


@pytest.mark.mpi(sizes=(2,))
def test_the_link_recipe_trains_on_features_of_a_large_scale(nranks, comm, shared_tmp):
    """Without rescaling (--feature-scale none), the first steps blow the logits up (a loss in the
    millions) and the model ends near chance; the default (auto: counts are row-scaled) trains."""
    from hpcgnn.training.loop import run

    path = large_count_dataset(comm, shared_tmp, nranks)
    _, history = run(link_args(path, "--epochs", "6", "--eval-every", "3"), comm)
    assert history[0]["loss"] < 5, history[0]
    assert history[-1]["val_auc"] > 0.75 and history[-1]["test_auc"] > 0.75, history[-1]


@pytest.mark.mpi(sizes=(2, 4))
def test_full_neighbourhood_link_training_on_n_ranks_equals_one(nranks, comm, shared_tmp):
    """Equal edge counts per rank, one batch each, full neighbourhoods and the same negatives (keyed
    by edge id, the same ids in both datasets): the mean of the ranks' gradients is the one-process
    gradient."""
    from hpcgnn.training.loop import run

    graph_args = dict(num_nodes=200, avg_degree=6, divisible_by=nranks)
    multi, _ = make_link_dataset(comm, shared_tmp, nranks, name="even", contiguous=True, **graph_args)
    single, _ = make_link_dataset(comm, shared_tmp, 1, name="even", contiguous=True, **graph_args)
    common = ["--fanouts", "all,all", "--batch-size", "100000", "--dropout", "0", "--epochs", "3",
              "--eval-every", "0", "--prefetch", "0", "--negatives", "2", "--exclude", "none"]
    model, history = run(link_args(multi, *common), comm)
    reference = None
    if comm.rank == 0:
        ref_model, ref_history = run(link_args(single, *common), comm.Split(0, 0))
        reference = (flat_params(ref_model), [h["loss"] for h in ref_history], ref_history[-1]["test_auc"])
    else:
        comm.Split(1, 0)
    reference = comm.bcast(reference, root=0)
    assert np.allclose([h["loss"] for h in history], reference[1], rtol=1e-5, atol=1e-6)
    assert np.allclose(flat_params(model), reference[0], rtol=1e-4, atol=1e-5)
    assert history[-1]["test_auc"] == pytest.approx(reference[2], abs=1e-6)


@pytest.mark.mpi(sizes=(2,))
def test_link_resume_is_bit_exact(nranks, comm, shared_tmp):
    """The plain recipe (dot predictor, corrupted-destination negatives) and a richer one (MLP
    predictor, degree negatives, a learned embedding), one launch."""
    from hpcgnn.training.loop import run

    path, _ = make_link_dataset(comm, shared_tmp, nranks)
    for tag, flags in (("plain", []), ("rich", ["--negative-sampler", "degree", "--predictor", "mlp",
                                                "--embed-dim", "4"])):
        full_dir, cut_dir = os.path.join(shared_tmp, f"full_{tag}"), os.path.join(shared_tmp, f"cut_{tag}")
        every = ["--checkpoint-every", "1", "--eval-every", "2", *flags]
        _, full = run(link_args(path, "--epochs", "4", "--checkpoint-dir", full_dir, *every), comm)
        run(link_args(path, "--epochs", "2", "--checkpoint-dir", cut_dir, *every), comm)
        _, resumed = run(link_args(path, "--epochs", "4", "--checkpoint-dir", cut_dir, "--resume", *every), comm)
        assert [h["loss"] for h in resumed] == [h["loss"] for h in full], tag
        assert all(resumed[-1][f"test_{k}"] == full[-1][f"test_{k}"] for k in LINK_KEYS), tag


@pytest.mark.mpi(sizes=(2,))
def test_evaluate_reports_a_link_checkpoints_training_figures(nranks, comm, shared_tmp):
    from hpcgnn.training.config import parse_evaluate_config
    from hpcgnn.training.evaluate import evaluate_checkpoint
    from hpcgnn.training.loop import run

    path, _ = make_link_dataset(comm, shared_tmp, nranks)
    ck = os.path.join(shared_tmp, "ck_eval")
    _, history = run(link_args(path, "--epochs", "2", "--checkpoint-dir", ck, "--eval-every", "1"), comm)
    out = os.path.join(shared_tmp, "emb")
    figures = evaluate_checkpoint(parse_evaluate_config(
        ["--data", path, "--checkpoint", ck, "--latest", "--save-embeddings", out]), comm)
    for split in ("val", "test"):
        for key in LINK_KEYS + ("loss",):
            assert figures[f"{split}_{key}"] == pytest.approx(history[-1][f"{split}_{key}"], abs=1e-9)
    comm.barrier()
    import h5py

    with h5py.File(os.path.join(out, f"embeddings-{comm.rank:05d}.h5")) as h5:
        assert h5["embedding"].shape[1] == 16  # the encoder's output: every node's embedding


def test_score_edges_reads_each_negatives_own_source():
    from hpcgnn.nn.link import DotPredictor, LinkModel
    from hpcgnn.tasks.link import score_edges

    class Rows:  # the DistTensor interface score_edges reads: gather by global id
        def __init__(self, array):
            self.array = array

        def gather(self, ids):
            return self.array[ids]

    rng = np.random.default_rng(0)
    emb = rng.standard_normal((30, 4)).astype(np.float32)
    src, dst = rng.integers(0, 30, 7), rng.integers(0, 30, 7)
    neg, neg_src = rng.integers(0, 30, (7, 3)), rng.integers(0, 30, (7, 3))
    model = LinkModel(torch.nn.Identity(), DotPredictor(4))
    pos, corrupt = score_edges(model, Rows(emb), src, dst, neg)
    _, pairs = score_edges(model, Rows(emb), src, dst, neg, neg_src)
    assert np.allclose(pos, (emb[src] * emb[dst]).sum(1), atol=1e-6)
    assert np.allclose(corrupt, (emb[src][:, None] * emb[neg]).sum(-1), atol=1e-6)
    assert np.allclose(pairs, (emb[neg_src] * emb[neg]).sum(-1), atol=1e-6)


def test_uniform_pair_negatives_train_and_a_whole_graph_batch_warns(tmp_path, capsys):
    from mpi4py import MPI

    from hpcgnn.training.loop import run

    path, _ = make_link_dataset(MPI.COMM_WORLD, str(tmp_path), 1, name="pairs", negatives_kind="uniform")
    _, history = run(link_args(path, "--epochs", "1", "--eval-every", "1"), MPI.COMM_WORLD)
    assert "warning" not in capsys.readouterr().err
    assert 0.5 < history[-1]["test_auc"] <= 1.0 and history[-1]["test_ap"] is not None
    run(link_args(path, "--epochs", "1", "--eval-every", "0", "--batch-size", "100000"), MPI.COMM_WORLD)
    err = capsys.readouterr().err
    assert "warning: a batch holds 100% of the training edges" in err and "--exclude none" in err
    run(link_args(path, "--epochs", "1", "--eval-every", "0", "--batch-size", "100000", "--exclude", "none"),
        MPI.COMM_WORLD)
    assert "warning" not in capsys.readouterr().err


def test_link_flags_and_datasets_refused_in_one_line(tmp_path, capsys):
    """``hpcgnn train`` run in the test's process, one process (test_hardening runs the command as
    its own processes under mpiexec)."""
    from mpi4py import MPI

    from hpcgnn.train import main

    plain, _ = make_dataset(MPI.COMM_WORLD, str(tmp_path), 1)
    link, _ = make_link_dataset(MPI.COMM_WORLD, str(tmp_path), 1)
    cases = [
        (["--data", plain, "--task", "link"], "no edge sets"),
        (["--data", plain, "--predictor", "mlp"], "--predictor"),
        (["--data", plain, "--metric", "mrr"], "--metric"),
        (["--data", link, "--task", "link", "--class-weight", "balanced"], "--class-weight"),
        (["--data", link, "--task", "link", "--cache-mb", "5"], "--cache-mb"),
        (["--data", link, "--task", "link", "--metric", "f1-macro"], "--metric"),
        (["--data", link, "--task", "link", "--negatives", "0"], "--negatives"),
    ]
    for argv, needle in cases:
        with pytest.raises(SystemExit) as stop:
            main([*argv, "--epochs", "1", "--no-progress"])
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.strip()]
        assert stop.value.code == 2 and len(lines) == 1 and needle in lines[0], (argv, err)
