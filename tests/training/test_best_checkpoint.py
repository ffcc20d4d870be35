"""What a checkpoint directory holds and what is scored from it: the selected epoch's model is
kept as ``best`` and is what ``evaluate`` scores (the very figures the run reported), node-indexed
state is tied to the numbering of the nodes it was trained on, and a directory holds one
dataset's checkpoints."""
import json
import os

import pytest

from hpcgnn.runtime.errors import InputError


def flags(data, *extra):
    return ["--data", str(data), "--hidden", "8", "--fanouts", "3,3", "--batch-size", "50", "--no-progress",
            "--prefetch", "0", *extra]


def evaluated(capsys, *argv):
    """``hpcgnn evaluate``'s figures and the line saying which checkpoint it scored."""
    from hpcgnn.evaluate import main as evaluate_main

    capsys.readouterr()
    assert evaluate_main(list(map(str, argv))) == 0
    lines = capsys.readouterr().out.splitlines()
    figures = lines[-1].split()
    return dict(zip(figures[::2], map(float, figures[1::2]))), [line for line in lines if "scoring" in line]


def test_evaluate_scores_the_model_the_run_reported(tmp_path, capsys):
    """The run's final line leads with the selected epoch's test figures; ``evaluate`` of the
    directory computes the same figures, from that epoch's checkpoint (embedding shards too),
    and says which file and epoch it scored; ``--latest`` scores the last epoch."""
    from hpcgnn.prep.partition import partition_graph
    from hpcgnn.runtime.comm import world
    from hpcgnn.testing.graphs import clustered_graph
    from hpcgnn.training.config import parse_train_config
    from hpcgnn.training.loop import run

    data, ck, metrics = tmp_path / "d", tmp_path / "ck", tmp_path / "m.jsonl"
    partition_graph(clustered_graph(num_nodes=300, p_inside=0.8), data, 1, "metis")
    _, history = run(parse_train_config(flags(data, "--eval-every", "1", "--epochs", "5", "--lr", "0.1",
                                      "--embed-dim", "4",
                                      "--checkpoint-dir", str(ck), "--metrics-file", str(metrics))), world())
    final = [json.loads(line) for line in open(metrics)][-1]
    selected = final["selected_epoch"]
    assert selected < 5, "the test needs a run whose selected epoch is not its last"
    assert (ck / "best").read_text() == f"epoch-{selected:04d}.pt\n"
    assert (ck / "latest").read_text() == "epoch-0005.pt\n"
    kept = {name.split(".")[0] for name in os.listdir(ck) if name.startswith("epoch-")}
    assert kept == {f"epoch-{selected:04d}", "epoch-0005"}  # earlier bests were replaced, not piled up

    figures, said = evaluated(capsys, "--data", data, "--checkpoint", ck)
    assert said == [f"evaluate: scoring {ck / f'epoch-{selected:04d}.pt'}, epoch {selected} "
                    "(best: the epoch the run selected, by val_acc)"]
    for key in ("test_acc", "test_loss"):
        assert figures[key] == pytest.approx(final[f"selected_{key}"], abs=1e-4), key
    figures, said = evaluated(capsys, "--data", data, "--checkpoint", ck, "--latest")
    assert said == [f"evaluate: scoring {ck / 'epoch-0005.pt'}, epoch 5 (latest: the newest checkpoint (--latest))"]
    assert figures["test_acc"] == pytest.approx(history[-1]["test_acc"], abs=1e-4)

    # a new run in the directory starts over: the earlier run's best is not its best
    run(parse_train_config(flags(data, "--eval-every", "0", "--epochs", "1", "--checkpoint-dir", str(ck),
                         "--checkpoint-every", "1")), world())
    assert (ck / "best").read_text() == "epoch-0001.pt\n"  # its one (last, so evaluated) epoch


@pytest.mark.mpi(sizes=(2,))
def test_node_state_of_another_partitioning_is_refused(nranks, comm, shared_tmp):
    """Two random partitionings of one graph: the same part sizes, other nodes in each part. An
    embedding trained on one must not be evaluated or resumed on the other (its rows would land
    on other nodes); a second dataset is refused in the first one's checkpoint directory."""
    from hpcgnn.prep.partition import partition_graph
    from hpcgnn.testing.graphs import clustered_graph
    from hpcgnn.training.config import parse_evaluate_config, parse_train_config
    from hpcgnn.training.evaluate import evaluate_checkpoint
    from hpcgnn.training.loop import run

    first, second = os.path.join(shared_tmp, "first"), os.path.join(shared_tmp, "second")
    if comm.rank == 0:
        for path, seed in ((first, 0), (second, 1)):
            partition_graph(clustered_graph(num_nodes=300), path, nranks, "random", seed=seed)
        starts = [json.load(open(os.path.join(p, "meta.json")))["node_starts"] for p in (first, second)]
        assert starts[0] == starts[1]  # the shards' row ranges alone cannot tell them apart
    comm.barrier()
    ck = os.path.join(shared_tmp, "ck")
    run(parse_train_config(flags(first, "--epochs", "1", "--embed-dim", "4", "--checkpoint-dir", ck)), comm)
    checkpoint = os.path.join(ck, "epoch-0001.pt")

    with pytest.raises(InputError) as exc:  # on every rank alike
        evaluate_checkpoint(parse_evaluate_config(["--data", second, "--checkpoint", ck]), comm)
    message = str(exc.value)
    assert message.startswith(f"{checkpoint}: field 'dataset.nodes': the learnable node embedding was trained on "
                              "another numbering of the nodes"), message
    assert first in message and "--data" in message and "\n" not in message, message
    with pytest.raises(InputError, match="field 'dataset.nodes'"):
        run(parse_train_config(flags(second, "--epochs", "2", "--embed-dim", "4", "--checkpoint-dir", ck, "--resume")),
            comm)
    with pytest.raises(InputError) as exc:  # a new run of the second dataset into the first one's directory
        run(parse_train_config(flags(second, "--epochs", "1", "--checkpoint-dir", ck)), comm)
    assert (f"{ck}: holds the checkpoints of another dataset (clustered at {first}, 300 nodes), not of --data "
            f"{second}; give this run its own --checkpoint-dir") in str(exc.value)  # rank 0's; the others name it
    comm.barrier()
    assert sorted(os.listdir(ck)) == ["best", "epoch-0001.pt", "epoch-0001.rank-00000.emb.npz",
                                      "epoch-0001.rank-00000.opt.npz", "epoch-0001.rank-00001.emb.npz",
                                      "epoch-0001.rank-00001.opt.npz", "latest"]  # nothing moved
    figures = evaluate_checkpoint(parse_evaluate_config(["--data", first, "--checkpoint", ck]), comm)
    assert 0 <= figures["test_acc"] <= 1  # its own dataset is scored


def test_a_checkpoint_older_than_the_fingerprint_is_accepted_with_a_warning(capsys):
    from hpcgnn.training.checkpoint import check_node_state

    here = {"nodes": "a" * 64}
    old = {"config": {"embed_dim": 4}, "epoch": 3}
    check_node_state("ck/epoch-0003.pt", old, here, "hpcgnn evaluate")
    assert capsys.readouterr().err == ("hpcgnn evaluate: warning: ck/epoch-0003.pt: written before checkpoints "
                                       "recorded their dataset: the rows of the learnable node embedding cannot be "
                                       "checked against this dataset's node numbering\n")
    check_node_state("ck/epoch-0003.pt", {"config": {"embed_dim": 0}}, here)  # no node state: nothing to check
    check_node_state("ck/epoch-0003.pt", dict(old, dataset={"nodes": "a" * 64}), here)
    assert capsys.readouterr().err == ""
    with pytest.raises(InputError, match="value bbbbbbbbbbbb in the checkpoint, aaaaaaaaaaaa here"):
        check_node_state("ck/epoch-0003.pt", dict(old, dataset={"nodes": "b" * 64}), here)
