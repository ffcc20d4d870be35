"""Typed (heterogeneous) graphs partitioned: the (part, type) layout, the ``schema`` entry of
meta.json, per-type fields and the relation of every edge, checked against the input graph;
per-type balance; the transforms that refuse a typed graph; meta.json and part files that
disagree with the schema refused in one line."""
import argparse
import json
import os

import h5py
import numpy as np
import pytest
import scipy.sparse as sp

from hpcgnn.format import ondisk
from hpcgnn.format.feat_dtype import bfloat16_values
from hpcgnn.format.schema import ETYPE, TypeLayout, typed_field_name
from hpcgnn.prep import inspection, transform
from hpcgnn.prep.partition import apply_edge_split, assign_parts, build_csc, partition_graph
from hpcgnn.prep.typed import typed_graph
from hpcgnn.runtime.errors import InputError


def typed_test_graph(papers=120, authors=80, institutes=3, seed=0, sparse_feat=False, separate=False):
    """Local. Papers (labelled, 6-wide features), authors (3-wide features and an integer field),
    institutes (3 of them, no features: with 4 parts some part owns none); relations cites
    (paper -> paper), writes (author -> paper), member_of (author -> institute), each with its
    reverse. ``separate``: only cites and knows (author -> author), so the two types form
    separate components (METIS balancing node counts alone may give each part one type)."""
    rng = np.random.default_rng(seed)
    paper_feat = rng.standard_normal((papers, 6)).astype(np.float32)
    if sparse_feat:
        paper_feat[rng.random(paper_feat.shape) < 0.7] = 0
        paper_feat = sp.csr_matrix(paper_feat)
    fields = {"paper": {"feat": paper_feat},
              "author": {"feat": rng.standard_normal((authors, 3)).astype(np.float32),
                         "year": rng.integers(1990, 2024, authors)}}
    if separate:
        relations = [("paper", "cites", "paper", rng.integers(0, papers, 4 * papers),
                      rng.integers(0, papers, 4 * papers)),
                     ("author", "knows", "author", rng.integers(0, authors, 4 * authors),
                      rng.integers(0, authors, 4 * authors))]
    else:
        relations = [("paper", "cites", "paper", rng.integers(0, papers, 3 * papers),
                      rng.integers(0, papers, 3 * papers)),
                     ("author", "writes", "paper", rng.integers(0, authors, 2 * papers),
                      np.repeat(np.arange(papers), 2)),
                     ("author", "member_of", "institute", np.arange(authors),
                      rng.integers(0, institutes, authors))]
    split = rng.random(papers)
    return typed_graph({"paper": papers, "author": authors, **({} if separate else {"institute": institutes})},
                       relations, typed_fields=fields, target="paper",
                       label=rng.integers(0, 4, papers).astype(np.int64),
                       masks={"train_mask": split < 0.5, "val_mask": (split >= 0.5) & (split < 0.75),
                              "test_mask": split >= 0.75},
                       name="typed_test", add_reverse=not separate)


def read_dataset(directory):
    meta = ondisk.read_meta(directory)
    return meta, [ondisk.read_part(directory, meta, p) for p in range(meta["num_parts"])]


def dense(values):
    return values.toarray() if hasattr(values, "toarray") else np.asarray(values)


def check_against_input(graph, directory):
    """Every edge of every relation stored once with its types and relation, every node once at a
    block of its type, every per-type field row at its type id, in-edges grouped by relation."""
    meta, parts = read_dataset(directory)
    schema = graph.schema
    assert meta["version"] == ondisk.TYPED_VERSION
    assert meta["schema"]["node_types"] == list(schema.node_types)
    assert meta["schema"]["edge_types"] == [list(r) for r in schema.relations]
    per_relation = np.bincount(graph.edata[ETYPE], minlength=len(schema.relations))
    assert meta["schema"]["relation_counts"] == per_relation.tolist()
    layout = TypeLayout(ondisk.dataset_schema(meta), meta["schema"]["type_counts"])
    assert np.array_equal(layout.node_starts, meta["node_starts"])
    orig = np.concatenate([p["orig_id"] for p in parts])  # new id -> input id
    assert np.array_equal(np.sort(orig), np.arange(graph.num_nodes))
    input_type = np.searchsorted(graph.type_offsets, orig, side="right") - 1
    assert np.array_equal(layout.types_of(np.arange(graph.num_nodes)), input_type)
    # inside a (part, type) block the nodes keep their input order
    for p in range(meta["num_parts"]):
        for t in range(schema.num_types):
            start, end = layout.block_range(p, t)
            assert np.all(np.diff(orig[start:end]) > 0)
    src_types, dst_types = schema.relation_types()
    stored_eids = []
    for p, arrays in enumerate(parts):
        start = meta["node_starts"][p]
        degree = np.diff(arrays["indptr"])
        dst_new = start + np.repeat(np.arange(degree.shape[0]), degree)
        src_new = arrays["indices"].astype(np.int64)
        eid = arrays["eid"].astype(np.int64)
        etype = arrays["edge_" + ETYPE]
        stored_eids.append(eid)
        # each stored edge is the input edge it names, of the relation it names
        assert np.array_equal(orig[src_new], graph.src[eid]) and np.array_equal(orig[dst_new], graph.dst[eid])
        assert np.array_equal(etype, graph.edata[ETYPE][eid])
        assert np.array_equal(layout.types_of(src_new), src_types[etype])
        assert np.array_equal(layout.types_of(dst_new), dst_types[etype])
        # grouped by relation, ascending, inside each node's in-edges
        for v in range(degree.shape[0]):
            row = etype[arrays["indptr"][v]:arrays["indptr"][v + 1]]
            assert np.all(np.diff(row.astype(np.int64)) >= 0), (p, v)
        for name in ("label", "train_mask", "val_mask", "test_mask"):
            assert np.array_equal(arrays[name], graph.ndata[name][orig[start:start + degree.shape[0]]])
    assert np.array_equal(np.sort(np.concatenate(stored_eids)), np.arange(graph.num_edges))
    # every per-type field row at its type id
    for node_type, fields in graph.typed_fields.items():
        t = schema.type_index(node_type)
        for field, values in fields.items():
            stored = np.concatenate([parts[p][typed_field_name(node_type, field)] for p in range(meta["num_parts"])])
            tids = np.arange(layout.num_nodes_of(t))
            want = dense(values)[orig[layout.gids_of(t, tids)] - graph.type_offsets[t]]
            assert np.array_equal(stored, want), (node_type, field)
            assert meta["schema"]["typed_fields"][node_type][field]["shape"] == list(want.shape[1:])
    assert inspection.verify(directory, meta) == []
    return meta


@pytest.mark.parametrize("method", ["metis", "random"])
@pytest.mark.parametrize("num_parts", [1, 2, 4])
def test_typed_partition_matches_the_input(tmp_path, method, num_parts):
    graph = typed_test_graph()
    meta = partition_graph(graph, tmp_path / "ds", num_parts, method)
    assert check_against_input(graph, tmp_path / "ds") == ondisk.read_meta(tmp_path / "ds")
    assert "feat" not in meta["node_fields"] and not any("@" in name for name in meta["node_fields"])
    assert meta["edge_fields"][ETYPE]["dtype"] == "int8"
    if num_parts == 4:
        assert 0 in np.asarray(meta["schema"]["type_counts"])[:, 2]  # a part without institutes
    if method == "metis" and num_parts > 1:
        assert meta["partitioner"]["constraints"][:3] == ["nodes@paper", "nodes@author", "nodes@institute"]


def test_sparse_typed_features_and_compact_storage(tmp_path):
    graph = typed_test_graph(sparse_feat=True)
    assert sp.issparse(graph.typed_fields["paper"]["feat"])
    partition_graph(graph, tmp_path / "plain", 2, "random")
    check_against_input(graph, tmp_path / "plain")
    meta = partition_graph(graph, tmp_path / "bf16", 2, "random", feat_dtype="bfloat16")
    spec = meta["schema"]["typed_fields"]["paper"]["feat"]
    assert spec == {"dtype": "uint16", "shape": [6], "encoding": "bfloat16"}
    assert meta["schema"]["typed_fields"]["author"]["year"] == {"dtype": "int64", "shape": []}
    _, parts = read_dataset(tmp_path / "bf16")
    _, plain = read_dataset(tmp_path / "plain")
    for p in range(2):
        decoded = bfloat16_values(parts[p]["feat@paper"])
        assert np.allclose(decoded, plain[p]["feat@paper"], rtol=1e-2, atol=0)


def test_metis_balances_every_node_type(tmp_path):
    """Papers and authors in separate components: balancing node counts alone lets METIS give
    each part one type; one constraint per type spreads both."""
    graph = typed_test_graph(papers=400, authors=400, separate=True)
    meta = partition_graph(graph, tmp_path / "ds", 2, "metis", balance=("nodes",))
    assert meta["partitioner"]["constraints"] == ["nodes@paper", "nodes@author"]
    counts = np.asarray(meta["schema"]["type_counts"])
    assert (counts.max(axis=0) / counts.mean(axis=0) <= 1.05).all(), counts
    assert meta["partitioner"]["imbalance"]["nodes@paper"] <= 1.05
    # the same graph without its types: METIS is free to split it by type
    untyped = typed_test_graph(papers=400, authors=400, separate=True)
    untyped.schema = None
    parts, info = assign_parts(untyped, build_csc(untyped), 2, "metis", balance=("nodes",))
    assert info["constraints"] == ["nodes"]
    papers = np.bincount(parts[:400], minlength=2)
    assert papers.max() / papers.mean() > 1.5, papers
    check_against_input(graph, tmp_path / "ds")


def test_random_deals_each_type_evenly(tmp_path):
    graph = typed_test_graph(papers=101, authors=77, institutes=9)
    meta = partition_graph(graph, tmp_path / "ds", 4, "random", seed=3)
    counts = np.asarray(meta["schema"]["type_counts"])
    assert (counts.max(axis=0) - counts.min(axis=0) <= 1).all(), counts


def test_homogeneous_dataset_has_no_schema(tmp_path):
    from hpcgnn.testing.graphs import clustered_graph

    meta = partition_graph(clustered_graph(num_nodes=200), tmp_path / "ds", 2, "metis")
    assert "schema" not in meta and meta["version"] == ondisk.FORMAT_VERSION == 2
    assert ondisk.dataset_schema(meta).is_homogeneous
    with ondisk.open_part(tmp_path / "ds", meta, 0) as part:
        assert not any("@" in name for name in part.expected())


def test_transforms_that_renumber_or_drop_across_types_refuse(tmp_path):
    graph = typed_test_graph()
    for step, flag in ((transform.symmetrize, "--symmetrize"), (transform.dedup, "--dedup"),
                       (transform.largest_component, "--largest-component"),
                       (transform.normalize_features, "--normalize-features")):
        with pytest.raises(InputError, match=f"field '{flag}'.*not applied to a typed graph") as info:
            step(graph)
        assert "\n" not in str(info.value)
    with pytest.raises(InputError, match="'--normalize-features'"):
        transform.prepare(graph, normalize=True)
    # the ones that keep nodes and edge order keep the types
    graph.src[0] = graph.dst[0]  # a self loop of relation cites (paper -> paper)
    kept = transform.prepare(graph, drop_self_loops=True, split="0.5,0.25,0.25", split_seed=1)
    assert kept.schema == graph.schema and kept.typed_fields is graph.typed_fields
    assert kept.num_edges < graph.num_edges and np.all(np.diff(kept.edata[ETYPE].astype(int)) >= 0)
    assert not kept.ndata["train_mask"][graph.type_offsets[1]:].any()  # only papers are labelled
    args = argparse.Namespace(edge_split=(0.8, 0.1, 0.1), input="typed.npz")
    with pytest.raises(InputError, match="field '--edge-split'.*typed graph"):
        apply_edge_split(graph, args)
    with pytest.raises(InputError, match="field '--method'.*KaMinPar"):
        assign_parts(graph, build_csc(graph), 2, "kaminpar")


# ---------------------------------------------------------------- meta.json and part files refused


@pytest.fixture(scope="module")
def typed_dataset(tmp_path_factory):
    path = tmp_path_factory.mktemp("typed") / "ds"
    partition_graph(typed_test_graph(), path, 2, "metis")
    return path


def rewrite_meta(source, target, change):
    import shutil

    shutil.copytree(source, target)
    with open(target / "meta.json") as fh:
        meta = json.load(fh)
    change(meta)
    with open(target / "meta.json", "w") as fh:
        json.dump(meta, fh)
    return target


def _set(path, value):
    def change(meta):
        at = meta
        for key in path[:-1]:
            at = at[key]
        at[path[-1]] = value
    return change


BAD_META = [
    ("unknown type in a relation", _set(("schema", "edge_types", 1, 0), "person"), "schema.edge_types[1].src_type",
     "person"),
    ("duplicate relation names", _set(("schema", "edge_types", 2, 1), "cites"), "schema.edge_types[2].relation",
     "relation named twice"),
    ("type_counts not summing", lambda m: m["schema"]["type_counts"][1].__setitem__(0, 1),
     r"schema.type_counts\[1\]", "sum to"),
    ("type_counts shape", lambda m: m["schema"]["type_counts"].pop(), "schema.type_counts", "num_parts x"),
    ("negative count", lambda m: m["schema"]["type_counts"][0].__setitem__(2, -1), r"schema.type_counts\[0\]\[2\]",
     "non-negative"),
    ("relation counts", lambda m: m["schema"]["relation_counts"].__setitem__(0, 0), "schema.relation_counts",
     "sum to"),
    ("typed field of an unknown type", _set(("schema", "typed_fields", "venue"), {}), "schema.typed_fields", "venue"),
    ("typed field spec", _set(("schema", "typed_fields", "paper", "feat", "shape"), [0]),
     "schema.typed_fields.paper.feat.shape", "positive"),
    ("labels per type", _set(("schema", "typed_fields", "paper", "label"), {"dtype": "int64", "shape": []}),
     "schema.typed_fields.paper", "labels and masks"),
    ("no etype", lambda m: m["edge_fields"].pop(ETYPE), "edge_fields.etype", "relation index"),
    ("an older version", _set(("version",), 2), "version", "needs format version 3"),
    ("an unknown key", _set(("schema", "extra"), 1), "schema.extra", "not a key"),
]


@pytest.mark.parametrize("case", BAD_META, ids=[c[0] for c in BAD_META])
def test_bad_schema_in_meta_is_one_line(tmp_path, typed_dataset, case):
    _, change, field, problem = case
    path = rewrite_meta(typed_dataset, tmp_path / "bad", change)
    with pytest.raises(InputError) as info:
        ondisk.read_meta(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(path / "meta.json"))
    assert f"field '{field.replace(chr(92), '')}'" in message and problem.replace("\\", "") in message, message


def test_typed_field_of_the_wrong_length_is_refused(tmp_path, typed_dataset):
    """A part file whose feat@paper has a row too many (or that lacks one, or holds a type meta.json
    does not list) is refused on opening, naming the file and the dataset."""
    import shutil

    meta = ondisk.read_meta(typed_dataset)
    for name, edit in (("long", lambda h5: _replace(h5, "feat@paper", np.zeros((999, 6), np.float32))),
                       ("missing", lambda h5: h5.__delitem__("year@author")),
                       ("stray", lambda h5: _replace(h5, "feat@institute", np.zeros((1, 2), np.float32)))):
        path = tmp_path / name
        shutil.copytree(typed_dataset, path)
        with h5py.File(path / "part-00001.h5", "r+") as h5:
            edit(h5)
        with pytest.raises(InputError) as info:
            ondisk.open_part(path, meta, 1).close()
        message = str(info.value)
        assert "\n" not in message and message.startswith(str(path / "part-00001.h5")), message
        dataset = {"long": "feat@paper", "missing": "year@author", "stray": "feat@institute"}[name]
        assert f"'{dataset}'" in message, message


def _replace(h5, name, value):
    if name in h5:
        del h5[name]
    h5.create_dataset(name, data=value)


def test_verify_finds_broken_typed_invariants(tmp_path, typed_dataset):
    """inspect --verify: an edge given a relation of other end types, in-edges out of relation order,
    and a relation index out of range are each reported (loading refuses the last too)."""
    import shutil

    meta = ondisk.read_meta(typed_dataset)
    with ondisk.open_part(typed_dataset, meta, 0) as part:
        indptr, etype = part.read("indptr"), part.read("edge_etype")
    degree = np.diff(indptr)
    node = int(np.flatnonzero([len(np.unique(etype[indptr[v]:indptr[v + 1]])) > 1 for v in range(len(degree))])[0])
    row = slice(indptr[node], indptr[node + 1])
    schema = ondisk.dataset_schema(meta)
    wrong_types = schema.relation_index("member_of")  # author -> institute: no paper has such an in-edge

    def reorder(values):
        values[row] = values[row][::-1]

    def mistype(values):
        values[indptr[node]] = wrong_types

    def beyond(values):
        values[indptr[node]] = 99

    for name, edit, expected in (("order", reorder, "not grouped by relation in ascending order"),
                                 ("types", mistype, "is not of their relation's type"),
                                 ("range", beyond, "relation index outside [0, 6)")):
        path = tmp_path / name
        shutil.copytree(typed_dataset, path)
        values = etype.copy()
        edit(values)
        with h5py.File(path / "part-00000.h5", "r+") as h5:
            h5["edge_etype"][...] = values
        problems = inspection.verify(path, meta)
        assert any(expected in p for p in problems), (name, problems)
        if name == "types":
            assert any("per relation" in p for p in problems), problems


def test_inspect_describes_the_schema(typed_dataset):
    text = inspection.describe(ondisk.read_meta(typed_dataset))
    assert "node types (3): paper 120 (feat float32[6]); author 80 (feat float32[3], year int64[]); " \
           "institute 3 (no features); labelled type: paper" in text
    assert "relations (6): cites (paper -> paper) 360; writes (author -> paper) 240; member_of (author -> " \
           "institute) 80; rev_cites (paper -> paper) 360" in text
    assert os.path.isdir(typed_dataset)
