"""Hostile datasets: part files that reach outside the dataset through HDF5 itself, part files
whose checksums pass but whose contents break the format, and meta.json files with absurd
numbers or nesting. Each is refused with one line naming the file and the object or field,
never read through, never a traceback."""
import json
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pytest

from hpcgnn.format import ondisk
from hpcgnn.graph import DistGraph
from hpcgnn.prep import inspection
from hpcgnn.prep.edge_split import hold_out_edges
from hpcgnn.prep.partition import partition_graph
from hpcgnn.runtime.errors import InputError
from hpcgnn.testing.datasets import EDGE_SPLIT, link_graph
from hpcgnn.testing.graphs import clustered_graph

NUM_NODES = 300
PART = ondisk.part_file_name(0)


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    """A 1-part dataset of a small graph and a 1- and 2-part link-prediction one, written once;
    tests work on copies."""
    root = tmp_path_factory.mktemp("hostile")
    partition_graph(clustered_graph(num_nodes=NUM_NODES), root / "plain", 1, "random")
    linked = hold_out_edges(link_graph(num_nodes=NUM_NODES), EDGE_SPLIT, 5, seed=0, negatives_kind="uniform")
    partition_graph(linked, root / "link", 1, "random")
    partition_graph(linked, root / "link2", 2, "random")
    return root


@pytest.fixture
def dataset(datasets, tmp_path):
    """A fresh copy of the plain dataset, in a directory of its own beside an ``outside`` one."""
    shutil.copytree(datasets / "plain", tmp_path / "ds")
    (tmp_path / "outside").mkdir()
    return tmp_path / "ds"


def run(module, *args):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, env=env,
                          timeout=300)


def assert_one_line_exit_2(proc, *words):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    for word in words:
        assert word in proc.stderr, (word, proc.stderr)


def refusal(ds) -> str:
    """The one line that loading ``ds`` fails with (world of one: the dataset has one part)."""
    with pytest.raises(InputError) as err:
        DistGraph(ds).close()
    text = str(err.value)
    assert "\n" not in text, text
    return text


def edit_meta(ds, change):
    meta = json.loads((ds / "meta.json").read_text())
    change(meta)
    (ds / "meta.json").write_text(json.dumps(meta))


def replace(ds, name, make):
    """Replace dataset ``name`` of the part file by what ``make(h5, name, data)`` creates, ``data``
    being the old values."""
    with h5py.File(ds / PART, "r+") as h5:
        data = h5[name][()]
        del h5[name]
        make(h5, name, data)


def rewrite(ds, name, change):
    """Give dataset ``name`` the values ``change(old values)`` returns, stored as the writer stores
    them (fletcher32 chunks): its checksums pass."""
    def make(h5, key, data):
        data = np.asarray(change(data.copy()))
        h5.create_dataset(key, data=data, **ondisk.chunk_layout(data.shape, data.dtype))
    replace(ds, name, make)


# ------------------------------------------------ part files that reach outside the dataset
def outside_file(ds, data):
    path = ds.parent / "outside" / "secret.h5"
    with h5py.File(path, "w") as h5:
        h5["secret"] = data
    return path


def external_link(ds, h5, name, data):
    h5[name] = h5py.ExternalLink(str(outside_file(ds, data)), "secret")


def external_storage(ds, h5, name, data):
    raw = ds.parent / "outside" / "raw.bin"
    raw.write_bytes(data.tobytes())
    h5.create_dataset(name, shape=data.shape, dtype=data.dtype, external=[(str(raw), 0, data.nbytes)])


def virtual(ds, h5, name, data):
    layout = h5py.VirtualLayout(shape=data.shape, dtype=data.dtype)
    layout[:] = h5py.VirtualSource(str(outside_file(ds, data)), "secret", shape=data.shape)
    h5.create_virtual_dataset(name, layout)


def soft_link(ds, h5, name, data):
    h5["stash"] = data
    h5[name] = h5py.SoftLink("/stash")


REACHING_OUT = {  # dataset replaced: (how, what the line says)
    "external_link": ("feat", external_link, "is an external link"),
    "external_storage": ("label", external_storage, "keeps its data in an external file"),
    "virtual": ("feat", virtual, "is a virtual dataset"),
    "soft_link": ("indptr", soft_link, "is a soft link"),
}


@pytest.mark.parametrize("case", list(REACHING_OUT))
def test_part_file_reaching_outside_is_refused_before_any_read(dataset, case):
    name, make, words = REACHING_OUT[case]
    replace(dataset, name, lambda h5, key, data: make(dataset, h5, key, data))
    with h5py.File(dataset / PART, "r") as h5:  # the crafted file reads fine through HDF5 itself
        assert h5[name][()].shape[0] in (NUM_NODES, NUM_NODES + 1)
    assert f"{dataset / PART}: field '{name}': {words}" in refusal(dataset)


def test_train_refuses_an_external_link_in_one_line(dataset):
    replace(dataset, "feat", lambda h5, key, data: external_link(dataset, h5, key, data))
    proc = run("hpcgnn.train", "--data", str(dataset), "--epochs", "1", "--no-progress")
    assert_one_line_exit_2(proc, str(dataset / PART), "'feat'", "is an external link")


def test_inspect_verify_reports_a_virtual_dataset(dataset):
    replace(dataset, "feat", lambda h5, key, data: virtual(dataset, h5, key, data))
    proc = run("hpcgnn.inspect", str(dataset), "--verify")
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    assert f"{dataset / PART}: field 'feat': is a virtual dataset" in proc.stdout.split("verify: FAILED")[1]


# ------------------------------------------ objects, types and layouts the format does not write
def extra_dataset(h5, name, data):
    h5.create_dataset(name, data=data, **ondisk.chunk_layout(data.shape, data.dtype))
    h5["notes"] = np.arange(3)


def group_instead(h5, name, data):
    h5.create_group(name)


def with_group(h5, name, data):
    h5.create_dataset(name, data=data, **ondisk.chunk_layout(data.shape, data.dtype))
    h5.create_group("extra_group")


def gzip(h5, name, data):
    h5.create_dataset(name, data=data, compression="gzip", **ondisk.chunk_layout(data.shape, data.dtype))


def small_chunks(h5, name, data):
    h5.create_dataset(name, data=data, chunks=(1, *data.shape[1:]), fletcher32=True)


def compact(h5, name, data):
    plist = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    plist.set_layout(h5py.h5d.COMPACT)
    dset = h5py.h5d.create(h5.id, name.encode(), h5py.h5t.py_create(data.dtype), h5py.h5s.create_simple(data.shape),
                           dcpl=plist)
    dset.write(h5py.h5s.ALL, h5py.h5s.ALL, data)


def unallocated(h5, name, data):  # the shape meta.json asks for, no bytes behind it
    h5.create_dataset(name, shape=data.shape, dtype=data.dtype, **ondisk.chunk_layout(data.shape, data.dtype))


def short_chunks(h5, name, data):  # every chunk there, each claiming 4 bytes
    dset = h5.create_dataset(name, shape=data.shape, dtype=data.dtype, **ondisk.chunk_layout(data.shape, data.dtype))
    for row in range(0, data.shape[0], dset.chunks[0]):
        dset.id.write_direct_chunk((row, *[0] * (data.ndim - 1)), b"\0" * 4)


def unallocated_contiguous(h5, name, data):
    h5.create_dataset(name, shape=data.shape, dtype=data.dtype)


def resizable(h5, name, data):
    h5.create_dataset(name, data=data, maxshape=(None, *data.shape[1:]), **ondisk.chunk_layout(data.shape, data.dtype))


def enum_type(h5, name, data):  # reads as int64, stored as an enumeration
    h5.create_dataset(name, data=data, dtype=h5py.enum_dtype({"a": 0, "b": 1, "c": 2, "d": 3}, basetype="i8"))


def big_endian(h5, name, data):
    h5.create_dataset(name, data=data.astype(">f4"))


def with_attribute(h5, name, data):
    h5.create_dataset(name, data=data, **ondisk.chunk_layout(data.shape, data.dtype))
    h5[name].attrs["note"] = 1


def attribute_array(h5, name, data):
    h5.create_dataset(name, data=data, **ondisk.chunk_layout(data.shape, data.dtype))
    h5.attrs["part_id"] = np.zeros(1000, np.int64)


def root_attribute(h5, name, data):
    h5.create_dataset(name, data=data, **ondisk.chunk_layout(data.shape, data.dtype))
    h5.attrs["plugin_path"] = "/tmp"


NOT_THE_FORMAT = {
    "extra_dataset": ("feat", extra_dataset, "notes", "is not a dataset of the format"),
    "group": ("feat", with_group, "extra_group", "is not a dataset of the format"),
    "group_named_as_a_dataset": ("feat", group_instead, "feat", "must be a dataset (value Group)"),
    "gzip": ("feat", gzip, "feat", "has filters other than the fletcher32 checksum"),
    "small_chunks": ("feat", small_chunks, "feat", "is chunked other than the format's"),
    "compact": ("label", compact, "label", "must be stored contiguous or in the format's chunks"),
    "unallocated": ("feat", unallocated, "feat", "stores less than its shape holds (0 of 1 chunks)"),
    "short_chunks": ("feat", short_chunks, "feat",
                     "stores less than its shape holds (1 of 1 chunks) (value 4 bytes for 9600)"),
    "unallocated_contiguous": ("label", unallocated_contiguous, "label", "has data missing (value 0 bytes for 2400)"),
    "resizable": ("feat", resizable, "feat", "must be an array of fixed shape"),
    "enum": ("label", enum_type, "label", "is stored in an HDF5 type the format does not write"),
    "big_endian": ("feat", big_endian, "feat", "is stored in an HDF5 type the format does not write"),
    "dataset_attribute": ("feat", with_attribute, "feat.note", "is an attribute the format does not define"),
    "root_attribute": ("feat", root_attribute, "plugin_path", "is an attribute the format does not define"),
    "attribute_array": ("feat", attribute_array, "part_id", "attribute must be a single small value"),
}


@pytest.mark.parametrize("case", list(NOT_THE_FORMAT))
def test_objects_the_format_does_not_write_are_refused(dataset, case):
    name, make, where, words = NOT_THE_FORMAT[case]
    replace(dataset, name, make)
    assert f"{dataset / PART}: field '{where}': {words}" in refusal(dataset)


def test_storage_the_file_cannot_hold_is_refused(dataset, monkeypatch):
    """Chunks that claim more bytes than the file has (overlapping ones, which the HDF5 library
    cannot be asked to write) are refused; the file is shown as shorter than it is instead."""
    real = os.path.getsize(dataset / PART)
    monkeypatch.setattr(ondisk.os.path, "getsize", lambda path: real // 2)
    assert f"{dataset / PART}: its datasets claim more stored bytes than the file's {real // 2}" in refusal(dataset)


def test_what_the_writers_make_passes_the_walk(datasets, tmp_path):
    """The checker accepts every layout the writers produce: checksummed, without checksums
    (contiguous), bfloat16 features, edge sets with uniform negative pairs (``link_*_neg_src``)."""
    graph = clustered_graph(num_nodes=NUM_NODES)
    partition_graph(graph, tmp_path / "plain", 1, "random", checksums=False)
    partition_graph(graph, tmp_path / "bf16", 1, "random", feat_dtype="bfloat16")
    for ds in (datasets / "plain", datasets / "link", datasets / "link2", tmp_path / "plain", tmp_path / "bf16"):
        meta = ondisk.read_meta(ds)
        for part_id in range(meta["num_parts"]):
            with ondisk.open_part(ds, meta, part_id) as part:
                assert sorted(part.h5) == sorted(part.expected())
        assert inspection.verify(ds, meta) == []
    assert "link_val_neg_src" in ondisk.read_part(datasets / "link", ondisk.read_meta(datasets / "link"), 0)


def test_the_writer_refuses_a_dtype_the_format_cannot_store(tmp_path):
    with pytest.raises(InputError, match=r"field 'feat': a part file cannot store this dtype .*complex64"):
        ondisk.write_part(tmp_path / PART, {"feat": np.zeros((2, 2), np.complex64)}, {})
    assert not list(tmp_path.iterdir())
    big_endian_feat = np.arange(4, dtype=">f4").reshape(2, 2)
    ondisk.write_part(tmp_path / PART, {"feat": big_endian_feat}, {})  # stored in native order
    with h5py.File(tmp_path / PART, "r") as h5:
        assert h5["feat"].dtype == np.float32 and np.array_equal(h5["feat"][()], big_endian_feat)


# --------------------------------------- checksums pass, contents do not (checked on every load)
def decreasing(indptr):
    indptr[5], indptr[6] = indptr[6] + 1, indptr[5]
    return indptr


def overflowing(indptr):
    indptr[5] = 2**62
    return indptr


def shifted(indptr):
    return indptr + 1  # starts at 1, ends one past the edges


def unlabelled_in_train(ds):
    with h5py.File(ds / PART, "r") as h5:
        return int(np.flatnonzero(h5["train_mask"][()])[0])


BAD_VALUES = {  # dataset: (change, words of the line)
    "indptr_decreasing": ("indptr", decreasing, "must not decrease, but entry 6 is below entry 5"),
    "indptr_overflowing": ("indptr", overflowing, "must not decrease"),
    "indptr_shifted": ("indptr", shifted, "must run from 0 to the part's"),
    "indices_beyond": ("indices", lambda a: np.where(np.arange(a.size) == 7, NUM_NODES + 4, a).astype(a.dtype),
                       f"node id outside [0, {NUM_NODES}) (value {NUM_NODES + 4})"),
    "indices_negative": ("indices", lambda a: np.where(np.arange(a.size) == 7, -3, a).astype(a.dtype),
                         f"node id outside [0, {NUM_NODES}) (value -3)"),
    "label_huge": ("label", lambda a: np.where(np.arange(a.size) == 0, 2_000_000_000, a),
                   "labels must be in [0, 1048576), or -1 for an unlabelled node"),
    "label_negative": ("label", lambda a: np.where(np.arange(a.size) == 0, -5, a), "(value -5)"),
}


@pytest.mark.parametrize("case", list(BAD_VALUES))
def test_values_that_break_the_format_are_refused_at_load(dataset, case):
    name, change, words = BAD_VALUES[case]
    rewrite(dataset, name, change)
    text = refusal(dataset)
    assert f"{dataset / PART}: field '{name}': " in text and words in text, text


def test_an_unlabelled_node_in_a_mask_is_refused(dataset):
    node = unlabelled_in_train(dataset)
    rewrite(dataset, "label", lambda a: np.where(np.arange(a.size) == node, -1, a))
    assert f"field 'label': node {node} is in train_mask but unlabelled" in refusal(dataset)


def test_train_refuses_a_label_that_would_allocate_billions_of_outputs(dataset):
    rewrite(dataset, "label", BAD_VALUES["label_huge"][1])
    proc = run("hpcgnn.train", "--data", str(dataset), "--epochs", "1", "--no-progress")
    assert_one_line_exit_2(proc, str(dataset / PART), "'label'", "(value 2000000000)")


def test_inspect_verify_reports_what_loading_refuses(dataset):
    rewrite(dataset, "indices", BAD_VALUES["indices_negative"][1])
    problems = inspection.verify(dataset, ondisk.read_meta(dataset))
    assert any(f"{dataset / PART}: field 'indices': node id outside" in p for p in problems), problems


def test_a_multi_label_value_other_than_0_or_1_is_refused(dataset):
    rewrite(dataset, "label", lambda a: np.where(np.arange(3 * a.size).reshape(-1, 3) == 4, 7, 0))
    edit_meta(dataset, set_field(["node_fields", "label", "shape"], [3]))
    assert "field 'label': labels must be in [0, 2), or -1 for an unlabelled node (value 7)" in refusal(dataset)


def test_edge_set_ids_are_checked_at_load(datasets, tmp_path):
    ds = tmp_path / "link"
    shutil.copytree(datasets / "link", ds)
    rewrite(ds, "link_test_dst", lambda a: np.where(np.arange(a.size) == 0, NUM_NODES, a))
    assert f"field 'link_test_dst': node id outside [0, {NUM_NODES}) (value {NUM_NODES})" in refusal(ds)


def test_an_edge_set_destination_of_another_part_is_refused(datasets, tmp_path):
    ds = tmp_path / "link2"
    shutil.copytree(datasets / "link2", ds)
    meta = ondisk.read_meta(ds)
    theirs = meta["node_starts"][1]  # a node of part 1, in part 0's file
    with h5py.File(ds / PART, "r+") as h5:
        h5["link_val_dst"][0] = theirs
    with ondisk.open_part(ds, meta, 0) as part:
        found = part.value_problems({name: part.read(name) for name in ondisk.link_datasets(meta)})
    assert [str(e) for e in found] == [f"{ds / PART}: field 'link_val_dst': destination outside this part's nodes "
                                       f"[0, {theirs}) (value {theirs})"]


def test_a_dtype_meta_json_and_the_file_disagree_on(dataset):
    rewrite(dataset, "feat", lambda a: a.astype(np.float64))
    assert f"{dataset / PART}: field 'feat': dtype differs from meta.json's float32 (value float64)" in refusal(dataset)


# ------------------------------------------------------------------------------ meta.json
def set_field(path, value):
    def change(meta):
        *keys, last = path
        target = meta
        for key in keys:
            target = target[key]
        target[last] = value
    return change


def zero_width_feat(meta):
    meta["node_fields"]["feat"]["shape"] = [0]


BAD_META = {  # change: (field, value as the line shows it)
    "num_nodes_huge": (set_field(["num_nodes"], 2**70), "num_nodes", str(2**70)),
    "num_nodes_negative": (set_field(["num_nodes"], -1), "num_nodes", "-1"),
    "num_parts_float": (set_field(["num_parts"], 1.5), "num_parts", "1.5"),
    "num_parts_string": (set_field(["num_parts"], "1"), "num_parts", "1"),
    "num_parts_huge": (set_field(["num_parts"], 10**9), "node_starts", "[0,"),
    "feat_width_0": (zero_width_feat, "node_fields.feat.shape", "[0]"),
    "feat_float128": (set_field(["node_fields", "feat", "dtype"], "float128"), "node_fields.feat.dtype", "float128"),
    "feat_big_endian": (set_field(["node_fields", "feat", "dtype"], ">f4"), "node_fields.feat.dtype", ">f4"),
    "label_float": (set_field(["node_fields", "label", "dtype"], "float32"), "node_fields.label",
                    "labels must be integers"),
    "mask_int": (set_field(["node_fields", "train_mask", "dtype"], "int64"), "node_fields.train_mask",
                 "masks must be boolean"),
    "source_list": (set_field(["source"], [1, 2]), "source", "[1, 2]"),
    "label_columns_huge": (set_field(["node_fields", "label", "shape"], [ondisk.LABEL_LIMIT + 1]),
                           "node_fields.label.shape", "at most 1048576 columns"),
}


@pytest.mark.parametrize("case", list(BAD_META))
def test_absurd_meta_json_is_one_line_naming_field_and_value(dataset, case):
    change, field, value = BAD_META[case]
    edit_meta(dataset, change)
    with pytest.raises(InputError) as err:
        ondisk.read_meta(dataset)
    text = str(err.value)
    assert "\n" not in text and text.startswith(f"{dataset / 'meta.json'}: field '{field}'") and value in text, text


def test_deeply_nested_meta_json_is_refused_before_parsing(dataset):
    text = (dataset / "meta.json").read_text()
    (dataset / "meta.json").write_text(text[:-2] + ', "x": ' + "[" * 200_000 + "]" * 200_000 + "}\n")
    proc = run("hpcgnn.inspect", str(dataset))
    assert_one_line_exit_2(proc, str(dataset / "meta.json"), f"nested deeper than {ondisk.META_MAX_DEPTH} levels")
    # brackets inside strings are text, not nesting
    (dataset / "meta.json").write_text(text[:-2] + ', "x": "' + "[" * 1000 + '"}\n')
    assert ondisk.read_meta(dataset)["x"] == "[" * 1000


def test_oversized_meta_json_is_refused_before_parsing(dataset, monkeypatch):
    size = (dataset / "meta.json").stat().st_size
    monkeypatch.setattr(ondisk, "META_MAX_BYTES", size - 1)
    with pytest.raises(InputError, match=rf"meta.json: larger than {size - 1} bytes.*\(value {size}\)"):
        ondisk.read_meta(dataset)


def test_counts_meta_json_invents_are_never_allocated(dataset):
    """A self-consistent meta.json claiming 2**40 nodes: the part file disagrees, and neither the
    load nor verify allocates an array of that length."""
    huge = 2**40

    def change(meta):
        extra = huge - meta["num_nodes"]
        meta["num_nodes"] = huge
        meta["node_starts"][-1] = huge
        meta["parts"][0]["num_nodes"] += extra
    edit_meta(dataset, change)
    assert f"{dataset / PART}: field 'indptr': shape differs from meta.json's [{huge + 1}]" in refusal(dataset)
    problems = inspection.verify(dataset, ondisk.read_meta(dataset))
    assert any("shape differs" in p for p in problems), problems
