"""Synthetic graph generator: exact shape of the output, determinism, planted signal, CLI errors."""
import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

from hpcgnn.generate import main
from hpcgnn.prep.generate import rmat_graph, sbm_graph
from hpcgnn.prep.read.npz import read_npz
from hpcgnn.runtime.errors import InputError

FIELDS = ("feat", "label", "train_mask", "val_mask", "test_mask")


def same_graph(a, b):
    return (a.num_nodes == b.num_nodes and np.array_equal(a.src, b.src) and np.array_equal(a.dst, b.dst)
            and all(np.array_equal(a.ndata[k], b.ndata[k]) for k in FIELDS))


def edge_homophily(graph):
    label = graph.ndata["label"]
    return float(np.mean(label[graph.src] == label[graph.dst]))


def check_edges(graph, num_edges):
    assert graph.num_edges == num_edges
    assert graph.src.dtype == graph.dst.dtype == np.int64
    assert graph.src.min() >= 0 and graph.dst.min() >= 0
    assert max(graph.src.max(), graph.dst.max()) < graph.num_nodes
    assert not np.any(graph.src == graph.dst)
    keys = graph.src * graph.num_nodes + graph.dst
    assert np.all(np.diff(keys) > 0)  # sorted by (src, dst), hence no duplicates


@pytest.fixture(scope="module")
def rmat():
    return rmat_graph(2000, 20000, num_classes=10, homophily=0.7, seed=0)


@pytest.fixture(scope="module")
def sbm():
    return sbm_graph(2000, num_classes=10, avg_degree=10, homophily=0.7, seed=0)


def test_rmat_same_seed_same_arrays_other_seed_differs(rmat):
    assert same_graph(rmat, rmat_graph(2000, 20000, num_classes=10, homophily=0.7, seed=0))
    other = rmat_graph(2000, 20000, num_classes=10, homophily=0.7, seed=1)
    assert not np.array_equal(rmat.dst, other.dst)
    assert not np.array_equal(rmat.ndata["label"], other.ndata["label"])
    assert not np.array_equal(rmat.ndata["feat"], other.ndata["feat"])


def test_rmat_result_does_not_depend_on_chunk_size():
    small_chunks = rmat_graph(20000, 200000, feat_dim=8, seed=3, chunk_edges=1)
    assert same_graph(small_chunks, rmat_graph(20000, 200000, feat_dim=8, seed=3))


def test_sbm_same_seed_same_arrays_other_seed_differs(sbm):
    assert same_graph(sbm, sbm_graph(2000, num_classes=10, avg_degree=10, homophily=0.7, seed=0))
    assert not np.array_equal(sbm.dst, sbm_graph(2000, 10, 10, 0.7, seed=1).dst)


@pytest.mark.parametrize("num_nodes, num_edges", [(2000, 20000), (100, 3000), (3, 6), (2, 1)])
def test_rmat_exact_unique_edges_in_range(num_nodes, num_edges):
    check_edges(rmat_graph(num_nodes, num_edges, feat_dim=4, num_classes=2, homophily=0.5), num_edges)


@pytest.mark.parametrize("num_nodes, classes, avg_degree", [(2000, 10, 10), (50, 3, 30), (10, 2, 8)])
def test_sbm_exact_unique_edges_in_range(num_nodes, classes, avg_degree):
    check_edges(sbm_graph(num_nodes, classes, avg_degree, homophily=0.5, feat_dim=4),
                round(avg_degree * num_nodes))


def test_node_fields_and_masks(rmat, sbm):
    for graph in (rmat, sbm):
        assert graph.ndata["feat"].dtype == np.float32 and graph.ndata["feat"].shape == (2000, 64)
        assert graph.ndata["label"].dtype == np.int64 and set(np.unique(graph.ndata["label"])) == set(range(10))
        masks = np.stack([graph.ndata[k] for k in ("train_mask", "val_mask", "test_mask")])
        assert masks.dtype == bool
        assert np.all(masks.sum(axis=0) == 1)  # disjoint and covering
        assert masks.sum(axis=1).tolist() == [1200, 400, 400]
    assert np.array_equal(np.bincount(sbm.ndata["label"]), np.full(10, 200))


@pytest.mark.parametrize("homophily", [0.0, 0.3, 0.7, 1.0])
def test_rmat_edge_homophily_matches_planted_fraction(homophily):
    graph = rmat_graph(2000, 20000, feat_dim=4, num_classes=10, homophily=homophily, seed=5)
    assert edge_homophily(graph) == pytest.approx(homophily + (1 - homophily) / 10, abs=0.015)


def test_sbm_edge_homophily_is_exact(sbm):
    assert edge_homophily(sbm) == pytest.approx(0.7, abs=1e-4)


def test_rmat_degrees_are_heavy_tailed_sbm_not(rmat, sbm):
    def degrees(graph):
        return np.bincount(graph.src, minlength=2000) + np.bincount(graph.dst, minlength=2000)
    assert degrees(rmat).max() > 15 * degrees(rmat).mean()
    assert degrees(sbm).max() < 3 * degrees(sbm).mean()


def nearest_centroid_accuracy(graph, aggregate):
    features = graph.ndata["feat"].astype(np.float64)
    label, train, test = (graph.ndata[k] for k in ("label", "train_mask", "test_mask"))
    if aggregate:  # mean over the node and its in- and out-neighbours
        n = graph.num_nodes
        adj = sp.coo_matrix((np.ones(graph.num_edges), (graph.src, graph.dst)), shape=(n, n)).tocsr()
        adj = adj + adj.T + sp.identity(n, format="csr")
        features = (adj @ features) / np.asarray(adj.sum(axis=1))
    centroids = np.stack([features[train & (label == k)].mean(axis=0) for k in range(label.max() + 1)])
    distance = ((features[test][:, None, :] - centroids[None]) ** 2).sum(axis=-1)
    return float(np.mean(distance.argmin(axis=1) == label[test]))


def test_labels_need_structure_to_be_learned(rmat, sbm):
    for graph in (rmat, sbm):
        alone = nearest_centroid_accuracy(graph, aggregate=False)
        with_neighbours = nearest_centroid_accuracy(graph, aggregate=True)
        assert 0.15 < alone < 0.5  # chance is 0.1
        assert with_neighbours > alone + 0.3


def test_library_rejects_bad_values():
    with pytest.raises(InputError, match="num_edges"):
        rmat_graph(10, 91)
    with pytest.raises(InputError, match="homophily"):
        sbm_graph(100, num_classes=1, avg_degree=5, homophily=0.5)
    with pytest.raises(InputError, match="fractions"):
        rmat_graph(100, 200, fractions=(0.6, 0.3, 0.3))


def test_cli_writes_readable_npz(tmp_path, capsys):
    out = tmp_path / "new_dir" / "g.npz"
    main(["rmat", "--nodes", "500", "--edges", "4000", "--feat-dim", "8", "--classes", "4",
          "--homophily", "0.6", "--seed", "2", "--out", str(out)])
    summary = capsys.readouterr().out
    assert "500 nodes, 4,000 edges, edge homophily" in summary and "max degree" in summary
    graph = read_npz(out)
    assert same_graph(graph, rmat_graph(500, 4000, feat_dim=8, num_classes=4, homophily=0.6, seed=2))
    main(["sbm", "--nodes", "300", "--avg-degree", "5", "--classes", "3", "--feat-dim", "4",
          "--split", "0.5,0.25,0.25", "--out", str(out)])
    assert read_npz(out).num_edges == 1500
    assert [p for p in os.listdir(out.parent) if p != "g.npz"] == []  # no temp file left behind


def test_module_runs_as_script(tmp_path):
    out = tmp_path / "g.npz"
    done = subprocess.run([sys.executable, "-m", "hpcgnn.generate", "sbm", "--nodes", "40", "--avg-degree",
                           "3", "--classes", "2", "--feat-dim", "2", "--out", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert read_npz(out).num_edges == 120


@pytest.mark.parametrize("flags, message", [
    (["rmat", "--nodes", "0", "--edges", "5"], "field '--nodes': must be an integer in [1, 2147483647] (value 0)"),
    (["rmat", "--nodes", "10", "--edges", "91"], "field '--edges': more than the 90 possible"),
    (["rmat", "--nodes", "10", "--edges", "9", "--homophily", "1.5"], "field '--homophily'"),
    (["sbm", "--nodes", "10", "--avg-degree", "2", "--homophily", "-0.1"], "(value -0.1)"),
    (["sbm", "--nodes", "10", "--avg-degree", "2", "--classes", "0"], "field '--classes'"),
    (["sbm", "--nodes", "10", "--avg-degree", "20"], "field '--avg-degree'"),
    (["rmat", "--nodes", "10", "--edges", "9", "--split", "0.5,x"], "field '--split'"),
])
def test_cli_bad_values_exit_2_naming_the_flag(tmp_path, capsys, flags, message):
    with pytest.raises(SystemExit) as stop:
        main(flags + ["--out", str(tmp_path / "g.npz")])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("hpcgnn generate: error: ") and message in err and err.count("\n") == 1
    assert not (tmp_path / "g.npz").exists()


def test_cli_unwritable_output_dir(tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    out = blocker / "g.npz"
    with pytest.raises(SystemExit) as stop:
        main(["sbm", "--nodes", "10", "--avg-degree", "2", "--out", str(out)])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert f"{out}: field '--out': output directory is not writable (value {blocker})" in err
