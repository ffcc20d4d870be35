"""Typed readers on small files each test writes: RDF N-Triples with label files, MAGNN's npz
layout (and HGB's split), the typed npz layout, OGB's heterogeneous raw layout and MATLAB files
of per-relation matrices. Each test compares the typed graph with what it wrote, relation by
relation; the bad inputs of each are refused in one line naming file, field and value."""
from __future__ import annotations

import gzip
import os

import numpy as np
import pytest

from hpcgnn.format.schema import ETYPE
from hpcgnn.prep.read import detect_format, read_graph
from hpcgnn.runtime.errors import InputError

SHARED = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data")


def relation_edges(graph, rel):
    """``(src, dst)`` of relation ``rel``, ids local to each end's type, sorted by (src, dst)."""
    schema = graph.schema
    r = schema.relation_index(rel)
    src_type, _, dst_type = schema.relations[r]
    keep = graph.edata[ETYPE] == r
    src = graph.src[keep] - graph.type_offsets[schema.type_index(src_type)]
    dst = graph.dst[keep] - graph.type_offsets[schema.type_index(dst_type)]
    order = np.lexsort((dst, src))
    return src[order], dst[order]


def pairs(src, dst):
    return sorted(zip(np.asarray(src).tolist(), np.asarray(dst).tolist()))


def one_line(exc):
    text = str(exc.value)
    assert "\n" not in text
    return text


# ---------------------------------------------------------------------------------------------- RDF

EX = "http://example.org/"
TRIPLES = [
    f"<{EX}p1> <{EX}onto#worksWith> <{EX}p2> .",
    f"<{EX}p2> <{EX}onto#worksWith> <{EX}p3> .",
    f"<{EX}p1> <http://www.w3.org/1999/02/22-rdf-syntax-ns#type> <{EX}Person> .",
    f"<{EX}p2> <http://www.w3.org/1999/02/22-rdf-syntax-ns#type> <{EX}Person> .",
    "# a comment line",
    "",
    f'<{EX}p3> <{EX}onto#name> "Ann \\"A\\" Smith"@en .',
    f'<{EX}p4> <{EX}onto#name> "1999"^^<http://www.w3.org/2001/XMLSchema#gYear> .',
    f'<{EX}p5> <{EX}onto#name> "1999" .',
    f"_:b7 <{EX}other/type> <{EX}p4> .",
    f"<{EX}p5> <{EX}onto#worksWith> <{EX}p6> .",
    f"<{EX}p6> <{EX}onto#worksWith> _:b7 .",
]
# term -> node id in order of first appearance
NODES = [f"<{EX}p1>", f"<{EX}p2>", f"<{EX}p3>", f"<{EX}Person>", '"Ann \\"A\\" Smith"@en', f"<{EX}p4>",
         '"1999"^^<http://www.w3.org/2001/XMLSchema#gYear>', f"<{EX}p5>", '"1999"', "_:b7", f"<{EX}p6>"]
TRAIN = {"p1": "gA", "p2": "gB", "p3": "gA", "p4": "gB", "p5": "gA"}
TEST = {"p6": "gB"}


def write_rdf(directory, triples=TRIPLES, train=TRAIN, test=TEST, compress=True, header="person\tid\tlabel_group"):
    os.makedirs(directory, exist_ok=True)
    text = "\n".join(triples) + "\n"
    path = os.path.join(directory, "kg.nt.gz" if compress else "kg.nt")
    if compress:
        with gzip.open(path, "wt", encoding="utf-8") as fh:
            fh.write(text)
    else:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    for name, rows in (("trainingSet.tsv", train), ("testSet.tsv", test)):
        with open(os.path.join(directory, name), "w", newline="") as fh:  # CRLF, as the R-GCN files
            fh.write(header + "\r\n")
            for i, (entity, label) in enumerate(rows.items()):
                fh.write(f"{EX}{entity}\t{i}.0\t{EX}{label}\r\n")
    return path


def test_rdf_nodes_relations_inverses_and_labels(tmp_path):
    path = write_rdf(tmp_path / "kg")
    assert detect_format(path) == "rdf" and detect_format(tmp_path / "kg") == "rdf"
    graph = read_graph(tmp_path / "kg", val_fraction=0.0)
    assert graph.schema.node_types == ("entity",)
    assert graph.num_nodes == len(NODES)  # literals are nodes; "1999" and "1999"^^gYear are two
    names = graph.schema.relation_names
    assert names == ("worksWith", "type", "name", "type_2", "rev_worksWith", "rev_type", "rev_name", "rev_type_2")
    assert graph.notes["relations"]["type_2"] == f"{EX}other/type"
    ids = {term: i for i, term in enumerate(NODES)}
    works = [(f"<{EX}p1>", f"<{EX}p2>"), (f"<{EX}p2>", f"<{EX}p3>"), (f"<{EX}p5>", f"<{EX}p6>"),
             (f"<{EX}p6>", "_:b7")]
    expect = pairs([ids[s] for s, _ in works], [ids[d] for _, d in works])
    assert pairs(*relation_edges(graph, "worksWith")) == expect
    assert pairs(*relation_edges(graph, "rev_worksWith")) == sorted((d, s) for s, d in expect)
    assert pairs(*relation_edges(graph, "type_2")) == [(ids["_:b7"], ids[f"<{EX}p4>"])]
    label = graph.ndata["label"]
    assert graph.notes["class_names"] == [f"{EX}gA", f"{EX}gB"]
    for entity, cls in {**TRAIN, **TEST}.items():
        assert label[ids[f"<{EX}{entity}>"]] == (0 if cls == "gA" else 1)
    assert (label[[ids[t] for t in NODES if t[1:-1].rsplit("/", 1)[-1] not in TRAIN | TEST]] == -1).all()
    train = {ids[f"<{EX}{e}>"] for e in TRAIN}
    assert set(np.flatnonzero(graph.ndata["train_mask"])) == train
    assert not graph.ndata["val_mask"].any()
    assert set(np.flatnonzero(graph.ndata["test_mask"])) == {ids[f"<{EX}p6>"]}
    # the same triples uncompressed read the same graph
    plain = read_graph(write_rdf(tmp_path / "plain", compress=False), val_fraction=0.0)
    np.testing.assert_array_equal(plain.src, graph.src)
    np.testing.assert_array_equal(plain.edata[ETYPE], graph.edata[ETYPE])


def test_rdf_validation_part_is_stratified_and_seeded(tmp_path):
    many = {f"p{i}": ("gA" if i % 2 else "gB") for i in range(1, 21)}
    triples = [f"<{EX}p{i}> <{EX}knows> <{EX}p{i + 1}> ." for i in range(1, 22)]
    write_rdf(tmp_path, triples=triples, train=many, test={"p21": "gA"})
    first = read_graph(tmp_path, val_fraction=0.2, split_seed=5)
    again = read_graph(tmp_path, val_fraction=0.2, split_seed=5)
    other = read_graph(tmp_path, val_fraction=0.2, split_seed=6)
    val, train, label = first.ndata["val_mask"], first.ndata["train_mask"], first.ndata["label"]
    assert np.bincount(label[val]).tolist() == [2, 2]  # 20% of each class's 10
    assert train.sum() == 16 and not (train & val).any()
    np.testing.assert_array_equal(again.ndata["val_mask"], val)
    assert not np.array_equal(other.ndata["val_mask"], val)


@pytest.mark.parametrize("change, options, field, pattern", [
    (lambda d: open(d / "kg.nt", "a").write("<a> <b> broken .\n"), {}, "line 13", "not an N-Triples line"),
    (lambda d: os.remove(d / "trainingSet.tsv"), {}, "--labels", "no label file"),
    (lambda d: open(d / "testSet.tsv", "a").write(f"{EX}nobody\t9\t{EX}gA\r\n"), {}, "--entity-column",
     "cannot tell the entity column"),
    (None, {"label_column": "nope"}, "--label-column", "no such column"),
    (None, {"entity_column": "id"}, "line 2", "not a node of the graph"),
    (lambda d: open(d / "testSet.tsv", "a").write(f"{EX}p1\t9\t{EX}gA\r\n"), {}, "entity", "also in the training"),
])
def test_rdf_bad_input_one_line(tmp_path, change, options, field, pattern):
    write_rdf(tmp_path, compress=False)
    if change is not None:
        change(tmp_path)
    with pytest.raises(InputError, match=pattern) as exc:
        read_graph(tmp_path / "kg.nt", **options)
    assert f"field '{field}'" in one_line(exc)


# -------------------------------------------------------------------------------------------- MAGNN

# nodes interleaved on purpose: a node's id inside its type is its rank among that type's nodes
MAGNN_TYPES = np.array([1, 0, 1, 2, 0, 1, 0, 1], dtype=np.int32)  # authors 1,4,6; papers 0,2,5,7; term 3
MAGNN_LINKS = [(1, 0), (4, 2), (6, 5), (6, 7), (0, 3), (7, 3)]  # author-paper, paper-term (global ids)


def write_magnn(directory, types=MAGNN_TYPES, links=MAGNN_LINKS, hgb=True):
    os.makedirs(directory, exist_ok=True)
    import scipy.sparse as sp
    n = types.shape[0]
    rows = [a for a, b in links] + [b for a, b in links]
    cols = [b for a, b in links] + [a for a, b in links]
    sp.save_npz(os.path.join(directory, "adjM.npz"), sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(n, n)))
    np.save(os.path.join(directory, "node_types.npy"), types)
    counts = np.bincount(types)
    sp.save_npz(os.path.join(directory, "features_0.npz"), sp.csr_matrix(np.eye(counts[0], 5, dtype=np.int64)))
    np.save(os.path.join(directory, "features_1.npy"), np.arange(counts[1] * 2, dtype=np.float64).reshape(-1, 2))
    np.save(os.path.join(directory, "labels.npy"), np.array([2, 0, 1], dtype=np.int64))
    np.savez(os.path.join(directory, "train_val_test_idx.npz"), train_idx=np.array([0]), val_idx=np.array([2]),
             test_idx=np.array([1]))
    if hgb:
        os.makedirs(os.path.join(directory, "hgb_split"), exist_ok=True)
        with open(os.path.join(directory, "hgb_split", "label.dat"), "w") as fh:
            fh.write("1\tAnn\t0\t2\n6\tBob\t0\t1\n")
        with open(os.path.join(directory, "hgb_split", "label.dat.test_full"), "w") as fh:
            fh.write("4\tCy\t0\t3\n")  # HGB scrambles the test labels: never read
    return directory


def test_magnn_types_relations_features_and_split(tmp_path):
    root = write_magnn(tmp_path / "ds")
    assert detect_format(root) == "magnn" and detect_format(root / "adjM.npz") == "magnn"
    graph = read_graph(root, type_names="author,paper,term")
    schema = graph.schema
    assert schema.node_types == ("author", "paper", "term") and schema.target == "author"
    assert schema.relation_names == ("author-paper", "paper-author", "paper-term", "term-paper")
    local = {0: 0, 2: 1, 5: 2, 7: 3, 1: 0, 4: 1, 6: 2, 3: 0}
    expect = pairs([local[a] for a, _ in MAGNN_LINKS[:4]], [local[b] for _, b in MAGNN_LINKS[:4]])
    assert pairs(*relation_edges(graph, "author-paper")) == expect
    assert pairs(*relation_edges(graph, "paper-author")) == sorted((b, a) for a, b in expect)
    assert pairs(*relation_edges(graph, "term-paper")) == [(0, 0), (0, 3)]
    author = graph.typed_fields["author"]["feat"]
    assert author.dtype == np.float32 and hasattr(author, "tocsr")  # sparse stays sparse
    np.testing.assert_array_equal(author.toarray(), np.eye(3, 5))
    np.testing.assert_array_equal(graph.typed_fields["paper"]["feat"], np.arange(8).reshape(4, 2))
    assert "term" not in graph.typed_fields  # no features_2: the model learns an embedding
    first = graph.type_offsets[0]
    np.testing.assert_array_equal(graph.ndata["label"][first:first + 3], [2, 0, 1])
    assert (graph.ndata["label"][graph.type_offsets[1]:] == -1).all()
    for mask, author_id in (("train_mask", 0), ("val_mask", 2), ("test_mask", 1)):
        assert np.flatnonzero(graph.ndata[mask]).tolist() == [first + author_id]
    # HGB's split: label.dat's nodes (global 1 and 6: authors 0 and 2) are train+val, the test file's the test
    hgb = read_graph(root, type_names="author,paper,term", hgb_split=True, val_fraction=0.0)
    assert np.flatnonzero(hgb.ndata["train_mask"]).tolist() == [first + 0, first + 2]
    assert np.flatnonzero(hgb.ndata["test_mask"]).tolist() == [first + 1]
    np.testing.assert_array_equal(hgb.ndata["label"], graph.ndata["label"])  # labels.npy's, never the test file's


def test_magnn_type_names_default_numbered(tmp_path):
    graph = read_graph(write_magnn(tmp_path / "ds", hgb=False))
    assert graph.schema.node_types == ("type0", "type1", "type2")
    assert graph.schema.relation_names[0] == "type0-type1"


def _magnn_bad(root, what):
    if what == "features":
        np.save(os.path.join(root, "features_1.npy"), np.zeros((3, 2)))
    elif what == "no split":
        os.remove(os.path.join(root, "train_val_test_idx.npz"))
    elif what == "adjacency":
        import scipy.sparse as sp
        sp.save_npz(os.path.join(root, "adjM.npz"), sp.csr_matrix((9, 9)))
    elif what == "hgb label":
        with open(os.path.join(root, "hgb_split", "label.dat"), "w") as fh:
            fh.write("1\tAnn\t0\t1\n")
    elif what == "hgb type":
        with open(os.path.join(root, "hgb_split", "label.dat"), "w") as fh:
            fh.write("1\tAnn\t0\t2\n0\tPaper\t1\t0\n")
    elif what == "split range":
        np.savez(os.path.join(root, "train_val_test_idx.npz"), train_idx=np.array([3]), val_idx=np.array([2]),
                 test_idx=np.array([1]))
    elif what == "ambiguous target":
        np.save(os.path.join(root, "labels.npy"), np.zeros(1, dtype=np.int64))  # the term and the venue: 1 each
        np.save(os.path.join(root, "node_types.npy"), np.array([1, 0, 1, 2, 0, 1, 3, 1], dtype=np.int32))
        os.remove(os.path.join(root, "features_0.npz"))


@pytest.mark.parametrize("what, options, field, pattern", [
    ("features", {}, "rows", r"features_1\.npy: .*one row per type1 node \(4\)"),
    ("no split", {}, "train_idx", "has labels but no split"),
    ("adjacency", {}, "shape", r"adjM\.npz: .*must be \[N, N\]"),
    ("hgb label", {"hgb_split": True}, "label", "disagrees with labels.npy"),
    ("hgb type", {"hgb_split": True}, "line 2", "not the labelled type"),
    ("split range", {}, "train_mask", r"beyond the labelled type's range \[0, 3\)"),
    ("ambiguous target", {}, "--target-type", "cannot tell which node type"),
    (None, {"type_names": "a,b"}, "--type-names", "needs 3 type names"),
])
def test_magnn_bad_input_one_line(tmp_path, what, options, field, pattern):
    root = write_magnn(tmp_path / "ds")
    _magnn_bad(root, what)
    with pytest.raises(InputError, match=pattern) as exc:
        read_graph(root, **options)
    assert f"field '{field}'" in one_line(exc)


# --------------------------------------------------------------------------------- OGB heterogeneous

MAG_COUNTS = {"paper": 4, "author": 3, "institution": 2, "field_of_study": 2}
MAG_EDGES = {("author", "affiliated_with", "institution"): [(0, 1), (2, 0)],
             ("author", "writes", "paper"): [(0, 0), (1, 0), (1, 2), (2, 3)],
             ("paper", "cites", "paper"): [(1, 0), (2, 0), (3, 1)],
             ("paper", "has_topic", "field_of_study"): [(0, 1), (3, 0)]}
MAG_FEAT = np.arange(12, dtype=np.float32).reshape(4, 3) / 4


def gz(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with gzip.open(path, "wt") as fh:
        fh.write(text)


def write_ogb_hetero(root, edges=MAG_EDGES, counts=MAG_COUNTS, feat=MAG_FEAT, split=True, triplet_list=True):
    raw = os.path.join(root, "raw")
    gz(os.path.join(raw, "num-node-dict.csv.gz"), ",".join(counts) + "\n" + ",".join(map(str, counts.values())) + "\n")
    if triplet_list:
        gz(os.path.join(raw, "triplet-type-list.csv.gz"), "".join(",".join(t) + "\n" for t in edges))
    for triplet, pairs_ in edges.items():
        directory = os.path.join(raw, "relations", "___".join(triplet))
        gz(os.path.join(directory, "edge.csv.gz"), "".join(f"{s},{d}\n" for s, d in pairs_))
        gz(os.path.join(directory, "num-edge-list.csv.gz"), f"{len(pairs_)}\n")
    gz(os.path.join(raw, "node-feat", "paper", "node-feat.csv.gz"),
       "".join(",".join(repr(float(x)) for x in row) + "\n" for row in feat))
    gz(os.path.join(raw, "node-label", "paper", "node-label.csv.gz"), "3\n1\n0\n2\n")
    if split:
        for name, ids in (("train", [0, 1]), ("valid", [2]), ("test", [3])):
            gz(os.path.join(root, "split", "time", "paper", f"{name}.csv.gz"), "".join(f"{i}\n" for i in ids))
    return root


def test_ogb_hetero_layout(tmp_path):
    root = write_ogb_hetero(str(tmp_path / "ogbn_mag"))
    assert detect_format(root) == "ogb_hetero"
    graph = read_graph(root, add_reverse=True)
    schema = graph.schema
    assert schema.node_types == ("author", "field_of_study", "institution", "paper")  # sorted, as OGB numbers them
    assert schema.target == "paper"
    assert schema.relation_names == ("affiliated_with", "writes", "cites", "has_topic", "rev_affiliated_with",
                                     "rev_writes", "rev_cites", "rev_has_topic")
    for (src_type, rel, dst_type), expect in MAG_EDGES.items():
        assert schema.relations[schema.relation_index(rel)] == (src_type, rel, dst_type)
        assert pairs(*relation_edges(graph, rel)) == sorted(expect)
        assert pairs(*relation_edges(graph, "rev_" + rel)) == sorted((d, s) for s, d in expect)
    np.testing.assert_array_equal(graph.typed_fields["paper"]["feat"], MAG_FEAT)
    assert set(graph.typed_fields) == {"paper"}
    first = graph.type_offsets[schema.type_index("paper")]
    np.testing.assert_array_equal(graph.ndata["label"][first:first + 4], [3, 1, 0, 2])
    assert (graph.ndata["label"][:first] == -1).all()
    assert np.flatnonzero(graph.ndata["train_mask"]).tolist() == [first, first + 1]
    assert np.flatnonzero(graph.ndata["test_mask"]).tolist() == [first + 3]
    # without the triplet list the relations come from raw/relations/, the same graph
    again = read_graph(write_ogb_hetero(str(tmp_path / "nolist"), triplet_list=False), add_reverse=True)
    assert again.schema == schema
    np.testing.assert_array_equal(again.src, graph.src)


@pytest.mark.parametrize("change, field, pattern", [
    ({"edges": {**MAG_EDGES, ("paper", "published_in", "venue"): [(0, 0)]}}, "paper___published_in___venue",
     r"triplet-type-list\.csv\.gz: .*relation 'published_in' names an unknown node type.*\(value venue\)"),
    ({"edges": {**MAG_EDGES, ("paper", "cites", "paper"): [(1, 0), (4, 0)]}}, "src",
     r"paper___cites___paper/edge\.csv\.gz: .*beyond type paper's range \[0, 4\) \(value 4\)"),
    ({"feat": MAG_FEAT[:3]}, "rows", r"node-feat\.csv\.gz: .*3 rows but 4 paper nodes"),
    ({"split": False}, "paper.train_mask", "type paper has labels but no split"),
    ({"edges": {**MAG_EDGES, ("author", "cites", "author"): [(0, 1)]}}, "relation", "relation named twice"),
])
def test_ogb_hetero_bad_input_one_line(tmp_path, change, field, pattern):
    root = write_ogb_hetero(str(tmp_path / "ds"), **change)
    with pytest.raises(InputError, match=pattern) as exc:
        read_graph(root)
    assert f"field '{field}'" in one_line(exc)


# ---------------------------------------------------------------------------------------- typed npz

def typed_arrays():
    return {"num_nodes/paper": np.int64(4), "num_nodes/author": np.int64(3),
            "edges/author/writes/paper": np.array([[0, 0], [1, 0], [1, 2], [2, 3]]),
            "edges/paper/cites/paper": np.array([[1, 0], [3, 1]], dtype=np.int32),
            "feat/paper": MAG_FEAT, "label/paper": np.array([1, 0, -1, 1]),
            "train_mask/paper": np.array([True, True, False, False]),
            "test_mask/paper": np.array([False, False, False, True])}


def test_typed_npz_layout(tmp_path):
    path = tmp_path / "g.npz"
    np.savez(path, **typed_arrays())
    assert detect_format(path) == "typed_npz"
    graph = read_graph(path, add_reverse=True)
    schema = graph.schema
    assert schema.node_types == ("paper", "author") and schema.target == "paper"  # the archive's order
    assert schema.relations == (("author", "writes", "paper"), ("paper", "cites", "paper"),
                                ("paper", "rev_writes", "author"), ("paper", "rev_cites", "paper"))
    assert pairs(*relation_edges(graph, "writes")) == [(0, 0), (1, 0), (1, 2), (2, 3)]
    assert pairs(*relation_edges(graph, "rev_cites")) == [(0, 1), (1, 3)]
    np.testing.assert_array_equal(graph.typed_fields["paper"]["feat"], MAG_FEAT)
    np.testing.assert_array_equal(graph.ndata["label"], [1, 0, -1, 1, -1, -1, -1])
    assert np.flatnonzero(graph.ndata["train_mask"]).tolist() == [0, 1]
    assert "val_mask" not in graph.ndata  # none in the file: none made up
    plain = read_graph(path)
    assert plain.schema.relation_names == ("writes", "cites")


@pytest.mark.parametrize("change, field, pattern", [
    ({"edges/paper/published_in/venue": np.array([[0, 0]])}, "edges/paper/published_in/venue",
     r"relation 'published_in' names an unknown node type .*\(value venue\)"),
    ({"edges/paper/cites/paper": np.array([[1, 0], [4, 1]])}, "edges/paper/cites/paper",
     r"src id beyond type paper's range \[0, 4\) \(value 4\)"),
    ({"feat/paper": MAG_FEAT[:3]}, "feat/paper", r"one row per paper node \(4\) \(value 3\)"),
    ({"train_mask/paper": None, "test_mask/paper": None}, "train_mask/paper", "has labels but no split"),
    ({"edges/author/cites/author": np.array([[0, 1]])}, "edges/author/cites/author", "relation named twice"),
    ({"feats/paper": MAG_FEAT}, "keys", "not an array of the typed npz layout"),
    ({"feat/venue": MAG_FEAT}, "feat/venue", "names an unknown node type"),
])
def test_typed_npz_bad_input_one_line(tmp_path, change, field, pattern):
    arrays = typed_arrays()
    for key, value in change.items():
        if value is None:
            del arrays[key]
        else:
            arrays[key] = value
    path = tmp_path / "g.npz"
    np.savez(path, **arrays)
    with pytest.raises(InputError, match=pattern) as exc:
        read_graph(path, format="typed_npz")
    assert f"field '{field}'" in one_line(exc) and str(path) in one_line(exc)


# ------------------------------------------------------------------------------- typed .mat (HAN's ACM)

def acm_variables():
    import scipy.sparse as sp
    return {"PvsA": sp.csc_matrix(np.array([[1, 0, 0], [1, 1, 0], [0, 0, 1], [0, 1, 0]], dtype=np.float64)),
            "PvsL": sp.csc_matrix(np.array([[1, 0], [0, 1], [0, 1], [1, 0]], dtype=np.float64)),
            "PvsP": sp.csc_matrix(np.array([[0, 1, 0, 0], [0, 0, 0, 0], [1, 0, 0, 1], [0, 0, 0, 0]], dtype=float)),
            "PvsT": sp.csc_matrix(np.array([[1, 0, 2, 0, 0], [0, 1, 0, 0, 0], [0, 0, 0, 3, 1], [1, 1, 0, 0, 0]])),
            "PvsC": sp.csc_matrix(np.array([[0, 1, 0], [1, 0, 0], [0, 0, 1], [0, 1, 0]], dtype=np.float64)),
            "CNormPvsA": sp.csc_matrix(np.ones((4, 3)) / 3),  # not a relation name: not read
            "train_idx": np.array([[0, 1]]), "val_idx": np.array([[2]]), "test_idx": np.array([[3]])}


def test_typed_mat_han_layout(tmp_path):
    import scipy.io
    path = tmp_path / "ACM.mat"
    scipy.io.savemat(path, acm_variables())
    assert detect_format(path) == "typed_mat"
    graph = read_graph(path, labels_var="PvsC", features_var="PvsT", add_reverse=True)
    schema = graph.schema
    assert schema.node_types == ("P", "A", "L") and schema.target == "P"
    assert schema.relation_names == ("PvsA", "PvsL", "PvsP", "rev_PvsA", "rev_PvsL", "rev_PvsP")
    assert schema.relations[0] == ("P", "PvsA", "A")
    assert pairs(*relation_edges(graph, "PvsA")) == [(0, 0), (1, 0), (1, 1), (2, 2), (3, 1)]
    assert pairs(*relation_edges(graph, "rev_PvsL")) == [(0, 0), (0, 3), (1, 1), (1, 2)]
    assert pairs(*relation_edges(graph, "PvsP")) == [(0, 1), (2, 0), (2, 3)]
    feat = graph.typed_fields["P"]["feat"]
    np.testing.assert_array_equal(feat.toarray(), acm_variables()["PvsT"].toarray())
    np.testing.assert_array_equal(graph.ndata["label"][:4], [1, 0, 2, 1])  # the conference of each paper
    assert (graph.ndata["label"][4:] == -1).all()
    assert np.flatnonzero(graph.ndata["train_mask"]).tolist() == [0, 1]
    assert np.flatnonzero(graph.ndata["test_mask"]).tolist() == [3]


@pytest.mark.parametrize("change, options, field, pattern", [
    ({"AvsF": np.ones((4, 2))}, {}, "AvsF", r"type A has 3 nodes in PvsA but 4 here"),
    ({"train_idx": None, "val_idx": None, "test_idx": None}, {"labels_var": "PvsC"}, "train_idx",
     "type P has labels but no split"),
    ({"train_idx": np.array([[0, 4]])}, {"labels_var": "PvsC"}, "train_mask", r"beyond the labelled type's range"),
    ({"label": np.array([[1, 2, 1]])}, {}, "--mat-labels", "cannot tell which node type 'label'"),
    ({}, {"features_var": "nope"}, "--mat-features", "no numeric variable of that name"),
])
def test_typed_mat_bad_input_one_line(tmp_path, change, options, field, pattern):
    import scipy.io
    variables = acm_variables()
    for key, value in change.items():
        if value is None:
            del variables[key]
        else:
            variables[key] = value
    if "label" in change:  # L and A both have 3 nodes... A has 3, L has 2: make the label fit two types
        variables["PvsL"] = variables["PvsA"]
    path = tmp_path / "ACM.mat"
    scipy.io.savemat(path, variables)
    with pytest.raises(InputError, match=pattern) as exc:
        read_graph(path, **options)
    assert f"field '{field}'" in one_line(exc)


# ------------------------------------------------------------------------------ the shared real sets

@pytest.mark.skipif(not os.path.isdir(os.path.join(SHARED, "aifb")) or not os.path.isdir(os.path.join(SHARED, "dblp")),
                    reason="the shared data sets are not here")
def test_real_aifb_and_dblp_counts():
    aifb = read_graph(os.path.join(SHARED, "aifb"))  # PROVENANCE.txt's figures
    assert aifb.num_nodes == 8285 and aifb.num_edges == 2 * 29043
    assert aifb.schema.num_relations == 90  # 45 predicates and their inverses
    train, val, test = (int(aifb.ndata[m].sum()) for m in ("train_mask", "val_mask", "test_mask"))
    assert (train + val, val, test) == (140, 28, 36)
    assert len(aifb.notes["class_names"]) == 4
    dblp = read_graph(os.path.join(SHARED, "dblp"), hgb_split=True)
    assert dblp.schema.node_types == ("author", "paper", "term", "venue") and dblp.schema.target == "author"
    np.testing.assert_array_equal(np.diff(dblp.type_offsets), [4057, 14328, 7723, 20])
    assert dblp.num_edges == 239566
    counts = np.bincount(dblp.edata[ETYPE])
    assert dict(zip(dblp.schema.relation_names, counts.tolist())) == {
        "author-paper": 19645, "paper-author": 19645, "paper-term": 85810, "paper-venue": 14328,
        "term-paper": 85810, "venue-paper": 14328}
    assert {t: f["feat"].shape[1] for t, f in dblp.typed_fields.items()} == {"author": 451, "paper": 4233, "term": 50}
    train, val, test = (int(dblp.ndata[m].sum()) for m in ("train_mask", "val_mask", "test_mask"))
    assert (train + val, test) == (1217, 2840)
    magnn = read_graph(os.path.join(SHARED, "dblp"))
    assert [int(magnn.ndata[m].sum()) for m in ("train_mask", "val_mask", "test_mask")] == [400, 400, 3257]


def test_convert_refuses_a_typed_graph(tmp_path, capsys):
    from hpcgnn.cli.convert import main as convert_main
    path = tmp_path / "g.npz"
    np.savez(path, **typed_arrays())
    with pytest.raises(SystemExit) as exc:
        convert_main([str(path), str(tmp_path / "out.npz")])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "field 'format'" in err and "typed graph (typed_npz)" in err
    assert not (tmp_path / "out.npz").exists()
