"""``hpcgnn evaluate --save-embeddings``: row i of a file is the output of node ``orig_id[i]``,
the node's id in the input file, for the chosen layer, with predictions on request; evaluation
says a line per stage."""
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
    from hpcgnn.training.checkpoint import load_checkpoint
    from hpcgnn.training.evaluate import model_from_checkpoint
    from hpcgnn.training.inference import layerwise_inference

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
    from hpcgnn.training.config import build_evaluate_parser, parse_args
    from hpcgnn.training.evaluate import evaluate_checkpoint
    from hpcgnn.training.loop import run

    graph, kept = two_components()
    partition_graph(largest_component(graph), tmp_path / "kept", 1, "metis")
    partition_graph(graph, tmp_path / "whole", 1, "metis")  # input ids = dataset ids, both components
    run(parse_args(["--data", str(tmp_path / "kept"), "--hidden", "6", "--fanouts", "3,3", "--batch-size", "100",
                    "--epochs", "1", "--no-progress", "--prefetch", "0", "--eval-every", "0",
                    "--checkpoint-dir", str(tmp_path / "ck")]), world())
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
    assert [line.split(" (")[0] for line in lines[1:4]] == \
        ["evaluate: inference layer 1/2", "evaluate: inference layer 2/2", "evaluate: metrics of every split"]
    assert lines[0].startswith("evaluate: load ") and lines[-1].startswith("evaluate: save embeddings")

    parser = build_evaluate_parser()
    for flags, field in ((["--save-embeddings", str(tmp_path / "e"), "--embedding-layer", "3"], "--embedding-layer"),
                         (["--save-predictions"], "--save-predictions")):
        args = parser.parse_args(["--data", str(tmp_path / "kept"), "--checkpoint", checkpoint, *flags])
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
