import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from hpcgnn.testing.datasets import make_dataset


def flat_params(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()


def train_args(path, *extra):
    from hpcgnn.training.config import parse_train_config

    return parse_train_config(["--data", path, "--hidden", "16", "--fanouts", "3,4", "--batch-size", "50",
                       "--no-progress",
                       "--prefetch", "1", *extra])


@pytest.mark.mpi(sizes=(2, 4))
def test_loss_decreases_and_ranks_agree(nranks, comm, shared_tmp):
    from hpcgnn.training.loop import run

    path, _ = make_dataset(comm, shared_tmp, nranks, num_nodes=800, p_inside=0.9)
    for model_name in ("sage", "gcn", "gat"):
        model, history = run(train_args(path, "--epochs", "4", "--model", model_name, "--eval-every", "2",
                                        "--lr", "0.01"), comm)
        assert history[-1]["loss"] < history[0]["loss"], (model_name, [h["loss"] for h in history])
        params = flat_params(model)
        everyone = comm.allgather(params)
        assert all(np.array_equal(params, other) for other in everyone), model_name
        assert 0.0 <= history[-1]["test_acc"] <= 1.0


@pytest.mark.mpi(sizes=(2, 4))
def test_full_neighbourhood_one_batch_equals_single_process(nranks, comm, shared_tmp, monkeypatch):
    """Gradients averaged over ranks with equal seed counts = the one-process gradient, also where
    step balance splits the seeds unevenly."""
    from hpcgnn.prep.partition import partition_graph
    from hpcgnn.testing.graphs import clustered_graph
    from hpcgnn.training.loop import run

    graph = clustered_graph(num_nodes=400, avg_degree=6)
    train = np.zeros(400, dtype=bool)
    train[np.random.default_rng(1).choice(400, 40 * nranks // 2 * 2, replace=False)] = True
    graph.ndata["train_mask"] = train
    single = os.path.join(shared_tmp, "single")
    multi = os.path.join(shared_tmp, "multi")
    if comm.rank == 0:
        partition_graph(graph, single, 1, "metis")
        partition_graph(graph, multi, nranks, "metis")
    comm.barrier()
    common = ["--fanouts", "all,all", "--batch-size", "1000", "--dropout", "0", "--epochs", "3", "--lr", "0.01",
              "--eval-every", "0", "--hidden", "8", "--no-progress", "--prefetch", "0"]
    from hpcgnn.testing.training import one_process_reference
    from hpcgnn.training.config import parse_train_config

    model, history = run(parse_train_config(["--data", multi, *common]), comm)
    reference = one_process_reference(comm, single, common)
    assert np.allclose([h["loss"] for h in history], reference[1], rtol=1e-5, atol=1e-6)
    assert np.allclose(flat_params(model), reference[0], rtol=1e-4, atol=1e-5)
    # step balance splits each step's seeds among the ranks by their speeds (here rank 0 taken as 3
    # times as fast as the others from the second epoch on) and weighs each rank's loss by its
    # share: still the one-process gradient
    uneven = lambda costs, current, total: np.array([3] + [1] * (nranks - 1)) * total // (nranks + 2)  # noqa: E731
    monkeypatch.setattr("hpcgnn.training.balance.speed_sizes", uneven)
    model, history = run(parse_train_config(["--data", multi, *common, "--step-balance", "speed"]), comm)
    assert history[0]["batch_sizes"][0] > 2.9 * history[0]["batch_sizes"][1]
    assert np.allclose([h["loss"] for h in history], reference[1], rtol=1e-5, atol=1e-6)
    assert np.allclose(flat_params(model), reference[0], rtol=1e-4, atol=1e-5)


@pytest.mark.mpi(sizes=(2,))
def test_resume_reproduces_uninterrupted_losses(nranks, comm, shared_tmp):
    """With features, and with features and a learned node embedding (one launch)."""
    from hpcgnn.training.loop import run

    path, _ = make_dataset(comm, shared_tmp, nranks, num_nodes=600)
    for tag, embed in (("plain", []), ("emb", ["--embed-dim", "3"])):
        full_dir, cut_dir = os.path.join(shared_tmp, f"ck_full_{tag}"), os.path.join(shared_tmp, f"ck_cut_{tag}")
        _, full = run(train_args(path, "--epochs", "4", "--checkpoint-dir", full_dir, "--checkpoint-every", "1",
                                 "--eval-every", "0", *embed), comm)
        run(train_args(path, "--epochs", "2", "--checkpoint-dir", cut_dir, "--checkpoint-every", "1",
                       "--eval-every", "0", *embed), comm)
        model, resumed = run(train_args(path, "--epochs", "4", "--checkpoint-dir", cut_dir, "--checkpoint-every", "1",
                                        "--eval-every", "0", "--resume", *embed), comm)
        assert [h["loss"] for h in resumed] == [h["loss"] for h in full], tag
        assert resumed[-1]["test_acc"] == full[-1]["test_acc"], tag
        if embed:  # every rank wrote its embedding shard and the shard's optimizer state
            for rank in range(nranks):
                for kind in ("emb", "opt"):
                    assert os.path.exists(os.path.join(cut_dir, f"epoch-0004.rank-{rank:05d}.{kind}.npz"))


@pytest.mark.mpi(sizes=(1, 2))
def test_a_learned_node_embedding_alone_fits_the_training_labels(nranks, comm, shared_tmp):
    """No 'feat' field: the embedding is the only input, so only its updates can fit the labels."""
    from hpcgnn.prep.partition import partition_graph
    from hpcgnn.testing.graphs import clustered_graph
    from hpcgnn.training.loop import run

    if comm.rank == 0:
        graph = clustered_graph(num_nodes=400)
        graph.ndata.pop("feat")  # a dataset of labels and structure only
        partition_graph(graph, os.path.join(shared_tmp, "nofeat"), nranks, "metis")
    comm.Barrier()
    args = train_args(os.path.join(shared_tmp, "nofeat"), "--epochs", "30", "--embed-dim", "16", "--embed-lr", "0.05",
                      "--lr", "0.01", "--eval-every", "0", "--dropout", "0")
    _, history = run(args, comm)
    assert history[-1]["train_acc"] > 0.9, [h["train_acc"] for h in history]
    assert history[-1]["loss"] < 0.5 * history[0]["loss"]


@pytest.mark.mpi(sizes=(1, 2, 4))
def test_inference_equals_single_process_full_graph_forward(nranks, comm, shared_tmp):
    from hpcgnn import DistGraph
    from hpcgnn.nn import GAT, GCN, SAGE
    from hpcgnn.tasks.inference import layerwise_inference, split_accuracy
    from hpcgnn.testing.datasets import oracle

    path, _ = make_dataset(comm, shared_tmp, nranks, num_nodes=300)
    _, indptr, indices = oracle(path)
    from hpcgnn.sampling import Block

    with DistGraph(path, comm) as graph:
        feat = torch.from_numpy(graph.ndata["feat"].gather(np.arange(graph.num_nodes)))
        degree = np.diff(indptr)
        full = Block(graph.num_nodes, graph.num_nodes, indptr, indices, np.arange(indices.shape[0]), degree)
        for cls in (SAGE, GCN, GAT):
            torch.manual_seed(0)
            model = cls(8, 16, 4, num_layers=2).eval()
            with torch.no_grad():
                want = model([full, full], feat, degree)
            got = layerwise_inference(model, graph, batch_size=64, needs_degrees=cls is GCN)
            start, end = graph.local_nodes
            assert torch.allclose(got, want[start:end], atol=1e-5), cls.__name__
            reported = split_accuracy(got, graph)
            labels = torch.from_numpy(graph.ndata["label"].gather(np.arange(graph.num_nodes)).astype(np.int64))
            for mask in ("train_mask", "val_mask", "test_mask"):
                rows = torch.from_numpy(graph.ndata[mask].gather(np.arange(graph.num_nodes)).astype(bool))
                split = mask[:-5]
                assert reported[f"{split}_acc"] == pytest.approx(
                    float((want[rows].argmax(1) == labels[rows]).double().mean()), abs=1e-12), (cls.__name__, split)
                assert reported[f"{split}_loss"] == pytest.approx(
                    float(torch.nn.functional.cross_entropy(want[rows].double(), labels[rows])), rel=1e-4)


FAILING_RUN = """
import sys
from hpcgnn.runtime.comm import world
from hpcgnn.loading.node_loader import NodeDataLoader
original = NodeDataLoader.load
def load(self, *job):
    if world().rank == 1 and self.stats.sample_s > 0:
        raise RuntimeError("rank one broke its batch")
    return original(self, *job)
NodeDataLoader.load = load
from hpcgnn.train import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_failing_rank_ends_the_job_promptly(tmp_path):
    from hpcgnn.prep.partition import partition_graph
    from hpcgnn.testing.graphs import clustered_graph
    from tests.conftest import mpiexec_path

    partition_graph(clustered_graph(num_nodes=600), tmp_path / "d", 2, "metis")
    script = tmp_path / "fail.py"
    script.write_text(FAILING_RUN)
    t0 = time.perf_counter()
    proc = subprocess.run([mpiexec_path(), "-n", "2", sys.executable, str(script), "--data", str(tmp_path / "d"),
                           "--epochs", "50", "--batch-size", "20", "--hidden", "8", "--no-progress"],
                          capture_output=True, text=True, timeout=120, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode != 0
    assert "rank one broke its batch" in proc.stderr and "[rank 1/2]" in proc.stderr
    assert time.perf_counter() - t0 < 60


def test_bad_flags_are_one_line_errors(tmp_path, capsys):
    from hpcgnn.train import main

    for argv, needle in ((["--data", str(tmp_path / "none")], "dataset directory not found"),
                         (["--data", str(tmp_path), "--fanouts", "10,x"], "--fanouts"),
                         (["--data", str(tmp_path), "--fanouts", "5,5", "--layers", "3"], "--fanouts"),
                         (["--data", str(tmp_path), "--resume"], "--checkpoint-dir")):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert needle in err and err.count("\n") == 1, err
    with pytest.raises(SystemExit):
        main(["--data", str(tmp_path), "--model", "transformer"])
    err = capsys.readouterr().err
    assert "unknown model" in err and "transformer" in err and err.count("\n") == 1, err


def test_config_file_mirrors_flags(tmp_path):
    from hpcgnn.training.config import parse_train_config

    (tmp_path / "run.toml").write_text('model = "gat"\nfanouts = [5, 7]\nbatch-size = 64\nhidden = 32\n')
    args = parse_train_config(["--config", str(tmp_path / "run.toml"), "--data", str(tmp_path), "--hidden", "48"])
    assert (args.model.model, args.sampler.options.fanouts, args.optimizer.batch_size, args.model.hidden) == \
        ("gat", (5, 7), 64, 48)
    (tmp_path / "bad.toml").write_text("colour = 3\n")
    from hpcgnn.runtime.errors import InputError

    with pytest.raises(InputError, match="colour"):
        parse_train_config(["--config", str(tmp_path / "bad.toml"), "--data", str(tmp_path)])


def test_metrics_and_plots_are_written(tmp_path):
    from hpcgnn.prep.partition import partition_graph
    from hpcgnn.runtime.comm import world
    from hpcgnn.testing.graphs import clustered_graph
    from hpcgnn.training.loop import run

    partition_graph(clustered_graph(num_nodes=300), tmp_path / "d", 1, "metis")
    run(train_args(str(tmp_path / "d"), "--epochs", "2", "--metrics-file", str(tmp_path / "m.jsonl"),
                   "--plot", str(tmp_path / "plots")), world())
    records = [json.loads(line) for line in open(tmp_path / "m.jsonl")]
    assert records[0]["header"] and [r.get("epoch") for r in records[1:3]] == [1, 2] and records[-1]["final"]
    assert {"test_acc", "val_acc", "epoch_time_s", "phases_s"} <= set(records[-1])
    assert (tmp_path / "plots" / "curves.png").stat().st_size > 1000
    assert (tmp_path / "plots" / "time_breakdown.png").stat().st_size > 1000


def test_evaluate_checkpoint_and_save_embeddings(tmp_path, capsys):
    import h5py

    from hpcgnn.evaluate import main as evaluate_main
    from hpcgnn.prep.partition import partition_graph
    from hpcgnn.runtime.comm import world
    from hpcgnn.testing.graphs import clustered_graph
    from hpcgnn.training.loop import run

    graph = clustered_graph(num_nodes=300)
    partition_graph(graph, tmp_path / "d", 1, "metis")
    _, history = run(train_args(str(tmp_path / "d"), "--epochs", "2", "--checkpoint-dir", str(tmp_path / "ck"),
                                "--checkpoint-every", "2"), world())
    capsys.readouterr()
    assert evaluate_main(["--data", str(tmp_path / "d"), "--checkpoint", str(tmp_path / "ck" / "epoch-0002.pt"),
                          "--save-embeddings", str(tmp_path / "emb")]) == 0
    printed = dict(zip(*[iter(capsys.readouterr().out.splitlines()[-1].split())] * 2))  # the figures' line
    assert float(printed["test_acc"]) == pytest.approx(history[-1]["test_acc"], abs=1e-4)
    with h5py.File(tmp_path / "emb" / "embeddings-00000.h5") as h5:
        assert sorted(h5["orig_id"][()].tolist()) == list(range(300))
        assert h5["embedding"].shape == (300, 4)
    _, history = run(train_args(str(tmp_path / "d"), "--epochs", "2", "--checkpoint-dir", str(tmp_path / "ck_emb"),
                                "--checkpoint-every", "2", "--embed-dim", "5"), world())
    capsys.readouterr()
    assert evaluate_main(["--data", str(tmp_path / "d"), "--checkpoint", str(tmp_path / "ck_emb"), "--latest"]) == 0
    printed = dict(zip(*[iter(capsys.readouterr().out.splitlines()[-1].split())] * 2))  # the figures' line
    assert float(printed["test_acc"]) == pytest.approx(history[-1]["test_acc"], abs=1e-4)
    with pytest.raises(SystemExit):
        evaluate_main(["--data", str(tmp_path / "d"), "--checkpoint", str(tmp_path / "missing.pt")])
    assert "missing.pt" in capsys.readouterr().err


@pytest.mark.parametrize("ranks", [4])  # two ranks per machine: shared memory inside, TCP between
def test_losses_across_emulated_machines_equal_one_host(tmp_path, ranks):
    """2 machines talking TCP (with a progress thread and a remote-row cache) train exactly as one host."""
    from hpcgnn.prep.partition import partition_graph
    from hpcgnn.testing.graphs import clustered_graph
    from tests.conftest import NETNS_TOOL, mpiexec_path

    if os.geteuid() != 0 or not os.path.exists(NETNS_TOOL):
        pytest.skip(f"emulated machines need root and {NETNS_TOOL}")
    partition_graph(clustered_graph(num_nodes=1200, p_inside=0.8), tmp_path / "d", ranks, "metis")
    program = [sys.executable, "-m", "hpcgnn.train", "--data", str(tmp_path / "d"), "--epochs", "3", "--hidden", "16",
               "--fanouts", "4,5", "--batch-size", "60", "--no-progress", "--prefetch", "1", "--eval-every", "3"]
    env = dict(os.environ, OMP_NUM_THREADS="1", MPIEXEC=mpiexec_path(), PPN=str(ranks // 2))
    runs = {}
    for where, launch, extra in (("host", [mpiexec_path(), "-n", str(ranks)], []),
                                 ("machines", ["bash", NETNS_TOOL, "2", "-n", str(ranks)], ["--cache-mb", "0.02"])):
        metrics = tmp_path / f"{where}.jsonl"
        subprocess.run([*launch, *program, "--metrics-file", str(metrics), *extra], check=True, env=env, timeout=300,
                       capture_output=True)
        runs[where] = [json.loads(line) for line in open(metrics)]
    host, net = runs["host"], runs["machines"]
    losses = [[r["loss"] for r in run if "epoch" in r] for run in (host, net)]
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-6)
    assert net[-1]["test_acc"] == pytest.approx(host[-1]["test_acc"], abs=1e-6)
    assert all(r["network_MB"] > 0 and r["cache_hit_rate"] > 0 for r in net if "epoch" in r)
    assert all(r["network_MB"] == 0 for r in host if "epoch" in r)


def test_thread_plan_gives_the_prefetch_thread_a_core_only_when_there_is_one(monkeypatch):
    from hpcgnn.training.session import thread_plan

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert thread_plan(-1, 1) == (0, 1)
    assert thread_plan(-1, 8) == (2, 7)
    assert thread_plan(0, 8) == (0, 8)
    assert thread_plan(3, 1) == (3, 1)
    assert thread_plan(-1, 1, gpu=True) == (2, 1)  # the rank's own thread waits for its GPU, blocked
    assert thread_plan(0, 1, gpu=True) == (0, 1)
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    assert thread_plan(-1, 8) == (2, 4)
