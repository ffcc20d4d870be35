"""``hpcgnn evaluate --save-embeddings``: row i of a file is the output of node ``orig_id[i]``,
the node's id in the input file, for the chosen layer, with predictions on request; evaluation
says a line per stage."""
import os

import h5py
import numpy as np
import pytest
import torch

from hpcgnn.prep.partition import partition_graph
from hpcgnn.prep.transform import largest_component
from tests.prep.test_orig_ids import two_components


def reference_outputs(checkpoint, data):
    """Every layer's output of ``checkpoint``'s model on dataset ``data``, by input id."""
    from hpcgnn.graph import DistGraph
    from hpcgnn.runtime.comm import world
    from hpcgnn.tasks.inference import layerwise_inference
    from hpcgnn.training.checkpoint import load_checkpoint
    from hpcgnn.training.evaluate import model_from_checkpoint

    graph = DistGraph(data, world())
    layers = {}
    model = model_from_checkpoint(load_checkpoint(checkpoint), graph)
    layerwise_inference(model, graph, on_layer=lambda i, rows: layers.__setitem__(i, rows.copy()))
    by_input_id = np.argsort(graph.orig_id)
    graph.close()
    return {i: rows[by_input_id] for i, rows in layers.items()}


def test_saved_rows_belong_to_the_input_files_nodes(tmp_path, capsys):
    from hpcgnn.evaluate import main as evaluate_main
    from hpcgnn.runtime.comm import world
    from hpcgnn.runtime.errors import InputError
    from hpcgnn.training.config import parse_evaluate_config, parse_train_config
    from hpcgnn.training.evaluate import evaluate_checkpoint
    from hpcgnn.training.loop import run

    graph, kept = two_components()
    partition_graph(largest_component(graph), tmp_path / "kept", 1, "metis")
    partition_graph(graph, tmp_path / "whole", 1, "metis")  # input ids = dataset ids, both components
    run(parse_train_config(["--data", str(tmp_path / "kept"), "--hidden", "6", "--fanouts", "3,3", "--batch-size",
                    "100",
                    "--epochs", "1", "--no-progress", "--prefetch", "0", "--eval-every", "0",
                    "--checkpoint-dir", str(tmp_path / "ck"), "--feature-scale", "none"]), world())
    checkpoint = str(tmp_path / "ck" / "epoch-0001.pt")
    whole = reference_outputs(checkpoint, tmp_path / "whole")  # the other component changes no kept row
    capsys.readouterr()

    for layer, flags in ((1, ["--embedding-layer", "1"]), (-1, ["--save-predictions"])):
        out = tmp_path / f"emb{layer}"
        assert evaluate_main(["--data", str(tmp_path / "kept"), "--checkpoint", checkpoint,
                              "--save-embeddings", str(out), *flags]) == 0
        with h5py.File(out / "embeddings-00000.h5") as h5:
            orig_id, embedding = h5["orig_id"][()], h5["embedding"][()]
            saved = {key: h5[key][()] for key in ("prediction", "probability") if key in h5}
            assert h5.attrs["layer"] == (1 if layer == 1 else 2) and h5.attrs["num_layers"] == 2
        assert np.array_equal(np.sort(orig_id), kept)
        expected = whole[0 if layer == 1 else 1][orig_id]
        assert embedding.shape == expected.shape == (240, 6 if layer == 1 else 4)
        np.testing.assert_allclose(embedding, expected, rtol=1e-5, atol=1e-6)
    logits = expected
    assert np.array_equal(saved["prediction"], logits.argmax(axis=1))
    np.testing.assert_allclose(saved["probability"], torch.softmax(torch.from_numpy(logits), 1).numpy(), atol=1e-6)

    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("evaluate: ")]
    assert [line.split(" (")[0] for line in lines[2:5]] == \
        ["evaluate: inference layer 1/2", "evaluate: inference layer 2/2", "evaluate: metrics of every split"]
    assert lines[0] == f"evaluate: scoring {checkpoint}, epoch 1 (the file given)"
    assert lines[1].startswith("evaluate: load ") and lines[-1].startswith("evaluate: save embeddings")

    for flags, field in ((["--save-embeddings", str(tmp_path / "e"), "--embedding-layer", "3"], "--embedding-layer"),
                         (["--save-predictions"], "--save-predictions")):
        args = parse_evaluate_config(["--data", str(tmp_path / "kept"), "--checkpoint", checkpoint, *flags])
        with pytest.raises(InputError, match=f"field '{field}'"):
            evaluate_checkpoint(args, world())


def test_predictions_of_every_task():
    from hpcgnn.training.outputs import output_layer, predictions

    logits = np.array([[1.0, 3.0, -2.0], [0.0, 0.0, 5.0]], dtype=np.float32)
    label, probability = predictions(logits, "multiclass")
    assert label.tolist() == [1, 2]
    np.testing.assert_allclose(probability, np.exp(logits) / np.exp(logits).sum(1, keepdims=True), rtol=1e-6)
    label, probability = predictions(logits, "multilabel")
    assert label.tolist() == [[1, 1, 0], [0, 0, 1]]
    np.testing.assert_allclose(probability, 1 / (1 + np.exp(-logits)), rtol=1e-6)
    assert [output_layer(n, 3) for n in (1, 3, -1, -3)] == [0, 2, 2, 0]


def write_set(directory, graph, comm, value):
    """Every rank writes its file of a set whose embedding rows all hold ``value``."""
    from hpcgnn.training.outputs import InferenceOutputs

    outputs = InferenceOutputs(str(directory), -1, False, 2, "multiclass")
    n = graph.local_nodes[1] - graph.local_nodes[0]
    return outputs.save(graph, np.full((n, 3), value, np.float32), {"epoch": int(value)})


def test_a_new_set_replaces_an_earlier_larger_one_and_nothing_else(tmp_path):
    """An earlier run with 4 ranks left embeddings-00000..00003.h5; this one has 1 rank: the
    directory then holds exactly this run's files, beside the user's own."""
    import json

    from hpcgnn.graph import DistGraph
    from hpcgnn.runtime.comm import world
    from hpcgnn.testing.graphs import clustered_graph

    partition_graph(clustered_graph(num_nodes=100), tmp_path / "d", 1, "metis")
    out = tmp_path / "emb"
    out.mkdir()
    for rank in range(4):
        with h5py.File(out / f"embeddings-{rank:05d}.h5", "w") as h5:
            h5["embedding"] = np.zeros((5, 3), np.float32)
    mine = {"notes.txt": b"the user's", "embeddings-final.h5": b"not of a set", "embeddings-7.h5": b"nor this"}
    for name, data in mine.items():
        (out / name).write_bytes(data)
    with DistGraph(str(tmp_path / "d"), world()) as graph:
        write_set(out, graph, world(), 7.0)
    assert sorted(p.name for p in out.iterdir()) == sorted(["embeddings-00000.h5", "embeddings.json", *mine])
    assert all((out / name).read_bytes() == data for name, data in mine.items())
    manifest = json.loads((out / "embeddings.json").read_text())
    assert manifest["files"] == ["embeddings-00000.h5"] and manifest["ranks"] == 1 and manifest["epoch"] == 7
    assert manifest["num_nodes"] == 100
    with h5py.File(out / "embeddings-00000.h5") as h5:
        assert (h5["embedding"][()] == 7.0).all() and h5["embedding"].shape == (100, 3)


ONE_RANK_FULL = """
import json, os, resource, signal, sys
from hpcgnn.graph import DistGraph
from hpcgnn.runtime.comm import world
from hpcgnn.runtime.errors import InputError
from tests.training.test_outputs import write_set

comm, out = world(), sys.argv[2]
graph = DistGraph(sys.argv[1], comm)
write_set(out, graph, comm, 1.0)  # the earlier set
comm.Barrier()
before = {name: open(os.path.join(out, name), "rb").read() for name in sorted(os.listdir(out))}
comm.Barrier()
if comm.rank == 1:  # rank 1's disk is full
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (2048, resource.RLIM_INFINITY))
try:
    write_set(out, graph, comm, 2.0)
    message = None
except InputError as exc:
    message = str(exc)
comm.Barrier()
after = {name: open(os.path.join(out, name), "rb").read() for name in sorted(os.listdir(out))}
with open(os.path.join(sys.argv[3], f"report-{comm.rank}.json"), "w") as fh:  # stdout would interleave
    json.dump({"rank": comm.rank, "message": message, "unchanged": after == before, "files": sorted(after)}, fh)
comm.Barrier()
os._exit(0)  # as the entry points end after a failed HDF5 write: h5py may crash freeing the broken file
"""


def test_a_write_that_fails_on_one_rank_fails_on_every_rank_and_leaves_the_earlier_set(tmp_path):
    """Rank 1's disk is full (a file-size limit on it alone): every rank raises a one-line error,
    no rank's new file is left, nor any temporary, and the earlier set is as it was."""
    import json
    import subprocess
    import sys

    from hpcgnn.testing.graphs import clustered_graph
    from tests.conftest import kill_tree, mpiexec_path

    partition_graph(clustered_graph(num_nodes=200), tmp_path / "d", 2, "metis")
    out = tmp_path / "out"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.Popen([mpiexec_path(), "-n", "2", sys.executable, "-c", ONE_RANK_FULL, str(tmp_path / "d"),
                             str(out), str(tmp_path)], cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    try:
        stdout, stderr = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        kill_tree(proc)
        pytest.fail("the job hung: a rank waits for one that failed")
    assert proc.returncode == 0, stderr
    reports = [json.loads((tmp_path / f"report-{rank}.json").read_text()) for rank in (0, 1)]
    assert reports[1]["message"] == f"{out / 'embeddings-00001.h5'}: cannot write (File too large)"
    assert "rank 1 failed" in reports[0]["message"] and "File too large" in reports[0]["message"]
    assert all(r["unchanged"] for r in reports), reports  # nothing new, no temporary, the earlier set intact
    assert reports[0]["files"] == ["embeddings-00000.h5", "embeddings-00001.h5", "embeddings.json"]
