"""Readers: tiny files written here round-trip, formats are detected, bad input is one clear line."""
from __future__ import annotations

import argparse
import collections
import gzip
import os
import pickle

import numpy as np
import pytest
import scipy.sparse as sp

from hpcgnn.prep.graph import Graph
from hpcgnn.prep.read import (
    FORMATS,
    add_reader_arguments,
    detect_format,
    read_graph,
    read_npz,
    reader_options,
    write_npz,
)
from hpcgnn.prep.read.edgelist import read_edgelist
from hpcgnn.prep.read.ogb import read_ogb
from hpcgnn.prep.read.planetoid import read_planetoid
from hpcgnn.prep.read.shchur import read_shchur
from hpcgnn.prep.read.text import read_numeric_table
from hpcgnn.runtime.errors import InputError

SRC = np.array([0, 1, 2, 3, 4, 0], dtype=np.int64)
DST = np.array([1, 2, 3, 4, 0, 2], dtype=np.int64)
WEIGHT = np.array([0.5, 1.0, 2.0, 0.25, 3.0, 1.5], dtype=np.float32)


def edge_text(sep="\t", base=0, weights=False, header=None, newline="\n"):
    lines = [header] if header else []
    for i, (s, d) in enumerate(zip(SRC + base, DST + base)):
        lines.append(sep.join([str(s), str(d)] + ([str(WEIGHT[i])] if weights else [])))
    return newline.join(lines) + newline


def write(path, text):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wt") as fh:
        fh.write(text)
    return path


def assert_edges(graph, num_nodes=5):
    assert graph.num_nodes == num_nodes
    assert graph.src.dtype == np.int64 and graph.dst.dtype == np.int64
    np.testing.assert_array_equal(graph.src, SRC)
    np.testing.assert_array_equal(graph.dst, DST)


# --- edge lists ---------------------------------------------------------------------------------

@pytest.mark.parametrize("filename, text, options", [
    ("g.csv", edge_text(",", header="src,dst"), {}),
    ("g.tsv", edge_text("\t"), {}),
    ("g.txt", edge_text("   "), {}),
    ("g.txt", "# SNAP style\n#  Nodes: 5\n" + edge_text(" ").replace("2\n", "2  # trailing\n", 1), {}),
    ("g.el", edge_text(" ", base=1), {"id_base": 1}),
    ("g.csv.gz", edge_text(",", header="a,b"), {}),
    ("g.edges", edge_text(";"), {"delimiter": ";"}),
    ("g.txt", edge_text(" ", newline="\r\n"), {}),
    ("g.txt", edge_text(" ").rstrip("\n"), {}),
    ("g.txt", "from to\n" + edge_text(" "), {"header": True}),
])
def test_edgelist_variants_round_trip(tmp_path, filename, text, options):
    graph = read_edgelist(write(tmp_path / filename, text), **options)
    assert_edges(graph)
    assert graph.edata == {}
    assert graph.name == "g"


def test_edgelist_weights_and_num_nodes(tmp_path):
    path = write(tmp_path / "w.csv", edge_text(",", weights=True, header="src,dst,weight"))
    graph = read_edgelist(path, num_nodes=8)
    assert_edges(graph, num_nodes=8)
    assert graph.edata["weight"].dtype == np.float32
    np.testing.assert_allclose(graph.edata["weight"], WEIGHT)


def test_edgelist_larger_than_one_chunk(tmp_path):
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, 1000, 300), rng.integers(0, 1000, 300)
    body = "".join(f"{s}\t{d}\n" + ("# note\n" if i % 7 == 0 else "") for i, (s, d) in enumerate(zip(src, dst)))
    path = write(tmp_path / "big.tsv.gz", "src\tdst\n" + body)
    for chunk_bytes in (5, 64, 1000):
        graph = read_edgelist(path, chunk_bytes=chunk_bytes, num_nodes=1000)
        np.testing.assert_array_equal(graph.src, src)
        np.testing.assert_array_equal(graph.dst, dst)


def test_edgelist_bad_token_reports_line_across_chunks(tmp_path):
    lines = [f"{i} {i + 1}" for i in range(40)]
    lines[32] = "32 x33"
    path = write(tmp_path / "bad.txt", "# header comment\n" + "\n".join(lines) + "\n")
    for chunk_bytes in (16, 1 << 20):
        with pytest.raises(InputError, match=r"bad\.txt: field 'dst': not an integer on line 34 \(value x33\)"):
            read_edgelist(path, chunk_bytes=chunk_bytes)


@pytest.mark.parametrize("text, options, pattern", [
    ("0 1\n-1 2\n", {}, r"field 'src': negative node id \(value -1\)"),
    ("0 1\n1 5\n", {"num_nodes": 3}, r"field 'dst': node id out of range.*\(value 5\)"),
    ("1 2\n0 2\n", {"id_base": 1}, r"field 'src': node id below id_base 1.*\(value 0\)"),
    ("0 1\n1.5 2\n", {}, r"field 'src': not an integer on line 2 \(value 1.5\)"),
    ("0 1\n2\n", {}, r"field 'dst': line 2 has 1 column.* \(value 2\)"),
    ("0 1 0.5\n1 2 abc\n", {}, r"field 'weight': not a number on line 2 \(value abc\)"),
    ("0 1 0.5\n1 2 nan\n", {}, r"field 'edge_weight': contains NaN or inf \(value nan\)"),
    ("src dst\n0 1\n", {"header": False}, r"field 'src': not an integer on line 1 \(value src\)"),
    ("", {}, r"field 'src': no edge lines"),
    ("# nothing\n\n", {}, r"field 'src': no edge lines"),
    ("src,dst\n", {}, r"field 'src': no edge lines after the header"),
    ("0 1\n", {"id_base": 2}, r"field 'id_base': must be 0 or 1 \(value 2\)"),
    ("0 1\n", {"num_nodes": 0}, r"field 'num_nodes': must be a positive integer \(value 0\)"),
])
def test_edgelist_bad_input(tmp_path, text, options, pattern):
    path = write(tmp_path / "e.txt", text)
    with pytest.raises(InputError, match=r"e\.txt: " + pattern):
        read_edgelist(path, **options)


def test_edgelist_missing_and_corrupt_gzip(tmp_path):
    with pytest.raises(InputError, match=r"nope\.txt: file not found"):
        read_edgelist(tmp_path / "nope.txt")
    broken = tmp_path / "broken.txt.gz"
    broken.write_bytes(gzip.compress(b"0 1\n1 2\n" * 50)[:-10])  # cut inside the trailer
    with pytest.raises(InputError, match=r"broken\.txt\.gz: cannot read file"):
        read_edgelist(broken)


def test_numeric_table_checks_row_count(tmp_path):
    path = write(tmp_path / "t.csv", "1,2\n3,4\n")
    table = read_numeric_table(path, np.int64, expected_rows=2, order="F")
    assert table.flags.f_contiguous and table.tolist() == [[1, 2], [3, 4]]
    with pytest.raises(InputError, match=r"t\.csv: field 'rows': has 2 rows but 3 expected \(value 2\)"):
        read_numeric_table(path, np.int64, expected_rows=3)
    with pytest.raises(InputError, match=r"t\.csv: field 'rows': more rows than the 1"):
        read_numeric_table(path, np.int64, expected_rows=1)


# --- generic npz (validation of every reader's output) ------------------------------------------

def save_npz(path, **arrays):
    np.savez(path, **arrays)
    return path


@pytest.mark.parametrize("arrays, pattern", [
    ({"src": SRC, "dst": DST[:-1]}, r"field 'dst': src and dst lengths differ \(value 5 vs 6\)"),
    ({"src": SRC.astype(np.float64), "dst": DST}, r"field 'src': must be a 1-D integer array \(value float64"),
    ({"src": SRC, "dst": DST, "feat": np.full((5, 2), np.nan)}, r"field 'feat': contains NaN or inf \(value nan\)"),
    ({"src": SRC, "dst": DST, "feat": np.full((5, 2), np.inf)}, r"field 'feat': contains NaN or inf \(value inf\)"),
    ({"src": SRC[:0], "dst": DST[:0], "num_nodes": np.int64(3)}, r"field 'src': graph has no edges \(value 0\)"),
    ({"src": SRC - 1, "dst": DST}, r"field 'src': negative node id \(value -1\)"),
    ({"src": SRC, "dst": DST, "num_nodes": np.int64(4)}, r"field 'src': node id out of range \[0, 4\) \(value 4\)"),
])
def test_npz_bad_input(tmp_path, arrays, pattern):
    path = save_npz(tmp_path / "g.npz", **arrays)
    with pytest.raises(InputError, match=r"g\.npz: " + pattern):
        read_graph(path)


def test_npz_round_trip_through_read_graph(tmp_path):
    feat = np.arange(10, dtype=np.float32).reshape(5, 2)
    graph = Graph(5, SRC, DST, {"feat": feat}, {"weight": WEIGHT})
    write_npz(graph, tmp_path / "g.npz")
    again = read_graph(tmp_path / "g.npz")
    assert_edges(again)
    np.testing.assert_array_equal(again.ndata["feat"], feat)
    np.testing.assert_array_equal(read_npz(tmp_path / "g.npz").edata["weight"], WEIGHT)


# --- planetoid -----------------------------------------------------------------------------------

def onehot(labels, classes=3):
    out = np.zeros((len(labels), classes), dtype=np.int32)
    for row, label in enumerate(labels):
        if label >= 0:
            out[row, label] = 1
    return out


TOY_FEATURES = np.arange(1, 9 * 4 + 1, dtype=np.float32).reshape(9, 4)
TOY_LABELS = np.array([0, 1, 2, 0, 1, 2, 1, -1, 2])  # node 7 has no row: unlabelled, in no mask
TOY_TEST = [8, 6]
TOY_ADJ = {0: [1, 2], 1: [0], 2: [0, 8], 3: [], 4: [5, 5], 5: [4, 4], 6: [6], 7: [], 8: [2]}


def write_planetoid(directory, name="toy"):
    allx = TOY_FEATURES[:6]
    parts = {"x": sp.csr_matrix(allx[:2]), "y": onehot(TOY_LABELS[:2]),
             "allx": sp.csr_matrix(allx), "ally": onehot(TOY_LABELS[:6]),
             "tx": sp.csr_matrix(TOY_FEATURES[TOY_TEST]), "ty": onehot(TOY_LABELS[TOY_TEST]),
             "graph": collections.defaultdict(list, TOY_ADJ)}
    for part, value in parts.items():
        with open(directory / f"ind.{name}.{part}", "wb") as fh:
            pickle.dump(value, fh, protocol=2)
    (directory / f"ind.{name}.test.index").write_text("".join(f"{i}\n" for i in TOY_TEST))
    return directory


@pytest.mark.parametrize("where", ["directory", "prefix", "file"])
def test_planetoid_assembly(tmp_path, where):
    write_planetoid(tmp_path)
    path = {"directory": tmp_path, "prefix": tmp_path / "ind.toy", "file": tmp_path / "ind.toy.graph"}[where]
    graph = read_planetoid(path)
    assert graph.name == "toy" and graph.num_nodes == 9
    feat = graph.ndata["feat"]
    assert isinstance(feat, sp.csr_matrix) and feat.dtype == np.float32
    expected = TOY_FEATURES.copy()
    expected[7] = 0
    np.testing.assert_array_equal(feat.toarray(), expected)
    np.testing.assert_array_equal(graph.ndata["label"], TOY_LABELS)
    assert np.flatnonzero(graph.ndata["train_mask"]).tolist() == [0, 1]
    assert np.flatnonzero(graph.ndata["val_mask"]).tolist() == [2, 3, 4, 5]  # cut at len(allx)
    assert np.flatnonzero(graph.ndata["test_mask"]).tolist() == [6, 8]
    pairs = [(s, d) for s, ns in TOY_ADJ.items() for d in ns]
    assert list(zip(graph.src.tolist(), graph.dst.tolist())) == pairs


@pytest.mark.parametrize("part, content, pattern", [
    ("allx", b"not a pickle", r"ind\.toy\.allx: field 'allx': not a readable pickle \(value UnpicklingError"),
    ("graph", pickle.dumps(os.getcwd, protocol=2), r"ind\.toy\.graph: field 'graph': .*refusing to load global"),
    ("graph", pickle.dumps({0: [1, 99]}, protocol=2),
     r"ind\.toy\.graph: field 'graph': dst node id out of range \[0, 9\) \(value 99\)"),
    ("graph", pickle.dumps({0: ["a"]}, protocol=2), r"ind\.toy\.graph: field 'graph': neighbour ids must be integers"),
    ("ty", pickle.dumps(onehot([1]), protocol=2), r"ind\.toy\.ty: field 'ty': size differs from tx \(2\) \(value 1\)"),
    ("test.index", b"8\nsix\n", r"ind\.toy\.test\.index: field 'test.index': not an integer node id on line 2"),
    ("test.index", b"8\n3\n", r"field 'test.index': test id inside the allx rows \[0, 6\) \(value 3\)"),
    ("test.index", b"8\n8\n", r"field 'test.index': duplicate test node id \(value 8\)"),
    ("ty", pickle.dumps(onehot([-1, 1]), protocol=2),  # test node 8's label row is empty
     r"ind\.toy: field 'label': node 8 is in test_mask but has label -1 \(unlabelled; 1 such node\(s\)\) \(value 8\)"),
])
def test_planetoid_bad_input(tmp_path, part, content, pattern):
    write_planetoid(tmp_path)
    (tmp_path / f"ind.toy.{part}").write_bytes(content)
    with pytest.raises(InputError, match=pattern):
        read_planetoid(tmp_path)


def test_planetoid_missing_file(tmp_path):
    write_planetoid(tmp_path)
    os.remove(tmp_path / "ind.toy.ty")
    with pytest.raises(InputError, match=r"ind\.toy\.ty: field 'ty': missing Planetoid file"):
        read_graph(tmp_path)
    with pytest.raises(InputError, match=r"field 'name': no Planetoid files"):
        read_planetoid(_empty_dir(tmp_path))


def _empty_dir(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    return empty


# --- shchur ----------------------------------------------------------------------------------------

ADJ = sp.csr_matrix((np.ones(6, dtype=np.float32), (SRC, DST)), shape=(5, 5))
ATTR = sp.csr_matrix(np.array([[1, 0, 2], [0, 0, 1], [3, 0, 0], [0, 4, 0], [1, 1, 1]], dtype=np.float32))
LABELS = np.array([0, 2, 1, 1, 0])
SORTED = np.lexsort((DST, SRC))


def assert_shchur(graph):
    np.testing.assert_array_equal(graph.src, SRC[SORTED])  # row-major nonzero order
    np.testing.assert_array_equal(graph.dst, DST[SORTED])
    assert isinstance(graph.ndata["feat"], sp.csr_matrix) and graph.ndata["feat"].dtype == np.float32
    np.testing.assert_array_equal(graph.ndata["feat"].toarray(), ATTR.toarray())
    np.testing.assert_array_equal(graph.ndata["label"], LABELS)
    assert not any(key.endswith("_mask") for key in graph.ndata) and graph.edata == {}


def csr_parts(prefix, matrix):
    return {f"{prefix}_data": matrix.data, f"{prefix}_indices": matrix.indices,
            f"{prefix}_indptr": matrix.indptr, f"{prefix}_shape": np.array(matrix.shape)}


def test_shchur_plain_arrays(tmp_path):
    path = save_npz(tmp_path / "plain.npz", **csr_parts("adj", ADJ), **csr_parts("attr", ATTR), labels=LABELS)
    assert_shchur(read_shchur(path))
    onehot_labels = sp.csr_matrix(onehot(LABELS))
    path = save_npz(tmp_path / "dense.npz", **csr_parts("adj", ADJ), attr_matrix=ATTR.toarray(),
                    **csr_parts("label", onehot_labels))
    assert_shchur(read_shchur(path))


def test_shchur_pickled_variant_and_weights(tmp_path):
    path = save_npz(tmp_path / "pickled.npz", adj_matrix=ADJ, node_attr=ATTR, node_label=LABELS.astype(np.int32),
                    metadata={"class_names": ["a", "b", "c"]})
    graph = read_shchur(path)
    assert_shchur(graph)
    assert graph.name == "pickled"
    weighted = ADJ.copy()
    weighted.data = np.arange(1, 7, dtype=np.float32)
    graph = read_shchur(save_npz(tmp_path / "w.npz", adj_matrix=weighted, node_attr=ATTR, node_label=LABELS))
    np.testing.assert_array_equal(graph.edata["weight"], weighted.tocsr().data)


@pytest.mark.parametrize("arrays, pattern", [
    ({"attr_matrix": ATTR.toarray(), "labels": LABELS}, r"field 'adj_matrix': missing required array"),
    ({**csr_parts("adj", ADJ), "adj_shape": np.array([5, 6])}, r"field 'adj_shape': adjacency matrix must be square"),
    ({**csr_parts("adj", ADJ), "adj_indices": ADJ.indices + 10}, r"field 'adj_indptr': inconsistent CSR arrays"),
    ({k: v for k, v in csr_parts("adj", ADJ).items() if k != "adj_indptr"},
     r"field 'adj_indptr': missing required array"),
    ({**csr_parts("adj", ADJ), "attr_matrix": np.full((5, 2), np.nan, np.float32)},
     r"field 'feat': contains NaN or inf \(value nan\)"),
    ({**csr_parts("adj", ADJ), "labels": np.array([0.0, 1.5, 0, 0, 0])},
     r"field 'labels': labels must be whole numbers \(value 1.5\)"),
    ({"adj_matrix": np.array(os.getcwd, dtype=object)}, r"field 'adj_matrix': not a readable pickle.*refusing"),
])
def test_shchur_bad_input(tmp_path, arrays, pattern):
    path = save_npz(tmp_path / "s.npz", **arrays)
    with pytest.raises(InputError, match=r"s\.npz: " + pattern):
        read_shchur(path)


# --- ogb -----------------------------------------------------------------------------------------

def write_ogb(root, schemes=("time",)):
    raw = root / "raw"
    raw.mkdir(parents=True)
    write(raw / "edge.csv.gz", edge_text(","))
    write(raw / "num-node-list.csv.gz", "5\n")
    write(raw / "num-edge-list.csv.gz", "6\n")
    write(raw / "node-feat.csv.gz", "".join(f"{i}.5,{-i}\n" for i in range(5)))
    write(raw / "node-label.csv.gz", "3\nnan\n0\n1\n2\n")
    write(raw / "edge-feat.csv.gz", "".join(f"{w}\n" for w in WEIGHT))
    for index, scheme in enumerate(schemes):
        split = root / "split" / scheme
        split.mkdir(parents=True)
        # node 1 is unlabelled (nan), so it is in no split
        for stem, ids in (("train", [0, 2] if index else [2]), ("valid", [3]), ("test", [4])):
            write(split / f"{stem}.csv.gz", "".join(f"{i}\n" for i in ids))
    return root


def test_ogb_round_trip(tmp_path):
    root = write_ogb(tmp_path / "ogbn_toy", schemes=("time", "alt"))
    graph = read_ogb(root, chunk_bytes=8)
    assert_edges(graph)
    assert graph.name == "ogbn_toy"
    np.testing.assert_array_equal(graph.ndata["feat"], [[i + 0.5, -i] for i in range(5)])
    assert graph.ndata["feat"].dtype == np.float32
    np.testing.assert_array_equal(graph.ndata["label"], [3, -1, 0, 1, 2])
    np.testing.assert_allclose(graph.edata["feat"][:, 0], WEIGHT)
    assert np.flatnonzero(graph.ndata["train_mask"]).tolist() == [0, 2]  # "alt" sorts first
    assert np.flatnonzero(read_ogb(root / "raw", split="time").ndata["train_mask"]).tolist() == [2]
    assert np.flatnonzero(graph.ndata["val_mask"]).tolist() == [3]
    assert np.flatnonzero(graph.ndata["test_mask"]).tolist() == [4]


@pytest.mark.parametrize("relative, content, pattern", [
    ("raw/edge.csv.gz", None, r"raw/edge\.csv\.gz: field 'edge': required OGB file missing"),
    ("raw/num-node-list.csv.gz", None, r"num-node-list\.csv\.gz: field 'num-node-list': required OGB file missing"),
    ("raw/edge.csv.gz", "0,1\n1,2\n2,3\n3,4\n4,7\n0,2\n",
     r"edge\.csv\.gz: field 'dst': node id out of range \[0, 5\) \(value 7\)"),
    ("raw/num-edge-list.csv.gz", "7\n", r"edge\.csv\.gz: field 'rows': has 6 rows but 7 edges in num-edge-list"),
    ("raw/node-feat.csv.gz", "1,2\n" * 4, r"node-feat\.csv\.gz: field 'rows': has 4 rows but 5 nodes"),
    ("raw/node-feat.csv.gz", "1,2\n1,2\n1,oops\n1,2\n1,2\n",
     r"node-feat\.csv\.gz: field 'column 2': not a number on line 3 \(value oops\)"),
    ("raw/node-feat.csv.gz", "1,2\n1,2\n1,inf\n1,2\n1,2\n", r"field 'feat': contains NaN or inf \(value inf\)"),
    ("raw/node-label.csv.gz", "0\n1\n0.5\n1\n1\n", r"field 'label': labels must be whole numbers or NaN \(value 0.5\)"),
    ("split/time/test.csv.gz", "4\n9\n", r"test\.csv\.gz: field 'test': node id out of range \[0, 5\) \(value 9\)"),
    ("split/time/valid.csv.gz", None, r"valid\.csv\.gz: field 'valid': required OGB file missing"),
])
def test_ogb_bad_input(tmp_path, relative, content, pattern):
    root = write_ogb(tmp_path / "d")
    os.remove(root / relative)
    if content is not None:
        write(root / relative, content)
    with pytest.raises(InputError, match=pattern):
        read_ogb(root)


def test_ogb_unknown_split(tmp_path):
    root = write_ogb(tmp_path / "d")
    with pytest.raises(InputError, match=r"split: field 'split': no such split scheme \(have \['time'\]\) \(value x\)"):
        read_graph(root, split="x")


# --- detection and command-line options ----------------------------------------------------------

def test_detect_format(tmp_path):
    write_ogb(tmp_path / "ogb")
    (tmp_path / "plan").mkdir()
    write_planetoid(tmp_path / "plan", name="cora")
    cases = {
        tmp_path / "ogb": "ogb",
        tmp_path / "plan": "planetoid",
        tmp_path / "plan" / "ind.cora": "planetoid",
        tmp_path / "plan" / "cora": "planetoid",
        save_npz(tmp_path / "g.npz", src=SRC, dst=DST): "npz",
        save_npz(tmp_path / "a.npz", **csr_parts("adj", ADJ)): "shchur",
        save_npz(tmp_path / "b.npz", adj_matrix=ADJ): "shchur",
    }
    for name in ("e.csv", "e.tsv.gz", "e.txt", "e.edges", "e.el", "E.CSV"):
        cases[write(tmp_path / name, "0 1\n")] = "edgelist"
    for path, expected in cases.items():
        assert detect_format(path) == expected, path
    assert read_graph(tmp_path / "plan" / "cora").num_nodes == 9
    all_formats = "npz, h5graph, edgelist, planetoid, shchur, ogb, mat, heterophily"
    with pytest.raises(InputError, match=r"x\.bin: field 'format': cannot tell .*" + all_formats):
        detect_format(write(tmp_path / "x.bin", "\x00\x01 binary\n"))
    with pytest.raises(InputError, match=r"missing\.csv: file not found"):
        detect_format(tmp_path / "missing.csv")
    with pytest.raises(InputError, match=r"o\.npz: field 'keys': npz has neither.*\(value \['feat'\]\)"):
        detect_format(save_npz(tmp_path / "o.npz", feat=np.zeros(3)))
    with pytest.raises(InputError, match=r"field 'format': directory holds neither"):
        detect_format(_empty_dir(tmp_path))


def test_read_graph_rejects_foreign_options(tmp_path):
    path = save_npz(tmp_path / "g.npz", src=SRC, dst=DST)
    with pytest.raises(InputError, match=r"g\.npz: field 'delimiter': option does not apply to format npz"):
        read_graph(path, delimiter=",")
    with pytest.raises(InputError, match=r"field 'format': unknown format \(choose from"):
        read_graph(path, format="graphml")


def test_reader_arguments(tmp_path):
    parser = argparse.ArgumentParser()
    parser.add_argument("input")
    add_reader_arguments(parser)
    path = write(tmp_path / "e.txt", edge_text(" ", base=1))
    args = parser.parse_args([str(path), "--delimiter", "space", "--no-header", "--id-base", "1", "--num-nodes", "6"])
    options = reader_options(args, args.input)
    assert options == {"delimiter": " ", "header": False, "id_base": 1, "num_nodes": 6}
    assert read_graph(args.input, format=args.format, **options).num_nodes == 6
    args = parser.parse_args([str(path), "--format", "ogb", "--ogb-split", "time"])
    assert reader_options(args) == {"split": "time"}
    args = parser.parse_args(["g.npz", "--format", "npz", "--delimiter", "tab"])
    with pytest.raises(InputError, match=r"g\.npz: field '--delimiter': option does not apply to format npz"):
        reader_options(args, args.input)
    assert set(FORMATS) == {"npz", "h5graph", "edgelist", "planetoid", "shchur", "ogb", "mat", "heterophily",
                            "rdf", "magnn", "ogb_hetero", "typed_npz",
                            "typed_mat"}
    with pytest.raises(SystemExit):
        parser.parse_args(["x", "--header", "--no-header"])
