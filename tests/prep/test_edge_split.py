"""Held-out edge sets for link prediction (``--edge-split``): the split, the evaluation negatives,
the part files and meta.json (format version 2), the OGB link reader, DistGraph's view, refusals."""
from __future__ import annotations

import dataclasses
import gzip
import json
import os
import pickle
import re

import h5py
import numpy as np
import pytest

from hpcgnn.cli import inspect as inspect_command
from hpcgnn.cli import partition as partition_cmd
from hpcgnn.format import ondisk
from hpcgnn.prep import inspection
from hpcgnn.prep.edge_split import NEGATIVE_ROUNDS, hold_out_edges, parse_edge_split, unit_keys
from hpcgnn.prep.graph import Graph
from hpcgnn.prep.partition import partition_graph
from hpcgnn.prep.read import detect_format, read_graph, write_npz
from hpcgnn.prep.transform import largest_component, symmetrize
from hpcgnn.runtime.errors import InputError
from hpcgnn.testing.graphs import clustered_graph

FRACTIONS = (0.85, 0.05, 0.1)


def sym_graph(num_nodes=300, avg_degree=8, seed=0):
    return symmetrize(clustered_graph(num_nodes=num_nodes, avg_degree=avg_degree, seed=seed))


def keys_of(src, dst, n):
    return np.asarray(src, dtype=np.int64) * n + np.asarray(dst, dtype=np.int64)


def split_units(link, n, symmetric):
    return {name: unit_keys(e.src, e.dst, n, symmetric) for name, e in link.sets().items()}


def assert_negatives_valid(graph, link):
    """No negative is its positive's source or an edge of the full graph (graph + held-out)."""
    n = graph.num_nodes
    full = [keys_of(graph.src, graph.dst, n)]
    for edges in link.sets().values():
        full += [keys_of(edges.src, edges.dst, n), keys_of(edges.dst, edges.src, n)] if link.symmetric \
            else [keys_of(edges.src, edges.dst, n)]
    full = np.unique(np.concatenate(full))
    for edges in link.sets().values():
        assert edges.neg.shape == (len(edges), link.eval_negatives) and edges.neg.dtype == np.int64
        assert (edges.neg_src is None) == (link.negatives_kind == "corrupt")
        neg_src = np.repeat(edges.src[:, None], edges.neg.shape[1], 1) if edges.neg_src is None else edges.neg_src
        assert neg_src.shape == edges.neg.shape and neg_src.dtype == np.int64
        for ids in (edges.neg, neg_src):
            assert (ids >= 0).all() and (ids < n).all()
        assert not (edges.neg == neg_src).any()
        assert not np.isin(keys_of(neg_src.reshape(-1), edges.neg.reshape(-1), n), full).any()


# --- the split in memory ---------------------------------------------------------------------------

def test_symmetric_split_invariants():
    graph = sym_graph()
    n = graph.num_nodes
    out = hold_out_edges(graph, FRACTIONS, eval_negatives=7, seed=3)
    link = out.link
    assert link.symmetric and out.symmetric and link.split == list(FRACTIONS) and link.negatives == "uniform"
    before = np.unique(unit_keys(graph.src, graph.dst, n, True))
    train = np.unique(unit_keys(out.src, out.dst, n, True))
    held = split_units(link, n, True)
    assert len(held["val"]) == round(0.05 * before.size) and len(held["test"]) == round(0.1 * before.size)
    # disjoint, and together exactly the units before
    for a, b in ((train, held["val"]), (train, held["test"]), (held["val"], held["test"])):
        assert not np.isin(a, b).any()
    assert np.array_equal(np.sort(np.concatenate([train, held["val"], held["test"]])), before)
    assert link.num_train == train.size == before.size - len(held["val"]) - len(held["test"])
    # both directions of a held-out pair left the graph: the graph is still symmetric
    remaining = keys_of(out.src, out.dst, n)
    assert np.isin(keys_of(out.dst, out.src, n), remaining).all()
    for edges in link.sets().values():
        assert not np.isin(keys_of(edges.src, edges.dst, n), remaining).any()
        assert not np.isin(keys_of(edges.dst, edges.src, n), remaining).any()
        assert (edges.src != edges.dst).all()
        assert (edges.src > edges.dst).any() and (edges.src < edges.dst).any()  # random orientation
    assert out.num_edges == graph.num_edges - 2 * (len(link.val) + len(link.test))
    # edge fields follow their edges
    order = np.argsort(keys_of(graph.src, graph.dst, n))
    pos = order[np.searchsorted(keys_of(graph.src, graph.dst, n)[order], remaining)]
    assert np.array_equal(out.edata["weight"], graph.edata["weight"][pos])
    assert_negatives_valid(graph, link)
    assert link.meta() == {"symmetric": True, "split": list(FRACTIONS), "seed": 3, "eval_negatives": 7,
                           "negatives": "uniform", "negatives_kind": "corrupt", "num_train": link.num_train,
                           "num_val": len(link.val),
                           "num_test": len(link.test)}


def test_uniform_pair_negatives():
    graph = sym_graph(num_nodes=400)
    n = graph.num_nodes
    out = hold_out_edges(graph, FRACTIONS, eval_negatives=50, seed=5, negatives_kind="uniform")
    link = out.link
    assert link.negatives_kind == "uniform" and link.meta()["negatives_kind"] == "uniform"
    assert_negatives_valid(graph, link)
    corrupt = hold_out_edges(graph, FRACTIONS, eval_negatives=50, seed=5)
    assert np.array_equal(corrupt.link.test.src, link.test.src)  # the same split, other negatives
    ends = np.concatenate([e.neg_src.reshape(-1) for e in link.sets().values()])
    # both ends are drawn: the sources are not the positives' and spread over every node
    assert (link.test.neg_src != link.test.src[:, None]).mean() > 0.95
    counts = np.bincount(ends, minlength=n)
    expected = ends.size / n
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < n + 5 * np.sqrt(2 * n), chi2  # n - 1 degrees of freedom, a 5-sigma bound


def test_directed_split_units_are_distinct_pairs():
    graph = clustered_graph(num_nodes=200, avg_degree=10, seed=1)  # directed, with repeated pairs
    n = graph.num_nodes
    keys = keys_of(graph.src, graph.dst, n)
    assert np.unique(keys).size < keys.size
    out = hold_out_edges(graph, (0.7, 0.1, 0.2), eval_negatives=5, seed=0)
    link = out.link
    assert not link.symmetric
    units = np.unique(keys)
    held = split_units(link, n, False)
    remaining = keys_of(out.src, out.dst, n)
    for name in ("val", "test"):
        assert not np.isin(held[name], remaining).any()  # every copy of a held-out pair left
    train = np.unique(remaining)
    assert np.array_equal(np.sort(np.concatenate([train, held["val"], held["test"]])), units)
    assert link.num_train == train.size
    assert_negatives_valid(graph, link)


def test_split_is_deterministic_for_a_seed():
    graph = sym_graph()
    a, b = (hold_out_edges(graph, FRACTIONS, 5, seed=11) for _ in range(2))
    c = hold_out_edges(graph, FRACTIONS, 5, seed=12)
    for name in ("val", "test"):
        ea, eb, ec = (getattr(x.link, name) for x in (a, b, c))
        for field in ("src", "dst", "neg"):
            assert np.array_equal(getattr(ea, field), getattr(eb, field))
        assert not np.array_equal(ea.src, ec.src)
    assert np.array_equal(a.src, b.src) and np.array_equal(a.dst, b.dst)


def test_self_loops_always_train_and_dense_graphs_keep_rejected_draws():
    # a complete graph on 6 nodes with self loops: no valid negative exists at all
    n = 6
    src, dst = (x.reshape(-1) for x in np.meshgrid(np.arange(n), np.arange(n), indexing="ij"))
    graph = dataclasses.replace(Graph(n, src.astype(np.int64), dst.astype(np.int64)), symmetric=True)
    out = hold_out_edges(graph, (0.6, 0.2, 0.2), eval_negatives=4, seed=0)
    link = out.link
    assert np.isin(keys_of(np.arange(n), np.arange(n), n), keys_of(out.src, out.dst, n)).all()
    assert len(link.val) == len(link.test) == round(0.2 * 21)
    kept = link.meta()["negatives_kept_rejected"]
    assert kept == (len(link.val) + len(link.test)) * 4  # every draw rejected for NEGATIVE_ROUNDS rounds
    assert NEGATIVE_ROUNDS >= 3
    for edges in link.sets().values():
        assert ((edges.neg >= 0) & (edges.neg < n)).all()  # the array is still full


@pytest.mark.parametrize("text, pattern", [
    ("0.8,0.1,0.2", r"must sum to 1 \(they sum to 1\.1\)"),
    ("0.9,0.1", r"three fractions.*got 2 value"),
    ("1,0,0", r"val \+ test must be above 0"),
    ("0.9,-0.1,0.2", r">= 0"),
    ("x,y,z", r"expected 'dataset' or three fractions"),
])
def test_bad_edge_split_values(text, pattern):
    value = text.replace(".", r"\.")
    with pytest.raises(InputError, match=r"field '--edge-split': .*" + pattern + r".*\(value " + value):
        parse_edge_split(text)
    assert parse_edge_split("0.85, 0.05, 0.1") == FRACTIONS
    assert parse_edge_split("0.3333333,0.3333333,0.3333334") and parse_edge_split("dataset") == "dataset"


# --- on disk -----------------------------------------------------------------------------------------

def load_dataset(directory):
    meta = ondisk.read_meta(directory)
    parts = [ondisk.read_part(directory, meta, p) for p in range(meta["num_parts"])]
    return meta, parts


def link_sets_in_orig_ids(directory):
    """Every part's edge sets as sorted rows (src, dst, neg...) in the input's ids, per split."""
    meta, parts = load_dataset(directory)
    orig = np.concatenate([p["orig_id"] for p in parts])
    out = {}
    for split in ondisk.LINK_SPLITS:
        rows = [np.column_stack([orig[p[f"link_{split}_{a}"]] for a in ondisk.link_arrays(meta)]) for p in parts]
        joined = np.concatenate(rows)
        out[split] = joined[np.lexsort(joined.T[::-1])]
    return out


def check_dataset_links(directory):
    meta, parts = load_dataset(directory)
    n, link = meta["num_nodes"], meta["link"]
    csc_keys = []
    for p, (arrays, start, end) in enumerate(zip(parts, meta["node_starts"], meta["node_starts"][1:])):
        dst = start + np.repeat(np.arange(end - start), np.diff(arrays["indptr"]))
        csc_keys.append(keys_of(arrays["indices"], dst, n))
        for split in ondisk.LINK_SPLITS:
            src, dst_eval, *negs = (arrays[f"link_{split}_{a}"] for a in ondisk.link_arrays(meta))
            assert len(negs) == (2 if link.get("negatives_kind") == "uniform" else 1)
            assert all(a.dtype == np.int64 for a in (src, dst_eval, *negs))
            assert ((dst_eval >= start) & (dst_eval < end)).all()  # owned by the part
            assert all(neg.shape == (src.shape[0], link["eval_negatives"]) for neg in negs)
            assert meta["parts"][p][f"link_{split}"] == src.shape[0]
    csc_keys = np.concatenate(csc_keys)
    for split in ondisk.LINK_SPLITS:
        src = np.concatenate([a[f"link_{split}_src"] for a in parts])
        dst = np.concatenate([a[f"link_{split}_dst"] for a in parts])
        assert src.shape[0] == link[f"num_{split}"]
        assert not np.isin(keys_of(src, dst, n), csc_keys).any()
        assert not np.isin(keys_of(dst, src, n), csc_keys).any()
    assert inspection.verify(directory, meta) == []
    return meta


@pytest.mark.parametrize("kind", ["corrupt", "uniform"])
def test_parts_hold_the_same_edge_sets_for_1_2_4_parts(tmp_path, kind):
    graph = hold_out_edges(sym_graph(), FRACTIONS, eval_negatives=6, seed=2, negatives_kind=kind)
    sets = []
    for parts in (1, 2, 4):
        meta = partition_graph(graph, tmp_path / f"p{parts}", parts, "metis")
        assert meta["version"] == ondisk.FORMAT_VERSION == 2
        assert meta["link"] == graph.link.meta()
        assert "link_val_src" not in meta["node_fields"]
        check_dataset_links(tmp_path / f"p{parts}")
        sets.append(link_sets_in_orig_ids(tmp_path / f"p{parts}"))
    for split in ondisk.LINK_SPLITS:
        edges = graph.link.sets()[split]
        want = np.column_stack([edges.src, edges.dst, edges.neg] + ([edges.neg_src] if kind == "uniform" else []))
        want = want[np.lexsort(want.T[::-1])]
        for got in sets:
            assert np.array_equal(got[split], want)


def test_cli_edge_split_then_inspect(tmp_path, capsys):
    path = tmp_path / "g.npz"
    write_npz(clustered_graph(num_nodes=300, avg_degree=8), path)
    out = tmp_path / "parts"
    assert partition_cmd.main([str(path), "--parts", "2", "--out", str(out), "--symmetrize", "--edge-split",
                               "0.8,0.1,0.1", "--eval-negatives", "9", "--split-seed", "4"]) == 0
    meta = check_dataset_links(out)
    assert meta["link"]["eval_negatives"] == 9 and meta["link"]["seed"] == 4 and meta["link"]["symmetric"]
    assert meta["source"]["edge_split"] == "0.8,0.1,0.1"
    capsys.readouterr()
    assert inspect_command.main([str(out), "--verify"]) == 0
    text = capsys.readouterr().out
    assert "verify: OK" in text and "edge sets (undirected edges, split 0.8,0.1,0.1, seed 4)" in text
    assert "9 corrupt negatives (drawn)" in text
    # an evaluation edge planted into the adjacency is found
    part = ondisk.read_part(out, meta, 0)
    lid = int(np.flatnonzero(np.diff(part["indptr"]))[0])
    with h5py.File(out / ondisk.part_file_name(0), "r+") as h5:
        h5["link_val_src"][0] = part["indices"][part["indptr"][lid]]
        h5["link_val_dst"][0] = lid
    problems = inspection.verify(out, meta)
    assert any("held-out evaluation edges" in p for p in problems), problems


def test_meta_versions_and_link_validation(tmp_path):
    plain = tmp_path / "plain"
    partition_graph(clustered_graph(num_nodes=200), plain, 2, "random")
    meta_path = plain / "meta.json"
    meta = json.loads(meta_path.read_text())
    assert meta["version"] == 2 and "link" not in meta
    meta["version"] = 1  # a dataset written before edge sets existed still loads
    meta_path.write_text(json.dumps(meta))
    v1 = ondisk.read_meta(plain)
    assert ondisk.link_datasets(v1) == []
    assert not any(k.startswith("link_") for k in ondisk.read_part(plain, v1, 1))
    assert inspection.verify(plain, v1) == []

    linked = tmp_path / "linked"
    partition_graph(hold_out_edges(sym_graph(200), FRACTIONS, 3), linked, 2, "random")
    good = json.loads((linked / "meta.json").read_text())
    assert ondisk.link_datasets(good) == [f"link_{s}_{a}" for s in ("val", "test") for a in ("src", "dst", "neg")]

    def refused(change, pattern):
        bad = json.loads(json.dumps(good))
        change(bad)
        with pytest.raises(InputError, match=pattern) as info:
            ondisk.validate_meta(bad, "meta.json", linked)
        assert "\n" not in str(info.value)

    refused(lambda m: m.update(version=1), r"field 'version': edge sets need format version 2")
    refused(lambda m: m.update(version=4), r"field 'version': unsupported version \(this hpcgnn reads 1, 2 and 3\)")
    refused(lambda m: m["link"].update(num_val=m["link"]["num_val"] + 1), r"field 'link\.num_val': the parts'")
    refused(lambda m: m["parts"][1].pop("link_test"), r"field 'parts\[1\]\.link_test': must be a non-negative")
    refused(lambda m: m["link"].update(eval_negatives=0), r"field 'link\.eval_negatives'")
    refused(lambda m: m["link"].update(negatives="pool"), r"field 'link\.negatives'")
    refused(lambda m: m["link"].update(symmetric=1), r"field 'link\.symmetric'")
    refused(lambda m: m["link"].update(split=[0.5, 0.5]), r"field 'link\.split'")
    refused(lambda m: m["node_fields"].update(link_x={"dtype": "float32", "shape": []}),
            r"field 'node_fields': is not a usable field name \(value link_x\)")
    # a part file whose link dataset disagrees with meta.json is refused when opened
    with h5py.File(linked / ondisk.part_file_name(0), "r+") as h5:
        del h5["link_test_neg"]
    with pytest.raises(InputError, match=r"field 'link_test_neg': dataset listed in meta.json is missing"):
        ondisk.open_part(linked, good, 0)


# --- OGB link datasets -----------------------------------------------------------------------------

def write_gz(path, text):
    with gzip.open(path, "wt") as fh:
        fh.write(text)


def write_ogb_link(root, style, num_nodes=40, seed=0, feat=True):
    """A tiny OGB link dataset: a ring plus chords as edge.csv, eval edges not in it."""
    import torch

    rng = np.random.default_rng(seed)
    raw, split = root / "raw", root / "split" / "time"
    raw.mkdir(parents=True)
    split.mkdir(parents=True)
    ring = np.stack([np.arange(num_nodes), (np.arange(num_nodes) + 1) % num_nodes], axis=1)
    chords = np.stack([np.arange(0, num_nodes, 2), (np.arange(0, num_nodes, 2) + 5) % num_nodes], axis=1)
    edges = np.concatenate([ring, chords])
    write_gz(raw / "edge.csv.gz", "".join(f"{s},{d}\n" for s, d in edges))
    write_gz(raw / "num-node-list.csv.gz", f"{num_nodes}\n")
    if feat:
        write_gz(raw / "node-feat.csv.gz", "".join(f"{i}.0,1.0\n" for i in range(num_nodes)))
    val = np.array([[0, 10], [3, 20], [7, 30]])
    test = np.array([[1, 11], [4, 21], [8, 31], [9, 33]])
    tensor = lambda a: torch.as_tensor(np.ascontiguousarray(a), dtype=torch.int64)  # noqa: E731
    if style == "edge":
        torch.save({"edge": tensor(edges)}, split / "train.pt")
        for name, pos in (("valid", val), ("test", test)):
            pool = tensor(rng.integers(0, num_nodes, (50, 2)))
            torch.save({"edge": tensor(pos), "edge_neg": pool}, split / f"{name}.pt")
    else:
        torch.save({"source_node": tensor(edges[:, 0]), "target_node": tensor(edges[:, 1])}, split / "train.pt")
        for name, pos in (("valid", val), ("test", test)):
            torch.save({"source_node": tensor(pos[:, 0]), "target_node": tensor(pos[:, 1]),
                        "target_node_neg": tensor(rng.integers(0, num_nodes, (pos.shape[0], 5)))},
                       split / f"{name}.pt")
    return root, val, test


@pytest.mark.parametrize("style", ["edge", "source_node"])
def test_ogb_link_directory(tmp_path, style):
    import torch

    root, val, test = write_ogb_link(tmp_path / "ogbl_toy", style)
    assert detect_format(root) == "ogb"
    graph = read_graph(root)
    assert graph.num_nodes == 40 and graph.ndata["feat"].shape == (40, 2) and graph.link is not None
    assert np.array_equal(np.column_stack([graph.link.val.src, graph.link.val.dst]), val)
    out = tmp_path / "parts"
    assert partition_cmd.main([str(root), "--parts", "2", "--out", str(out), "--symmetrize",
                               "--edge-split", "dataset", "--eval-negatives", "3"]) == 0
    meta = check_dataset_links(out)
    link = meta["link"]
    assert link["split"] == "dataset" and link["num_val"] == 3 and link["num_test"] == 4
    assert link["num_train"] == 60  # the 40 ring and 20 chord edges, one unit each
    sets = link_sets_in_orig_ids(out)
    assert {tuple(r) for r in sets["val"][:, :2]} == {tuple(r) for r in val}
    if style == "edge":  # pool negatives do not fit K per positive: K uniform ones drawn instead
        assert link["negatives"] == "uniform" and link["eval_negatives"] == 3 and link["dataset_negatives"] == "pool"
    else:  # per-positive negatives are used as given
        assert link["negatives"] == "dataset" and link["eval_negatives"] == 5
        given = torch.load(root / "split" / "time" / "test.pt", weights_only=True)
        want = np.column_stack([given["source_node"].numpy(), given["target_node"].numpy(),
                                given["target_node_neg"].numpy()])
        assert np.array_equal(sets["test"], want[np.lexsort(want.T[::-1])])
        # pairs asked for: the dataset's (u, n) negatives are replaced, noted in meta.json
        assert partition_cmd.main([str(root), "--parts", "2", "--out", str(out), "--force", "--symmetrize",
                                   "--edge-split", "dataset", "--eval-negatives-kind", "uniform"]) == 0
        link = check_dataset_links(out)["link"]
        assert link["negatives"] == "uniform" and link["negatives_kind"] == "uniform"
        assert link["dataset_negatives"] == "replaced" and link["eval_negatives"] == 100


def test_ogb_link_largest_component_renumbers_the_split(tmp_path):
    root, _, _ = write_ogb_link(tmp_path / "ogbl_toy", "source_node", feat=False)
    write_gz(root / "raw" / "num-node-list.csv.gz", "45\n")  # nodes 40..44: isolated
    graph = read_graph(root)
    graph.link.val.dst[0] = 42  # a positive that leaves with its end
    graph.link.test.neg[0, :2] = 44  # negatives that are drawn again
    small = largest_component(symmetrize(graph))
    assert small.num_nodes == 40 and len(small.link.val) == 2 and len(small.link.test) == 4
    assert small.link.notes["positives_dropped"] == 1 and (small.link.test.neg[0, :2] == -1).all()
    out = hold_out_edges(small, "dataset", seed=0)
    assert out.link.meta()["negatives_redrawn"] == 2 and (out.link.test.neg >= 0).all()


def test_ogb_node_directory_still_reads_as_node_dataset(tmp_path):
    raw, split = tmp_path / "ogbn_toy" / "raw", tmp_path / "ogbn_toy" / "split" / "time"
    raw.mkdir(parents=True)
    split.mkdir(parents=True)
    write_gz(raw / "edge.csv.gz", "0,1\n1,2\n2,0\n")
    write_gz(raw / "num-node-list.csv.gz", "3\n")
    write_gz(raw / "node-label.csv.gz", "0\n1\n0\n")
    for stem, ids in (("train", [0]), ("valid", [1]), ("test", [2])):
        write_gz(split / f"{stem}.csv.gz", f"{ids[0]}\n")
    graph = read_graph(tmp_path / "ogbn_toy")
    assert graph.link is None and graph.ndata["train_mask"].tolist() == [True, False, False]


class Payload:
    def __reduce__(self):
        return (print, ("this must never run",))


def test_ogb_link_refuses_a_pt_file_that_is_not_plain_tensors(tmp_path):
    import torch

    root, _, _ = write_ogb_link(tmp_path / "ogbl_toy", "edge")
    torch.save({"edge": Payload()}, root / "split" / "time" / "valid.pt", pickle_module=pickle)
    with pytest.raises(InputError, match=r"valid\.pt: field 'format': cannot be read with "
                                         r"torch\.load\(weights_only=True\)") as info:
        read_graph(root)
    assert "\n" not in str(info.value)
    (root / "split" / "time" / "valid.pt").write_bytes(b"not a torch file")
    with pytest.raises(InputError, match=r"valid\.pt: field 'format'"):
        read_graph(root)


# --- refusals through the command line ------------------------------------------------------------

def test_cli_refusals_are_one_line_and_leave_nothing(tmp_path, capsys):
    """``hpcgnn partition`` run in the test's process (no fresh interpreter for each case)."""
    from hpcgnn.cli.partition import main

    graph_path = tmp_path / "g.npz"
    write_npz(clustered_graph(num_nodes=100, avg_degree=4), graph_path)
    tiny = tmp_path / "tiny.npz"
    np.savez(tiny, src=np.array([0, 1, 2]), dst=np.array([1, 2, 0]))
    cases = [
        ((graph_path, "--edge-split", "0.8,0.1,0.2"),
         r"field '--edge-split': fractions must sum to 1 .*0\.8,0\.1,0\.2"),
        ((graph_path, "--edge-split", "0.9,0.1"), r"field '--edge-split': expected .*\(value 0\.9,0\.1\)"),
        ((tiny, "--edge-split", "0.85,0.05,0.1"),
         r"tiny\.npz: field '--edge-split': graph too small to split.*\(value 0\.85,0\.05,0\.1\)"),
        ((graph_path, "--edge-split", "dataset"), r"g\.npz: field '--edge-split': the input has no edge split"),
        ((graph_path, "--edge-split", "0.8,0.1,0.1", "--eval-negatives-kind", "pairs"),
         r"field '--eval-negatives-kind': must be one of corrupt, uniform \(value pairs\)"),
        ((graph_path, "--eval-negatives-kind", "uniform"),
         r"field '--eval-negatives-kind': applies only with --edge-split \(value uniform\)"),
    ]
    for index, (args, pattern) in enumerate(cases):
        out = tmp_path / f"out{index}"
        with pytest.raises(SystemExit) as stop:
            main([str(arg) for arg in (*args, "--parts", "1", "--out", out)])
        err = capsys.readouterr().err
        assert stop.value.code == 2, err
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        assert lines[0].startswith("hpcgnn partition: error: ")
        assert re.search(pattern, lines[0]), lines[0]
        assert not out.exists()
        assert not [p for p in os.listdir(tmp_path) if p.startswith(f".out{index}")]


# --- DistGraph -------------------------------------------------------------------------------------

@pytest.mark.mpi(sizes=(1, 2))
def test_dist_graph_reads_its_edge_sets(nranks, comm, shared_tmp):
    from hpcgnn import DistGraph

    graph = hold_out_edges(sym_graph(200), FRACTIONS, eval_negatives=4, seed=1,
                           negatives_kind="uniform") if comm.rank == 0 else None
    path, plain, serial = (os.path.join(shared_tmp, name) for name in ("links", "plain", "serial"))
    if comm.rank == 0:
        partition_graph(graph, serial, nranks, "metis")
        partition_graph(clustered_graph(num_nodes=200), plain, nranks, "random")
    comm.barrier()
    partition_graph(graph, path, nranks, "metis", comm=comm if nranks > 1 else None)  # parallel writers
    comm.barrier()
    meta = ondisk.read_meta(path)
    if comm.rank == 0:
        for p in range(nranks):
            name = ondisk.part_file_name(p)
            with open(os.path.join(serial, name), "rb") as a, open(os.path.join(path, name), "rb") as b:
                assert a.read() == b.read(), name
    with DistGraph(path, comm) as g:
        assert g.link_meta == meta["link"]
        mine = ondisk.read_part(path, meta, comm.rank)
        for split in ondisk.LINK_SPLITS:
            for array, got in zip(ondisk.link_arrays(meta), g.link[split], strict=True):
                assert got.dtype == np.int64 and np.array_equal(got, mine[f"link_{split}_{array}"])
            assert ((g.link[split][1] >= g.local_nodes[0]) & (g.link[split][1] < g.local_nodes[1])).all()
        total = comm.allreduce(len(g.link["test"][0]))
        assert total == meta["link"]["num_test"]
    with DistGraph(plain, comm) as g:
        assert g.link is None and g.link_meta is None
