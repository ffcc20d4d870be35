"""Typed generator with IGBH's schema: schema and counts, ids inside their types, determinism,
planted learnable labels, the command (serial and under mpirun) and its one-line errors."""
import json
import os

import numpy as np
import pytest
import scipy.sparse as sp

from hpcgnn.format import ondisk
from hpcgnn.format.schema import ETYPE
from hpcgnn.generate import main
from hpcgnn.prep.generate_hetero import (
    IGBH_NODES,
    IGBH_RELATIONS,
    hetero_graph,
    relation_counts,
    relation_edges,
    type_counts,
)
from hpcgnn.prep.partition import partition_graph
from hpcgnn.prep.read import read_graph
from hpcgnn.runtime.errors import InputError

SMALL = dict(num_nodes=6000, num_edges=60000, feat_dim=16, num_classes=8, seed=5)
NAMES = [rel for _, rel, _, _ in IGBH_RELATIONS]


@pytest.fixture(scope="module")
def graph():
    return hetero_graph(**SMALL)


def relation(graph, name):
    """``(src, dst)`` of relation ``name`` in each end's type ids."""
    schema, offsets = graph.schema, graph.type_offsets
    index = schema.relation_index(name)
    src_type, _, dst_type = schema.relations[index]
    pick = graph.edata[ETYPE] == index
    return (graph.src[pick] - offsets[schema.type_index(src_type)],
            graph.dst[pick] - offsets[schema.type_index(dst_type)])


def test_schema_counts_and_fields(graph):
    schema = graph.schema
    assert schema.node_types == tuple(IGBH_NODES) and schema.target == "paper"
    assert schema.relation_names == tuple(NAMES + ["rev_" + n for n in NAMES])
    counts = type_counts(6000, 8)
    assert list(np.diff(graph.type_offsets)) == [counts[t] for t in IGBH_NODES]
    assert sum(counts.values()) == graph.num_nodes == 6000 and min(counts.values()) >= 8
    # IGBH-large's shares: authors slightly outnumber papers, institutes and fields are few
    assert counts["author"] > counts["paper"] > 100 * counts["fos"]
    edges = relation_counts(60000, counts)
    assert sum(edges) == 60000 and edges[0] > edges[3] > edges[1] > edges[2]
    per_relation = np.bincount(graph.edata[ETYPE], minlength=8)
    assert list(per_relation) == edges + edges and graph.num_edges == 120000
    for node_type, count in counts.items():
        feat = graph.typed_fields[node_type]["feat"]
        assert feat.shape == (count, 16) and feat.dtype == np.float32
    papers = counts["paper"]
    label = graph.ndata["label"]
    assert np.all(label[papers:] == -1) and label[:papers].min() >= 0 and label[:papers].max() < 8
    masks = [graph.ndata[m] for m in ("train_mask", "val_mask", "test_mask")]
    assert not any(m[papers:].any() for m in masks)
    assert np.array_equal(sum(m.astype(int) for m in masks)[:papers], np.ones(papers))  # disjoint, cover 0.6+0.2+0.2
    assert [int(m.sum()) for m in masks] == [round(0.6 * papers), round(0.8 * papers) - round(0.6 * papers),
                                             papers - round(0.8 * papers)]


def test_every_relation_stays_inside_its_types_and_reverses_mirror(graph):
    counts = np.diff(graph.type_offsets)
    for src_type, name, dst_type, _ in IGBH_RELATIONS:
        src, dst = relation(graph, name)
        n_src, n_dst = counts[graph.schema.type_index(src_type)], counts[graph.schema.type_index(dst_type)]
        assert src.min() >= 0 and src.max() < n_src and dst.min() >= 0 and dst.max() < n_dst, name
        keys = src * n_dst + dst
        assert np.unique(keys).shape == keys.shape, name  # no repeated edge
        if src_type == dst_type:
            assert not np.any(src == dst)
        rev_src, rev_dst = relation(graph, "rev_" + name)
        assert np.array_equal(rev_src, dst) and np.array_equal(rev_dst, src)
    # heavy-tailed: the most cited paper has many times the mean in-degree
    _, cited = relation(graph, "cites")
    in_degree = np.bincount(cited, minlength=counts[0])
    assert in_degree.max() > 10 * in_degree.mean()
    plain = hetero_graph(**SMALL, add_reverse=False)
    assert plain.schema.relation_names == tuple(NAMES) and plain.num_edges == 60000


def test_same_seed_same_graph_whatever_the_chunk_other_seed_differs(graph):
    again = hetero_graph(**SMALL, chunk_edges=5000)
    assert np.array_equal(graph.src, again.src) and np.array_equal(graph.dst, again.dst)
    assert np.array_equal(graph.edata[ETYPE], again.edata[ETYPE])
    assert np.array_equal(graph.ndata["label"], again.ndata["label"])
    assert np.array_equal(graph.ndata["train_mask"], again.ndata["train_mask"])
    for node_type in IGBH_NODES:
        assert np.array_equal(graph.typed_fields[node_type]["feat"], again.typed_fields[node_type]["feat"])
    other = hetero_graph(**dict(SMALL, seed=6))
    assert not np.array_equal(graph.dst, other.dst)
    assert not np.array_equal(graph.typed_fields["author"]["feat"], other.typed_fields["author"]["feat"])


def _neighbour_mean(graph, name):
    """Mean feature of each paper's in-neighbours along relation ``name`` (zero without any)."""
    schema = graph.schema
    src, dst = relation(graph, name)
    src_type = schema.relations[schema.relation_index(name)][0]
    feat = graph.typed_fields[src_type]["feat"]
    papers = int(graph.type_offsets[1])
    adjacency = sp.csr_matrix((np.ones(src.shape[0]), (dst, src)), shape=(papers, feat.shape[0]))
    degree = np.maximum(np.asarray(adjacency.sum(axis=1)).ravel(), 1)
    return (adjacency @ feat) / degree[:, None]


def _probe_accuracy(graph, features):
    """Test accuracy of a ridge least-squares probe on one-hot labels, trained on the train mask."""
    papers = int(graph.type_offsets[1])
    label = graph.ndata["label"][:papers]
    train, test = graph.ndata["train_mask"][:papers], graph.ndata["test_mask"][:papers]
    x = np.hstack([features, np.ones((papers, 1))])
    y = np.eye(label.max() + 1)[label]
    weights = np.linalg.solve(x[train].T @ x[train] + 1e-2 * np.eye(x.shape[1]), x[train].T @ y[train])
    return float(np.mean((x[test] @ weights).argmax(axis=1) == label[test]))


def test_planted_labels_are_learnable_and_relations_add_signal():
    graph = hetero_graph(num_nodes=20000, num_edges=200000, feat_dim=32, num_classes=10, seed=1)
    own = graph.typed_fields["paper"]["feat"]
    alone = _probe_accuracy(graph, own)
    assert alone > 2.5 * 0.1  # weakly predictive on its own: clearly above chance (10 classes)
    for name in ("cites", "rev_written_by", "rev_topic"):  # each relation alone adds signal
        assert _probe_accuracy(graph, np.hstack([own, _neighbour_mean(graph, name)])) > alone + 0.05, name
    everything = np.hstack([own] + [_neighbour_mean(graph, n) for n in ("cites", "rev_cites", "rev_written_by",
                                                                          "rev_topic")])
    assert _probe_accuracy(graph, everything) > alone + 0.3


@pytest.mark.parametrize("homophily", [0.0, 0.8])
def test_a_bipartite_relation_plants_the_same_class_fraction(homophily):
    rng = np.random.default_rng(0)
    src_classes = rng.integers(0, 5, size=3000)
    dst_classes = np.arange(700) % 5
    src, dst = relation_edges(src_classes, dst_classes, 20000, 5, homophily, seed=3, chunk_edges=4_000_000)
    assert src.shape == dst.shape == (20000,) and src.max() < 3000 and dst.max() < 700
    keys = src * 700 + dst
    assert np.all(np.diff(keys) > 0)  # sorted, distinct
    same = np.mean(src_classes[src] == dst_classes[dst])
    assert same == pytest.approx(homophily + (1 - homophily) / 5, abs=0.02)
    in_degree = np.bincount(dst, minlength=700)
    assert in_degree.max() > 5 * in_degree.mean()


def test_library_errors_name_the_parameter():
    with pytest.raises(InputError, match="num_nodes.*at least one node per class"):
        hetero_graph(num_nodes=60, num_edges=100, num_classes=19)
    with pytest.raises(InputError, match="num_edges.*relation cites .* 915 paper nodes allow 1 to 836,310"):
        hetero_graph(num_nodes=2000, num_edges=2_000_000, num_classes=4)
    # fewer than the pairs, but more than a skewed draw reaches: named with the relation
    with pytest.raises(InputError, match=r"num_edges.*relation topic 5,250 edges, more distinct pairs"):
        hetero_graph(num_nodes=2000, num_edges=23_000, num_classes=4)
    with pytest.raises(InputError, match="fractions"):
        hetero_graph(num_nodes=2000, num_edges=4000, fractions=(0.6, 0.3, 0.3))


FLAGS = ["hetero", "--nodes", "3000", "--edges", "20000", "--feat-dim", "8", "--classes", "6", "--seed", "2"]


def test_cli_writes_a_typed_dataset(tmp_path, capsys):
    out = tmp_path / "parts" / "igbh"
    assert main(FLAGS + ["--parts", "2", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "hetero: 3,000 nodes, 40,000 edges, 2 parts" in printed and "cites edge homophily" in printed
    meta = ondisk.read_meta(str(out))
    graph = hetero_graph(num_nodes=3000, num_edges=20000, feat_dim=8, num_classes=6, seed=2)
    assert meta["num_parts"] == 2 and meta["num_nodes"] == 3000 and meta["num_edges"] == 40000
    assert meta["schema"]["node_types"] == list(IGBH_NODES) and meta["schema"]["target"] == "paper"
    assert meta["schema"]["relation_counts"] == list(np.bincount(graph.edata[ETYPE], minlength=8))
    assert np.sum(meta["schema"]["type_counts"], axis=0).tolist() == list(np.diff(graph.type_offsets))
    assert meta["source"]["generator"]["edges"] == 20000
    # without reverses: four relations; the existing output is replaced only with --force
    assert main(FLAGS + ["--parts", "1", "--no-add-reverse", "--force", "--out", str(out)]) == 0
    meta = ondisk.read_meta(str(out))
    assert meta["num_edges"] == 20000 and len(meta["schema"]["edge_types"]) == 4
    assert sorted(os.listdir(out.parent)) == ["igbh"]  # no temporary directory or lock left behind


def test_cli_writes_a_typed_npz_that_reads_back_as_the_graph(tmp_path, capsys):
    out = tmp_path / "igbh.npz"
    assert main(FLAGS + ["--out", str(out)]) == 0
    assert "hetero: 3,000 nodes, 40,000 edges" in capsys.readouterr().out
    graph = hetero_graph(num_nodes=3000, num_edges=20000, feat_dim=8, num_classes=6, seed=2)
    back = read_graph(str(out))  # the format is detected from the array names
    assert back.schema == graph.schema and np.array_equal(back.type_offsets, graph.type_offsets)
    for name in ("src", "dst"):
        assert np.array_equal(getattr(back, name), getattr(graph, name)), name
    assert np.array_equal(back.edata[ETYPE], graph.edata[ETYPE])
    for name in ("label", "train_mask", "val_mask", "test_mask"):
        assert np.array_equal(back.ndata[name], graph.ndata[name]), name
    for node_type in IGBH_NODES:
        assert np.array_equal(back.typed_fields[node_type]["feat"], graph.typed_fields[node_type]["feat"])
    assert os.listdir(tmp_path) == ["igbh.npz"]


@pytest.mark.parametrize("flags, message", [
    (["--parts", None], "field '--parts': a dataset directory needs a part count"),
    (["--out", "g.npz"], "field '--parts': partitions into a dataset directory"),
    (["--nodes", "30", "--edges", "100"], "field '--nodes': too few nodes for 6 classes"),
    (["--nodes", "3000", "--edges", "3000000"], "field '--edges': gives relation"),
    (["--homophily", "1.5"], "field '--homophily'"),
    (["--split", "0.5,x"], "field '--split'"),
    (["--split", "0.7,0.3,0.3"], "field '--split'"),
    (["--parts", "3001"], "field '--parts': more parts than nodes (3,000)"),
])
def test_cli_bad_flags_one_line_exit_2_nothing_written(tmp_path, capsys, flags, message):
    out = tmp_path / "d"
    argv = FLAGS + ["--parts", "2", "--out", str(out)]
    for flag_at in range(0, len(flags), 2):  # the flags given replace the base ones (None: leave it out)
        flag, value = flags[flag_at:flag_at + 2]
        if flag == "--out":
            value = str(tmp_path / value)
        if flag in argv:
            at = argv.index(flag)
            argv[at:at + 2] = [] if value is None else [flag, value]
        else:
            argv += [flag, value]
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    # (argparse's own refusals name the subcommand: "hpcgnn generate hetero: error: ...")
    assert err.startswith("hpcgnn generate") and ": error: " in err and err.count("\n") == 1, err
    assert message in err, err
    assert os.listdir(tmp_path) == []


def test_cli_refuses_an_existing_output_without_force(tmp_path, capsys):
    out = tmp_path / "d"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(SystemExit) as stop:
        main(FLAGS + ["--parts", "1", "--out", str(out)])
    assert stop.value.code == 2
    assert "field '--out': output exists (pass --force to replace it)" in capsys.readouterr().err
    assert os.listdir(out) == ["keep.txt"]


@pytest.mark.parametrize("kind, required, classes, feat_dim", [
    ("rmat", ["--edges", "90"], 10, 64), ("sbm", ["--avg-degree", "3"], 10, 64),
    ("hetero", ["--edges", "90"], 19, 128)])
def test_each_kind_defaults_its_shared_flags_and_its_help_says_so(kind, required, classes, feat_dim, capsys):
    """The flags every generator takes carry each kind's own defaults (hetero: IGBH's label set
    and a wider feature), and each --help states the default it parses."""
    from hpcgnn.cli.generate import _build_parser

    args = _build_parser().parse_args([kind, "--nodes", "50", *required, "--out", "g.npz"])
    assert (args.classes, args.feat_dim, args.homophily, args.feat_signal, args.split, args.seed) == \
        (classes, feat_dim, 0.7, 0.15, "0.6,0.2,0.2", 0)
    with pytest.raises(SystemExit):
        main([kind, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"classes (default {classes}" in text and f"(default {feat_dim}" in text, text


@pytest.mark.mpi(sizes=(2,))
def test_under_mpirun_the_ranks_write_the_serial_dataset(nranks, comm, shared_tmp):
    spread = os.path.join(shared_tmp, "spread")
    assert main(FLAGS + ["--parts", "3", "--out", spread]) == 0
    serial = os.path.join(shared_tmp, "serial")
    if comm.rank == 0:
        graph = hetero_graph(num_nodes=3000, num_edges=20000, feat_dim=8, num_classes=6, seed=2)
        partition_graph(graph, serial, 3, "metis", seed=2)
    comm.barrier()
    meta, expected = ondisk.read_meta(spread), ondisk.read_meta(serial)
    assert json.dumps(meta["schema"]) == json.dumps(expected["schema"])
    for part in range(3):
        got, want = ondisk.read_part(spread, meta, part), ondisk.read_part(serial, expected, part)
        assert sorted(got) == sorted(want)
        for name in want:
            assert np.array_equal(np.asarray(got[name]), np.asarray(want[name])), name
