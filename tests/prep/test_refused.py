"""Inputs that parse but are wrong are refused at partition time, in one line, before any large allocation."""
from __future__ import annotations

import gzip
import json
import os
import pickle
import resource
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp

from hpcgnn.prep import graph as graph_module
from hpcgnn.prep.graph import Graph
from hpcgnn.prep.read import read_graph
from hpcgnn.prep.read.edgelist import read_edgelist
from hpcgnn.prep.transform import apply_split
from hpcgnn.runtime.errors import InputError

SRC = np.array([0, 1, 2, 3, 4, 0], dtype=np.int64)
DST = np.array([1, 2, 3, 4, 0, 2], dtype=np.int64)
HUGE_ID = 4_000_000_000  # id -> node count: 29.8 GiB of int64 indptr alone if nothing stopped it


def save_npz(path, **arrays):
    np.savez(path, **arrays)
    return path


def masks(train, val=(), test=(), n=5):
    out = {}
    for name, ids in (("train_mask", train), ("val_mask", val), ("test_mask", test)):
        mask = np.zeros(n, dtype=bool)
        mask[list(ids)] = True
        out[name] = mask
    return out


def write_text(path, text):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wt") as fh:
        fh.write(text)
    return path


# --- split masks ----------------------------------------------------------------------------------

@pytest.mark.parametrize("split, pattern", [
    (masks([0, 1, 3], [3, 4]), r"field 'val_mask': train_mask and val_mask overlap: 1 node\(s\) in both, "
                               r"e\.g\. node 3 \(value 3\)"),
    (masks([0, 1], [2], [1, 2]), r"field 'test_mask': train_mask and test_mask overlap: .*\(value 1\)"),
    (masks([0], [2, 4], [4]), r"field 'test_mask': val_mask and test_mask overlap: .*\(value 4\)"),
])
def test_overlapping_npz_masks_are_refused(tmp_path, split, pattern):
    path = save_npz(tmp_path / "g.npz", src=SRC, dst=DST, label=np.zeros(5, np.int64), **split)
    with pytest.raises(InputError, match=r"g\.npz: " + pattern):
        read_graph(path)


def test_overlapping_ogb_split_files_are_refused(tmp_path):
    raw, split = tmp_path / "ogbn_toy" / "raw", tmp_path / "ogbn_toy" / "split" / "time"
    raw.mkdir(parents=True)
    split.mkdir(parents=True)
    write_text(raw / "edge.csv.gz", "".join(f"{s},{d}\n" for s, d in zip(SRC, DST)))
    write_text(raw / "num-node-list.csv.gz", "5\n")
    write_text(raw / "node-label.csv.gz", "0\n1\n0\n1\n0\n")
    for stem, ids in (("train", [0, 1]), ("valid", [2, 3]), ("test", [3, 4])):
        write_text(split / f"{stem}.csv.gz", "".join(f"{i}\n" for i in ids))
    with pytest.raises(InputError, match=r"ogbn_toy: field 'test_mask': val_mask and test_mask overlap.*\(value 3\)"):
        read_graph(tmp_path / "ogbn_toy")


def test_disjoint_masks_pass():
    graph = Graph(5, SRC, DST, {"label": np.zeros(5, np.int64), **masks([0, 1], [2], [3, 4])}).validate()
    assert graph.ndata["train_mask"].sum() == 2


# --- shapes and row counts ---------------------------------------------------------------------------

@pytest.mark.parametrize("fields, pattern", [
    ({"feat": np.ones(5, np.float32)}, r"field 'feat': features must be 2-D \[num_nodes, width\] \(value \[5\]\)"),
    ({"feat": np.ones((4, 3), np.float32)}, r"field 'feat': has 4 rows but num_nodes is 5 \(value 4\)"),
    ({"feat": np.ones((6, 3), np.float32)}, r"field 'feat': has 6 rows but num_nodes is 5 \(value 6\)"),
    ({"label": np.zeros(3, np.int64)}, r"field 'label': has 3 rows but num_nodes is 5 \(value 3\)"),
    ({"label": np.zeros((5, 2, 2), np.int64)}, r"field 'label': labels must be 1-D"),
    ({"train_mask": np.ones((5, 2), bool)}, r"field 'train_mask': masks must be 1-D"),
])
def test_bad_node_field_shapes_are_refused(tmp_path, fields, pattern):
    path = save_npz(tmp_path / "g.npz", src=SRC, dst=DST, **fields)
    with pytest.raises(InputError, match=r"g\.npz: " + pattern):
        read_graph(path)


# --- labels -------------------------------------------------------------------------------------------

def test_unlabelled_node_inside_a_mask_is_refused(tmp_path):
    label = np.array([0, 1, -1, 1, 0])
    path = save_npz(tmp_path / "g.npz", src=SRC, dst=DST, label=label, **masks([0, 1], [2, 3], [4]))
    with pytest.raises(InputError, match=r"g\.npz: field 'label': node 2 is in val_mask but has label -1 "
                                         r"\(unlabelled; 1 such node\(s\)\) \(value 2\)"):
        read_graph(path)


def test_unlabelled_node_outside_every_mask_is_kept(tmp_path):
    label = np.array([0, 1, -1, 1, 0])
    path = save_npz(tmp_path / "g.npz", src=SRC, dst=DST, label=label, **masks([0, 1], [3], [4]))
    graph = read_graph(path)
    np.testing.assert_array_equal(graph.ndata["label"], label)
    # random splits draw from the labelled nodes only, so they never put -1 in a mask
    split = apply_split(graph, "0.4,0.3,0.3", seed=1)
    assert not any(split.ndata[m][2] for m in ("train_mask", "val_mask", "test_mask"))
    split.validate()


@pytest.mark.parametrize("label", [np.array([0, 1, -2, 1, 0]), np.array([0, 1, -7, 1, 0])])
def test_labels_below_minus_one_are_refused(tmp_path, label):
    path = save_npz(tmp_path / "g.npz", src=SRC, dst=DST, label=label)
    with pytest.raises(InputError, match=r"field 'label': labels must be >= 0, or -1 for an unlabelled node"):
        read_graph(path)


# --- Shchur indices -----------------------------------------------------------------------------------

ADJ = sp.csr_matrix((np.ones(6, dtype=np.float32), (SRC, DST)), shape=(5, 5))


def shchur(path, **overrides):
    arrays = {"adj_data": ADJ.data, "adj_indices": ADJ.indices, "adj_indptr": ADJ.indptr,
              "adj_shape": np.array(ADJ.shape), "labels": np.array([0, 1, 0, 1, 0])}
    arrays.update(overrides)
    return save_npz(path, **arrays)


@pytest.mark.parametrize("overrides, pattern", [
    ({"adj_indices": ADJ.indices + 0.5}, r"field 'adj_indices': indices must be whole numbers \(value 1\.5\)"),
    ({"adj_indptr": ADJ.indptr.astype(np.float64) + np.r_[0, 0, 0.25, 0, 0, 0]},
     r"field 'adj_indptr': indices must be whole numbers \(value 3\.25\)"),
    ({"adj_shape": np.array([5.0, 5.5])}, r"field 'adj_shape': indices must be whole numbers \(value 5\.5\)"),
    ({"adj_indices": np.where(ADJ.indices == 2, -3, ADJ.indices)},
     r"field 'adj_indices': indices must be non-negative \(value -3\)"),
    ({"adj_shape": np.array([-5, 5])}, r"field 'adj_shape': indices must be non-negative \(value -5\)"),
    ({"adj_indices": ADJ.indices.astype(str)}, r"field 'adj_indices': indices must be integers"),
])
def test_shchur_non_integer_or_negative_indices_are_refused(tmp_path, overrides, pattern):
    with pytest.raises(InputError, match=r"s\.npz: " + pattern):
        read_graph(shchur(tmp_path / "s.npz", **overrides))


def test_shchur_float_indices_holding_whole_numbers_are_read(tmp_path):
    path = shchur(tmp_path / "s.npz", adj_indices=ADJ.indices.astype(np.float64),
                  adj_indptr=ADJ.indptr.astype(np.float32), adj_shape=np.array([5.0, 5.0]))
    graph = read_graph(path)
    assert graph.num_nodes == 5 and sorted(zip(graph.src, graph.dst)) == sorted(zip(SRC, DST))


# --- huge and sparse node ids ------------------------------------------------------------------------

def _refused_without_allocating(call, pattern):
    tracemalloc.start()
    try:
        with pytest.raises(InputError, match=pattern):
            call()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # the edge-list reader's 64 MiB read buffer is the most it may hold; the id would need 29.8 GiB
    assert peak < 256 << 20, f"{peak / 2**20:.0f} MiB allocated before refusing"


def test_huge_edge_list_id_is_refused_before_allocating(tmp_path):
    path = write_text(tmp_path / "e.txt", f"0 1\n{HUGE_ID} 2\n1 2\n")
    _refused_without_allocating(
        lambda: read_graph(path),
        rf"e\.txt: field 'src': node id implies 4,000,000,001 nodes but the input names at most 6 \(sparse ids\); "
        rf"relabel the ids to 0\.\.n-1 \(--relabel for an edge list\) \(value {HUGE_ID}\)")


def test_huge_npz_id_and_planetoid_test_id_are_refused(tmp_path):
    path = save_npz(tmp_path / "g.npz", src=SRC, dst=np.r_[DST[:-1], HUGE_ID])
    _refused_without_allocating(lambda: read_graph(path), rf"g\.npz: field 'dst': .*sparse ids.*\(value {HUGE_ID}\)")
    directory = tmp_path / "planetoid"
    directory.mkdir()
    onehot = np.eye(2, dtype=np.int32)
    feat = sp.csr_matrix(np.ones((2, 3), np.float32))
    for part, value in {"x": feat[:1], "y": onehot[:1], "allx": feat, "ally": onehot, "tx": feat,
                        "ty": onehot, "graph": {0: [1], 1: [0, 2]}}.items():
        with open(directory / f"ind.toy.{part}", "wb") as fh:
            pickle.dump(value, fh, protocol=2)
    (directory / "ind.toy.test.index").write_text(f"2\n{HUGE_ID}\n")
    _refused_without_allocating(lambda: read_graph(directory),
                                rf"ind\.toy\.test\.index: field 'test\.index': .*sparse ids.*\(value {HUGE_ID}\)")


def test_sparse_ids_can_be_relabelled(tmp_path):
    path = write_text(tmp_path / "e.txt", f"0 1\n{HUGE_ID} 2\n1 {HUGE_ID}\n")
    graph = read_graph(path, relabel=True)
    assert graph.num_nodes == 4
    np.testing.assert_array_equal(graph.ndata["orig_id"], [0, 1, 2, HUGE_ID])
    assert graph.src.tolist() == [0, 3, 1] and graph.dst.tolist() == [1, 2, 3]
    with pytest.raises(InputError, match=r"e\.txt: field 'num_nodes': cannot be combined with relabel"):
        read_edgelist(path, relabel=True, num_nodes=9)
    # the flag reaches the reader through the partition command; the file's ids become orig_id
    meta = partition_main_meta([str(path), "--parts", "1", "--out", str(tmp_path / "parts"), "--relabel"])
    assert meta["num_nodes"] == 4 and "orig_id" not in meta["node_fields"]


def partition_main_meta(argv):
    from hpcgnn.cli.partition import main

    assert main(argv) == 0
    with open(os.path.join(argv[argv.index("--out") + 1], "meta.json")) as fh:
        return json.load(fh)


def test_dense_ids_with_isolated_nodes_pass(tmp_path):
    # below SPARSE_ID_MIN_NODES a generous count is cheap and stays allowed
    graph = read_graph(write_text(tmp_path / "e.txt", "0 1\n1 900000\n"))
    assert graph.num_nodes == 900_001


def test_node_count_that_cannot_fit_is_refused(tmp_path, monkeypatch):
    path = save_npz(tmp_path / "g.npz", src=SRC, dst=DST, num_nodes=np.int64(10**12))
    with pytest.raises(InputError, match=r"g\.npz: field 'num_nodes': 1,000,000,000,000 nodes and 6 edges need "
                                         r"at least 37252\.9 GiB to partition but .* GiB is available"):
        read_graph(path)
    ogb = tmp_path / "ogbn_toy" / "raw"
    ogb.mkdir(parents=True)
    write_text(ogb / "edge.csv.gz", "0,1\n1,2\n")
    write_text(ogb / "num-node-list.csv.gz", f"{10**12}\n")
    write_text(ogb / "node-feat.csv.gz", "1.0\n")
    _refused_without_allocating(lambda: read_graph(tmp_path / "ogbn_toy"),
                                r"num-node-list\.csv\.gz: field 'num_nodes': .* GiB is available")
    # the estimate is checked against what the machine has now: 5 nodes fit, unless almost nothing is free
    small = save_npz(tmp_path / "small.npz", src=SRC, dst=DST)
    assert read_graph(small).num_nodes == 5
    monkeypatch.setattr(graph_module, "available_memory", lambda: 100)
    with pytest.raises(InputError, match=r"small\.npz: field 'src': 5 nodes and 6 edges need at least 0\.0 GiB "
                                         r"to partition but 0\.0 GiB is available; .*\(value 4\)"):
        read_graph(small)


# --- files that do not parse -------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["npz", "shchur"])
@pytest.mark.parametrize("content", [b"", b"PK\x03\x04 truncated", b"plain text, not a zip\n"])
def test_unparsable_file_is_one_line_naming_file_and_format(tmp_path, fmt, content):
    path = tmp_path / "bad.npz"
    path.write_bytes(content)
    with pytest.raises(InputError) as caught:
        read_graph(path, format=fmt)
    message = str(caught.value)
    assert message.startswith(str(path) + ": ") and "\n" not in message
    assert fmt in message


def test_truncated_or_corrupt_npz_is_an_input_error(tmp_path):
    path = save_npz(tmp_path / "g.npz", src=np.arange(50_000), dst=np.arange(50_000)[::-1].copy())
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    for fmt in ("npz", None):
        with pytest.raises(InputError, match=r"g\.npz: "):
            read_graph(path, format=fmt)
    # a damaged member inside an intact zip directory fails only when the array is read
    corrupt = bytearray(data)
    corrupt[len(data) // 3:len(data) // 3 + 64] = b"\xff" * 64
    path.write_bytes(bytes(corrupt))
    with pytest.raises(InputError, match=r"g\.npz: field 'format': cannot be read as npz \(BadZipFile: "
                                         r".*\(value npz\)"):
        read_graph(path)


# --- the real entry point ------------------------------------------------------------------------------

def _limit_address_space():
    # Should a check regress, the partitioner must fail fast here, not take the shared machine's memory.
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


@pytest.mark.parametrize("name, content, extra", [
    ("huge.txt", f"0 1\n{HUGE_ID} 2\n".encode(), []),
    ("empty.npz", b"", ["--format", "npz"]),
    ("empty-shchur.npz", b"", ["--format", "shchur"]),
    ("overlap.npz", None, []),
])
def test_partition_command_refuses_in_one_line(tmp_path, name, content, extra):
    path = tmp_path / name
    if content is None:
        save_npz(path, src=SRC, dst=DST, label=np.zeros(5, np.int64), **masks([0, 1, 2], [2], [4]))
    else:
        path.write_bytes(content)
    out = tmp_path / "parts"
    result = subprocess.run([sys.executable, "-m", "hpcgnn.partition", str(path), "--parts", "2", "--out", str(out),
                             *extra], capture_output=True, text=True, timeout=300, preexec_fn=_limit_address_space,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(f"hpcgnn partition: error: {path}: ")
    assert sorted(os.listdir(tmp_path)) == [name]  # no output directory, no temporary sibling
