"""Formats read without conversion scripts: dotted Shchur npz, MATLAB .mat, node tables beside
an edge list, npz with predefined splits, and edge lists with a count header or no extension.
Each test writes its file and compares the graph with what it wrote."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

from hpcgnn.cli.partition import main as partition_main
from hpcgnn.prep.graph import Graph
from hpcgnn.prep.partition import check_trainable
from hpcgnn.prep.read import detect_format, join_node_table, read_graph
from hpcgnn.runtime.errors import InputError

SRC = np.array([0, 1, 2, 3, 4, 0], dtype=np.int64)
DST = np.array([1, 2, 3, 4, 0, 2], dtype=np.int64)
ROW_MAJOR = np.lexsort((DST, SRC))  # the order a sparse adjacency yields its edges
ADJ = sp.csr_matrix((np.ones(6), (SRC, DST)), shape=(5, 5))
FEAT = np.array([[1, 0, 2], [0, 0, 1], [3, 0, 0], [0, 4, 0], [1, 1, 1]], dtype=np.float32)
LABELS = np.array([0, 2, 1, 1, 0])


def assert_edges(graph, src=SRC, dst=DST, num_nodes=5):
    assert graph.num_nodes == num_nodes
    np.testing.assert_array_equal(graph.src, src)
    np.testing.assert_array_equal(graph.dst, dst)


def dense(matrix):
    return matrix.toarray() if sp.issparse(matrix) else np.asarray(matrix)


def write_text(path, text):
    path.write_text(text)
    return path


# --- Shchur npz with dotted keys (the gnn-benchmark repository's SparseGraph layout) --------------

def dotted(prefix, matrix):
    matrix = sp.csr_matrix(matrix)
    return {f"{prefix}.data": matrix.data, f"{prefix}.indices": matrix.indices,
            f"{prefix}.indptr": matrix.indptr, f"{prefix}.shape": np.array(matrix.shape)}


def test_shchur_dotted_keys(tmp_path):
    path = tmp_path / "amazon.npz"
    np.savez(path, **dotted("adj_matrix", ADJ), **dotted("attr_matrix", FEAT), labels=LABELS,
             class_names=np.array(["books", "cameras", "phones"]), idx_to_node=np.array({0: "a"}, dtype=object))
    assert detect_format(path) == "shchur"
    graph = read_graph(path)
    assert_edges(graph, SRC[ROW_MAJOR], DST[ROW_MAJOR])
    np.testing.assert_array_equal(dense(graph.ndata["feat"]), FEAT)
    np.testing.assert_array_equal(graph.ndata["label"], LABELS)
    assert graph.notes["class_names"] == ["books", "cameras", "phones"]
    # labels as a sparse one-hot matrix in the same dotted layout; node 4 has none
    onehot = np.eye(3, dtype=np.float32)[LABELS]
    onehot[4] = 0
    np.savez(path, **dotted("adj_matrix", ADJ), **dotted("labels", onehot))
    np.testing.assert_array_equal(read_graph(path).ndata["label"], [0, 2, 1, 1, -1])


def test_shchur_dotted_keys_incomplete(tmp_path):
    path = tmp_path / "s.npz"
    parts = dotted("adj_matrix", ADJ)
    del parts["adj_matrix.indptr"]
    np.savez(path, **parts)
    with pytest.raises(InputError, match=r"s\.npz: field 'adj_matrix\.indptr': missing required array"):
        read_graph(path)


# --- MATLAB .mat ------------------------------------------------------------------------------------

# facebook100-like attribute table: status, gender (the label), dorm; 0 = missing
TABLE = np.array([[1, 2, 50], [1, 1, 0], [2, 0, 51], [0, 2, 50], [2, 1, 52]], dtype=np.float64)
TABLE_LABELS = [1, 0, -1, 1, 0]  # gender codes 1, 2 -> classes 0, 1
TABLE_ONE_HOT = np.array([[1, 0, 1, 0, 0],   # status 1, 2 | dorm 50, 51, 52
                          [1, 0, 0, 0, 0],
                          [0, 1, 0, 1, 0],
                          [0, 0, 1, 0, 0],
                          [0, 1, 0, 0, 1]], dtype=np.float32)


def assert_facebook(graph):
    assert_edges(graph, SRC[ROW_MAJOR], DST[ROW_MAJOR])
    np.testing.assert_array_equal(graph.ndata["label"], TABLE_LABELS)
    np.testing.assert_array_equal(dense(graph.ndata["feat"]), TABLE_ONE_HOT)
    assert graph.notes["class_names"] == ["1", "2"]


def write_mat_v73(path, variables):
    """A MATLAB v7.3 file as MATLAB writes it: HDF5 behind a 512-byte header, arrays transposed."""
    with h5py.File(path, "w", userblock_size=512) as mat:
        for name, value in variables.items():
            if sp.issparse(value):
                csc = sp.csc_matrix(value)
                group = mat.create_group(name)
                group.attrs["MATLAB_class"] = np.bytes_("double")
                group.attrs["MATLAB_sparse"] = np.uint64(csc.shape[0])
                group["data"], group["ir"], group["jc"] = csc.data, csc.indices.astype(np.uint64), \
                    csc.indptr.astype(np.uint64)
            else:
                mat[name] = np.asarray(value).T
                mat[name].attrs["MATLAB_class"] = np.bytes_("double")
    header = b"MATLAB 7.3 MAT-file, written by a test".ljust(116) + bytes(8) + b"\x00\x02IM"
    with open(path, "r+b") as fh:
        fh.write(header)


def test_mat_attribute_table(tmp_path):
    path = tmp_path / "penn.mat"
    scipy.io.savemat(path, {"A": ADJ, "local_info": TABLE})
    assert detect_format(path) == "mat"
    assert_facebook(read_graph(path, label_column="1"))
    graph = read_graph(path, label_column=1, table_features=False)
    assert "feat" not in graph.ndata and graph.notes["labels"] == "local_info[:, 1]"
    v73 = tmp_path / "penn73.mat"
    write_mat_v73(v73, {"A": ADJ, "local_info": TABLE})
    assert_facebook(read_graph(v73, label_column=1))


def test_mat_label_and_feature_variables(tmp_path):
    path = tmp_path / "acm.mat"
    scipy.io.savemat(path, {"network": ADJ, "X": FEAT, "gnd": LABELS + 1})  # gnd: 1-based codes, a row vector
    graph = read_graph(path)
    np.testing.assert_array_equal(graph.ndata["label"], LABELS)
    np.testing.assert_array_equal(dense(graph.ndata["feat"]), FEAT)
    assert graph.notes["class_names"] == ["1", "2", "3"]


@pytest.mark.parametrize("variables, options, pattern", [
    ({"P": ADJ, "Q": ADJ.T}, {},
     r"field '--mat-adjacency': cannot tell which variable is the adjacency \(square matrices: "
     r"P \[5x5 sparse\], Q \[5x5 sparse\]\); choose one with --mat-adjacency NAME"),
    ({"A": ADJ, "local_info": TABLE}, {},
     r"field '--label-column': no label variable; take the labels from a column of local_info "
     r"\[5x3 float64\] with --label-column I \(0-based, 0\.\.2\)"),
    ({"A": ADJ, "local_info": TABLE}, {"label_column": "gender"},
     r"field '--label-column': must be a 0-based column index of 'local_info' \(0\.\.2\) \(value gender\)"),
    ({"A": ADJ, "t1": TABLE, "t2": TABLE}, {"label_column": 1},
     r"field '--mat-attributes': --label-column needs one attribute table .*t1 \[5x3 float64\], "
     r"t2 \[5x3 float64\].*choose it with --mat-attributes NAME"),
    ({"A": ADJ}, {"adjacency_var": "B"}, r"field '--mat-adjacency': no numeric variable of that name "
     r"\(variables: A \[5x5 sparse\]\) \(value B\)"),
])
def test_mat_ambiguous_or_missing_roles(tmp_path, variables, options, pattern):
    path = tmp_path / "g.mat"
    scipy.io.savemat(path, variables)
    with pytest.raises(InputError, match=r"g\.mat: " + pattern) as caught:
        read_graph(path, **options)
    assert "\n" not in str(caught.value)


def test_mat_variables_chosen_by_flag(tmp_path):
    path = tmp_path / "g.mat"
    scipy.io.savemat(path, {"P": ADJ * 2, "Q": ADJ, "t1": TABLE, "t2": TABLE[:, ::-1]})
    graph = read_graph(path, adjacency_var="Q", attributes_var="t2", label_column=1)
    assert "weight" not in graph.edata  # Q, not P (whose values are 2)
    np.testing.assert_array_equal(graph.ndata["label"], TABLE_LABELS)


def test_not_a_mat_file(tmp_path):
    path = write_text(tmp_path / "g.mat", "0 1\n")
    with pytest.raises(InputError, match=r"g\.mat: field 'format': not a MATLAB \.mat file"):
        read_graph(path)


# --- node tables beside an edge list ------------------------------------------------------------------

RAW = np.array([10, 20, 30, 40, 50])  # sparse raw ids, relabelled to 0..4 in sorted order


def test_node_table_joined_through_relabelled_ids(tmp_path):
    edges = write_text(tmp_path / "edges.csv", "".join(f"{RAW[s]},{RAW[d]}\n" for s, d in zip(SRC, DST)))
    table = write_text(tmp_path / "nodes.csv", 'user,club,age,score\n40,"b",31,0.5\n10,a,20,1.5\n'
                                               '50,c,44,2.5\n20,,25,3.5\n')
    graph = read_graph(edges, relabel=True, node_table=table, label_column="club")
    assert_edges(graph)
    np.testing.assert_array_equal(graph.ndata["label"], [0, -1, -1, 1, 2])  # 20 has no club, 30 no row
    np.testing.assert_array_equal(graph.ndata["feat"], [[20, 1.5], [25, 3.5], [0, 0], [31, 0.5], [44, 2.5]])
    assert graph.notes["class_names"] == ["a", "b", "c"] and graph.notes["label_column"] == "club"
    graph = read_graph(edges, relabel=True, node_table=table, label_column="club", table_features=False)
    assert "feat" not in graph.ndata


def test_node_table_with_one_based_integer_labels(tmp_path):
    edges = write_text(tmp_path / "e.txt", "".join(f"{s + 1}\t{d + 1}\n" for s, d in zip(SRC, DST)))
    table = write_text(tmp_path / "n.tsv", "id\tlabel\n" + "".join(f"{i + 1}\t{c}\n" for i, c in enumerate(LABELS)))
    graph = read_graph(edges, id_base=1, node_table=table)
    assert_edges(graph)
    np.testing.assert_array_equal(graph.ndata["label"], LABELS)
    assert "feat" not in graph.ndata and "class_names" not in graph.notes


def test_node_table_matches_file_ids_in_any_order(tmp_path):
    # orig_id holds each node's id in the file, whatever order a reader numbered the nodes in
    graph = Graph(3, np.array([0, 1]), np.array([1, 2]), {"orig_id": np.array([30, 10, 20])})
    table = write_text(tmp_path / "n.csv", "id,label,x\n10,1,0.5\n20,2,1.5\n30,0,2.5\n")
    joined = join_node_table(graph, table)
    np.testing.assert_array_equal(joined.ndata["label"], [0, 1, 2])
    np.testing.assert_array_equal(joined.ndata["feat"][:, 0], [2.5, 0.5, 1.5])


@pytest.mark.parametrize("table, options, pattern", [
    ("id,label\n0,1\n7,0\n", {}, r"n\.csv: field 'id': node id is not a node of the edge list's graph .*\(value 7\)"),
    ("id,label\n0,1\n0,2\n", {}, r"n\.csv: field 'id': node id has more than one row \(value 0\)"),
    ("id,club\n0,1\n", {}, r"n\.csv: field '--label-column': no column named 'label' \(columns: id, club\); "
                          r"choose the label column with --label-column NAME"),
    ("id,label,name\n0,1,ann\n", {}, r"n\.csv: field 'name': not a number \(drop the column or pass "
                                     r"--no-table-features\) on line 2 \(value ann\)"),
    ("id,label\n0,1.5\n", {}, r"n\.csv: field 'label': numeric labels must be whole numbers \(value 1\.5\)"),
    ("0,1\n1,0\n", {}, r"n\.csv: field 'header': the first line must be a header"),
    (None, {"label_column": "club"}, r"e\.csv: field 'label_column': applies to a node table: pass --node-table FILE"),
])
def test_node_table_errors(tmp_path, table, options, pattern):
    edges = write_text(tmp_path / "e.csv", "".join(f"{s},{d}\n" for s, d in zip(SRC, DST)))
    if table is not None:
        options["node_table"] = write_text(tmp_path / "n.csv", table)
    with pytest.raises(InputError, match=pattern):
        read_graph(edges, **options)


# --- npz with edges and predefined splits (the heterophily benchmark layout) --------------------

def split_masks(k, n=5, seed=0):
    order = np.random.default_rng(seed).permuted(np.tile(np.arange(n), (k, 1)), axis=1)
    return order < 2, order == 2, order > 2  # per split: 2 train, 1 val, 2 test nodes


def test_npz_with_predefined_splits(tmp_path):
    train, val, test = split_masks(3)
    path = tmp_path / "roman_empire.npz"
    np.savez(path, edges=np.stack([SRC, DST], axis=1), node_features=FEAT, node_labels=LABELS,
             train_masks=train, val_masks=val, test_masks=test.astype(np.uint8))
    assert detect_format(path) == "heterophily"
    graph = read_graph(path, split_index=1)
    assert_edges(graph)
    np.testing.assert_array_equal(graph.ndata["feat"], FEAT)
    np.testing.assert_array_equal(graph.ndata["label"], LABELS)
    for field, masks in zip(("train_mask", "val_mask", "test_mask"), (train, val, test)):
        np.testing.assert_array_equal(graph.ndata[field], masks[1])
    assert graph.notes["split_index"] == 1
    with pytest.raises(InputError, match=r"roman_empire\.npz: field '--split-index': holds 3 predefined splits "
                                         r"\(train_masks \[3, N\]\); choose one with --split-index I \(0\.\.2\)"):
        read_graph(path)
    with pytest.raises(InputError, match=r"field '--split-index': no such split \(0\.\.2\) \(value 3\)"):
        read_graph(path, split_index=3)


def test_npz_with_one_split_in_singular_keys(tmp_path):
    train, val, test = split_masks(1)
    path = tmp_path / "g.npz"
    np.savez(path, edges=np.stack([SRC, DST]), node_labels=LABELS,  # [2, E] edges too
             train_mask=train[0], val_mask=val[0], test_mask=test[0])
    graph = read_graph(path)
    assert_edges(graph)
    np.testing.assert_array_equal(graph.ndata["train_mask"], train[0])
    assert "feat" not in graph.ndata


def test_unknown_npz_names_its_keys(tmp_path):
    path = tmp_path / "g.npz"
    np.savez(path, edge_index=np.stack([SRC, DST]), x=FEAT)
    with pytest.raises(InputError, match=r"g\.npz: field 'keys': npz has neither .*pass --format .*"
                                         r"\(value \['edge_index', 'x'\]\)"):
        detect_format(path)


# --- edge lists with a count header or an unknown extension -----------------------------------------

EDGE_LINES = "".join(f"{s},{d}\n" for s, d in zip(SRC, DST))


@pytest.mark.parametrize("name, text, num_nodes", [
    ("graph.dat", "7,6,0\n" + EDGE_LINES, 7),                         # header wider than the edges
    ("graph", "7 6\n" + EDGE_LINES.replace(",", " "), 7),             # same width, counts the 6 lines after it
    ("graph.dat", "% not a comment here\n" + EDGE_LINES, None),       # not an edge list
    ("graph", EDGE_LINES, 5),                                          # no header: the first line is an edge
    ("graph", "1 2\n" + EDGE_LINES.replace(",", " "), 5),             # 1 node cannot hold these ids: an edge
])
def test_edge_list_sniffed_and_count_header(tmp_path, name, text, num_nodes):
    path = write_text(tmp_path / name, text)
    if num_nodes is None:
        with pytest.raises(InputError, match=r"graph\.dat: field 'format': cannot tell the graph format"):
            detect_format(path)
        return
    assert detect_format(path) == "edgelist"
    graph = read_graph(path)
    edges_in_file = text.count("\n") - (num_nodes == 7)
    first = [1, 2] if text.startswith("1 2") else []
    assert_edges(graph, np.r_[first[:1], SRC], np.r_[first[1:], DST], num_nodes)
    assert graph.num_edges == edges_in_file
    assert graph.notes.get("header_nodes") == (7 if num_nodes == 7 else None)


def test_count_header_overrides(tmp_path):
    path = write_text(tmp_path / "g.dat", "7 6\n" + EDGE_LINES.replace(",", " "))
    graph = read_graph(path, header=False)  # the line is an edge 7 -> 6
    assert graph.num_nodes == 8 and graph.num_edges == 7
    assert read_graph(path, num_nodes=9).num_nodes == 9
    small = write_text(tmp_path / "s.dat", "3,6,1\n" + EDGE_LINES)
    with pytest.raises(InputError, match=r"s\.dat: field 'header': header line 1 gives 3 nodes but node id 4 occurs "
                                         r"\(--num-nodes N overrides the count, --no-header .*\(value 3,6,1\)"):
        read_graph(small)


# --- partition time: a missing split or missing features ---------------------------------------------

def test_labels_without_split_are_refused_featureless_graphs_noted(capsys):
    labelled = Graph(5, SRC, DST, {"label": LABELS}, source="g.npz")
    with pytest.raises(InputError, match=r"g\.npz: field 'train_mask': has labels but no training nodes .*"
                                         r"--split 0\.6,0\.2,0\.2"):
        check_trainable(labelled, "g.npz", None)
    check_trainable(labelled, "g.npz", "dataset")  # partitioned without masks on purpose
    assert "--embed-dim D" in capsys.readouterr().out
    check_trainable(Graph(5, SRC, DST, {"feat": FEAT}), "g.npz", None)  # no labels: nothing to split
    assert capsys.readouterr().out == ""


def test_partition_command_on_mat_and_node_table(tmp_path, capsys):
    mat = tmp_path / "penn.mat"
    scipy.io.savemat(mat, {"A": ADJ, "local_info": TABLE})
    result = subprocess.run([sys.executable, "-m", "hpcgnn.partition", str(mat), "--parts", "2", "--out",
                             str(tmp_path / "mat_parts"), "--label-column", "1", "--split", "0.4,0.2,0.4",
                             "--symmetrize"], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr
    assert "2 classes, label value = class: 0=1, 1=2" in result.stdout and "wrote" in result.stdout
    with open(tmp_path / "mat_parts" / "meta.json") as fh:
        meta = json.load(fh)
    assert meta["num_nodes"] == 5 and meta["node_fields"]["feat"]["shape"] == [5]
    assert meta["source"]["reader"]["labels"] == "local_info[:, 1]"

    edges = write_text(tmp_path / "edges.csv", EDGE_LINES)
    table = write_text(tmp_path / "nodes.csv", "id,club\n" + "".join(f"{i},{'ab'[c % 2]}\n" for i, c in
                                                                      enumerate(LABELS)))
    argv = [str(edges), "--parts", "2", "--out", str(tmp_path / "table_parts"), "--node-table", str(table),
            "--label-column", "club"]
    with pytest.raises(SystemExit) as refused:  # labels but no masks: the remedy is named
        partition_main(argv)
    assert refused.value.code == 2 and "--split 0.6,0.2,0.2" in capsys.readouterr().err
    assert partition_main([*argv, "--split", "0.6,0.2,0.2"]) == 0
    out = capsys.readouterr().out
    assert "no node features (feat); train with --embed-dim D" in out and "0=a, 1=b" in out
    with open(tmp_path / "table_parts" / "meta.json") as fh:
        meta = json.load(fh)
    assert meta["source"]["reader"]["class_names"] == ["a", "b"] and "label" in meta["node_fields"]
