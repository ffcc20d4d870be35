"""Corrupt part data and untrusted meta.json are refused with one line, never trained on."""
import json
import os
import shutil

import h5py
import numpy as np
import pytest

from hpcgnn.format import ondisk
from hpcgnn.graph import DistGraph
from hpcgnn.prep import inspection
from hpcgnn.prep.partition import partition_graph
from hpcgnn.runtime.errors import InputError
from hpcgnn.testing.commands import run_command
from hpcgnn.testing.datasets import corrupt_bytes
from hpcgnn.testing.graphs import clustered_graph


def assert_one_line_exit_2(proc, *words):
    """What a user must see: exit status 2, one line on stderr naming the words, no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    for word in words:
        assert word in proc.stderr, (word, proc.stderr)


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    """A 1-part and a 2-part dataset of one small graph, written once; tests work on copies."""
    root = tmp_path_factory.mktemp("integrity")
    graph = clustered_graph(num_nodes=2000)
    for parts in (1, 2):
        partition_graph(graph, root / f"p{parts}", parts, "metis")
    return root


@pytest.fixture
def copy_of(datasets, tmp_path):
    def make(parts):
        out = tmp_path / f"ds{parts}"
        shutil.copytree(datasets / f"p{parts}", out)
        return out
    return make


def edit_meta(directory, change):
    path = directory / "meta.json"
    meta = json.loads(path.read_text())
    change(meta)
    path.write_text(json.dumps(meta))


# ------------------------------------------------------------------ checksums
def test_every_dataset_is_chunked_with_fletcher32(datasets):
    with h5py.File(datasets / "p2" / ondisk.part_file_name(0), "r") as h5:
        assert len(h5) == 10
        for name, dset in h5.items():
            assert dset.fletcher32 and dset.chunks is not None, name
            assert dset.chunks[0] * dset.dtype.itemsize * int(np.prod(dset.shape[1:])) <= ondisk.CHUNK_BYTES


def test_corrupt_feature_bytes_fail_the_load_naming_file_and_dataset(copy_of):
    ds = copy_of(1)
    part = ds / ondisk.part_file_name(0)
    corrupt_bytes(part)
    meta = ondisk.read_meta(ds)
    with pytest.raises(InputError) as err:
        ondisk.read_part(ds, meta, 0)
    text = str(err.value)
    assert "\n" not in text and str(part) in text and "field 'feat'" in text and "checksum" in text
    # as the user sees it: training refuses to start
    assert_one_line_exit_2(run_command("hpcgnn.train", "--data", str(ds), "--epochs", "1", "--no-progress"),
                           str(part), "'feat'", "fletcher32")


def test_datasets_written_without_checksums_still_load(tmp_path):
    graph = clustered_graph()
    partition_graph(graph, tmp_path / "old", 1, "random", checksums=False)
    with h5py.File(tmp_path / "old" / ondisk.part_file_name(0), "r") as h5:
        assert not any(dset.fletcher32 for dset in h5.values())
    meta = ondisk.read_meta(tmp_path / "old")
    assert inspection.verify(tmp_path / "old", meta) == []
    with DistGraph(tmp_path / "old") as g:
        assert np.array_equal(g.ndata["feat"][g.local_node_ids()].numpy(), graph.ndata["feat"][g.orig_id])


# ------------------------------------------------------------- meta.json
def set_part_file(name):
    def change(meta):
        meta["parts"][0]["file"] = name
    return change


def set_starts(key, values):
    def change(meta):
        meta[key] = values
    return change


def _shift_boundary(meta):
    """Move node 0's part boundary by one: a consistent meta.json the part files contradict."""
    starts = meta["node_starts"]
    starts[1] -= 1
    meta["parts"][0]["num_nodes"] -= 1
    meta["parts"][1]["num_nodes"] += 1


def _feat_shape(meta):
    meta["node_fields"]["feat"]["shape"] = [9]


def _feat_dtype(meta):
    meta["node_fields"]["feat"]["dtype"] = "float64"


META_CASES = {
    "dotdot": (2, set_part_file("../../../../etc/passwd"), "meta.json", "parts[0].file", "../../../../etc/passwd"),
    "absolute": (2, set_part_file("/etc/passwd"), "meta.json", "parts[0].file", "/etc/passwd"),
    "nonmonotone": (2, lambda m: m["node_starts"].__setitem__(1, m["num_nodes"] + 5), "meta.json",
                    "node_starts", "after"),
    "float_starts": (2, lambda m: m["edge_starts"].__setitem__(1, 0.5), "meta.json", "edge_starts", "0.5"),
    "short_starts": (2, set_starts("node_starts", [0, 2000]), "meta.json", "node_starts", "[0, 2000]"),
    "disagree": (2, _shift_boundary, "part-00000.h5", "indptr", "value"),
    "shape": (1, _feat_shape, "part-00000.h5", "feat", "[2000, 8]"),
    "dtype": (1, _feat_dtype, "part-00000.h5", "feat", "float32"),
}


@pytest.mark.parametrize("case", list(META_CASES))
def test_bad_meta_is_one_line_error_naming_file_field_value(copy_of, case):
    parts, change, where, field, value = META_CASES[case]
    ds = copy_of(parts)
    edit_meta(ds, change)
    with pytest.raises(InputError) as err:
        if where == "meta.json":
            ondisk.read_meta(ds)
        else:
            meta = ondisk.read_meta(ds)
            for part_id in range(parts):
                ondisk.read_part(ds, meta, part_id)
    text = str(err.value)
    assert "\n" not in text and where in err.value.path and field in text and value in text, text


@pytest.mark.parametrize("case", ["dotdot"])
def test_train_refuses_bad_meta_in_one_line(copy_of, case):
    parts, change, where, field, value = META_CASES[case]
    ds = copy_of(parts)
    edit_meta(ds, change)
    assert_one_line_exit_2(run_command("hpcgnn.train", "--data", str(ds), "--epochs", "1", "--no-progress"),
                           where, field, value)


@pytest.mark.parametrize("case", ["dotdot", "absolute"])
def test_inspect_refuses_part_files_outside_the_dataset(copy_of, case):
    parts, change, where, field, value = META_CASES[case]
    ds = copy_of(parts)
    edit_meta(ds, change)
    proc = run_command("hpcgnn.inspect", str(ds), "--verify")
    assert_one_line_exit_2(proc, where, field, value)
    assert "verify" not in proc.stdout  # nothing was hashed or opened


def test_symlinked_part_file_must_stay_inside_the_dataset(copy_of, tmp_path):
    ds = copy_of(1)
    outside = tmp_path / "elsewhere.h5"
    os.replace(ds / ondisk.part_file_name(0), outside)
    os.symlink(outside, ds / ondisk.part_file_name(0))
    with pytest.raises(InputError, match=r"meta.json: field 'parts\[0\].file': resolves outside the dataset"):
        ondisk.read_meta(ds)
    # a link that stays inside the directory is fine
    os.unlink(ds / ondisk.part_file_name(0))
    os.replace(outside, ds / "real.h5")
    os.symlink("real.h5", ds / ondisk.part_file_name(0))
    meta = ondisk.read_meta(ds)
    assert ondisk.read_part(ds, meta, 0, ["label"])["label"].shape == (2000,)


# ------------------------------------------------------------ inspect --verify
def test_inspect_verify_reports_a_truncated_part_and_checks_the_rest(copy_of):
    ds = copy_of(2)
    part = ds / ondisk.part_file_name(1)
    size = part.stat().st_size
    with open(part, "r+b") as fh:
        fh.truncate(size // 2)
    proc = run_command("hpcgnn.inspect", str(ds), "--verify")
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    assert "verify: FAILED" in proc.stdout
    report = proc.stdout.split("verify: FAILED", 1)[1]
    assert f"{part}: cannot be opened as HDF5" in report and "sha256" in report
    assert ondisk.part_file_name(0) not in report  # the intact part passed


def test_inspect_verify_names_the_corrupt_dataset(copy_of):
    ds = copy_of(2)
    corrupt_bytes(ds / ondisk.part_file_name(0))
    meta = ondisk.read_meta(ds)
    problems = inspection.verify(ds, meta)
    assert any("sha256" in p for p in problems)
    assert any(f"{ds / ondisk.part_file_name(0)}: field 'feat': corrupt data" in p for p in problems), problems


# ------------------------------------------------------------ inspect --verify: the stored edges
def rewrite_part(directory, part_id, change):
    """Rewrite part ``part_id`` with ``change(arrays)`` applied, through the writer (valid fletcher32
    checksums) and with meta.json's size and SHA-256 updated: a file every structural check accepts."""
    path = directory / ondisk.part_file_name(part_id)
    with h5py.File(path, "r") as h5:
        arrays = {name: dset[()] for name, dset in h5.items()}
        attrs = dict(h5.attrs)
    change(arrays)
    ondisk.write_part(path, arrays, attrs)

    def update(meta):
        meta["parts"][part_id].update(size=path.stat().st_size, sha256=ondisk.sha256_file(path))
    edit_meta(directory, update)


def test_verify_refuses_rewired_edges_that_every_structural_check_accepts(copy_of):
    ds = copy_of(2)
    meta = ondisk.read_meta(ds)
    assert "edge_digest" in meta and inspection.verify(ds, meta) == []
    # every edge of part 0 gets the next edge's source: indptr, counts, ranges and checksums all intact
    rewrite_part(ds, 0, lambda arrays: arrays.__setitem__("indices", np.roll(arrays["indices"], 1)))
    problems = inspection.verify(ds, ondisk.read_meta(ds))
    assert len(problems) == 1 and "\n" not in problems[0], problems
    assert f"{ds / 'meta.json'}: field 'edge_digest': the part files do not hold the edges" in problems[0]
    proc = run_command("hpcgnn.inspect", str(ds), "--verify")
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    assert proc.stdout.split("verify: FAILED\n", 1)[1].strip() == problems[0]


def test_verify_skips_the_edge_check_of_a_dataset_written_without_a_digest(copy_of):
    ds = copy_of(1)
    edit_meta(ds, lambda meta: meta.pop("edge_digest"))
    notes = []
    assert inspection.verify(ds, ondisk.read_meta(ds), notes) == []
    assert notes == [inspection.EDGE_CHECK_SKIPPED]
    proc = run_command("hpcgnn.inspect", str(ds), "--verify")
    assert proc.returncode == 0 and "verify: OK" in proc.stdout
    assert f"verify: note: {inspection.EDGE_CHECK_SKIPPED}" in proc.stdout


@pytest.mark.parametrize("entry,why", [("0x0", "must be an object"), ({"scheme": "md5", "count": 1, "sum": "0x0"},
                                                                       "unknown scheme"),
                                       ({"count": -1}, "count"), ({"sum": "12"}, "sum")])
def test_verify_names_a_malformed_edge_digest(copy_of, entry, why):
    ds = copy_of(1)

    def change(meta):
        meta["edge_digest"] = dict(meta["edge_digest"], **entry) if isinstance(entry, dict) else entry
    edit_meta(ds, change)
    problems = inspection.verify(ds, ondisk.read_meta(ds))
    assert len(problems) == 1 and f"{ds / 'meta.json'}: field 'edge_digest': " in problems[0] and why in problems[0]
