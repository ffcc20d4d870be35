import json
import os

import h5py
import numpy as np
import pytest

from hpcgnn import partition as partition_cmd
from hpcgnn.cli import inspect as inspect_command
from hpcgnn.format import ondisk
from hpcgnn.prep import inspection
from hpcgnn.prep.partition import partition_graph
from hpcgnn.prep.read.npz import write_npz
from hpcgnn.prep.transform import symmetrize
from hpcgnn.testing.graphs import clustered_graph


def load_parts(directory):
    meta = ondisk.read_meta(directory)
    return meta, [ondisk.read_part(directory, meta, p) for p in range(meta["num_parts"])]


def reconstruct(directory):
    """Rebuild (orig src, orig dst, eid) and node fields in input ids from the part files."""
    meta, parts = load_parts(directory)
    orig_of_new = np.concatenate([p["orig_id"] for p in parts])
    src, dst, eid, weight = [], [], [], []
    for p, arrays in enumerate(parts):
        start = meta["node_starts"][p]
        owned_new = start + np.repeat(np.arange(arrays["indptr"].shape[0] - 1), np.diff(arrays["indptr"]))
        src.append(orig_of_new[arrays["indices"].astype(np.int64)])
        dst.append(orig_of_new[owned_new])
        eid.append(arrays["eid"].astype(np.int64))
        weight.append(arrays.get("edge_weight"))
    fields = {k: np.empty((meta["num_nodes"], *v["shape"]), dtype=v["dtype"]) for k, v in meta["node_fields"].items()}
    for arrays in parts:
        for k in fields:
            fields[k][arrays["orig_id"]] = arrays[k]
    return meta, np.concatenate(src), np.concatenate(dst), np.concatenate(eid), np.concatenate(weight), fields


@pytest.mark.parametrize("method", ["metis", "random"])
@pytest.mark.parametrize("num_parts", [1, 2, 3])
def test_partition_invariants_and_round_trip(tmp_path, method, num_parts):
    graph = clustered_graph()
    meta = partition_graph(graph, tmp_path / "ds", num_parts, method)
    assert meta["num_nodes"] == graph.num_nodes and meta["num_edges"] == graph.num_edges
    starts = meta["node_starts"]
    assert starts[0] == 0 and starts[-1] == graph.num_nodes and all(np.diff(starts) > 0)
    meta2, src, dst, eid, weight, fields = reconstruct(tmp_path / "ds")
    # each node in exactly one part: orig ids over all parts are a permutation
    orig = np.concatenate([p["orig_id"] for p in load_parts(tmp_path / "ds")[1]])
    assert np.array_equal(np.sort(orig), np.arange(graph.num_nodes))
    # every edge preserved exactly once, with its fields
    assert np.array_equal(np.sort(eid), np.arange(graph.num_edges))
    order = np.argsort(eid)
    assert np.array_equal(src[order], graph.src) and np.array_equal(dst[order], graph.dst)
    assert np.array_equal(weight[order], graph.edata["weight"])
    for k, v in graph.ndata.items():
        assert np.array_equal(fields[k], v), k
    assert inspection.verify(tmp_path / "ds", meta2) == []


def test_metis_cut_well_below_random_and_balanced(tmp_path):
    graph = symmetrize(clustered_graph(num_nodes=2000, avg_degree=10))
    metis = partition_graph(graph, tmp_path / "m", 4, "metis")["partitioner"]
    rand = partition_graph(graph, tmp_path / "r", 4, "random")["partitioner"]
    assert rand["edge_cut_fraction"] > 0.6
    assert metis["edge_cut_fraction"] < 0.5 * rand["edge_cut_fraction"]
    assert metis["constraints"] == ["nodes", "in_degree", "train_mask", "val_mask", "test_mask"]
    for key in ("num_nodes", "num_edges", "train"):
        assert metis["imbalance"][key] <= 1.1, (key, metis["imbalance"])


def test_output_is_deterministic(tmp_path):
    graph = clustered_graph()
    a = partition_graph(graph, tmp_path / "a", 3, "metis")
    b = partition_graph(graph, tmp_path / "b", 3, "metis")
    assert [p["sha256"] for p in a["parts"]] == [p["sha256"] for p in b["parts"]]


@pytest.mark.mpi(sizes=(2, 4))
def test_parallel_write_matches_serial(nranks, comm, shared_tmp):
    graph = clustered_graph(num_nodes=900)
    serial = os.path.join(shared_tmp, "serial")
    if comm.rank == 0:
        partition_graph(graph, serial, 4, "metis")
    comm.barrier()
    parallel = os.path.join(shared_tmp, "parallel")
    meta = partition_graph(graph if comm.rank == 0 else None, parallel, 4, "metis", comm=comm)
    if comm.rank == 0:
        assert meta["partitioner"]["writers"] == nranks
        for p in range(4):
            name = ondisk.part_file_name(p)
            with open(os.path.join(serial, name), "rb") as a, open(os.path.join(parallel, name), "rb") as b:
                assert a.read() == b.read(), name
    else:
        assert meta is None


def write_input(tmp_path):
    path = tmp_path / "g.npz"
    write_npz(clustered_graph(), path)
    return path


def test_cli_partition_then_inspect(tmp_path, capsys):
    path = write_input(tmp_path)
    out = tmp_path / "parts"
    assert partition_cmd.main([str(path), "--parts", "2", "--out", str(out), "--symmetrize"]) == 0
    assert "edge cut" in capsys.readouterr().out
    meta = ondisk.read_meta(out)
    assert meta["source"]["symmetrize"] is True and meta["num_parts"] == 2
    assert inspect_command.main([str(out), "--verify"]) == 0
    text = capsys.readouterr().out
    assert "verify: OK" in text and "halo" in text
    assert inspect_command.main([str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["num_parts"] == 2


def test_inspect_verify_detects_corruption(tmp_path, capsys):
    out = tmp_path / "parts"
    partition_graph(clustered_graph(), out, 2, "random")
    with h5py.File(out / ondisk.part_file_name(1), "r+") as h5:
        h5["indices"][0] = 10**6
    assert inspect_command.main([str(out), "--verify"]) == 1
    text = capsys.readouterr().out
    assert "FAILED" in text and "sha256" in text and "indices" in text


def test_cli_refuses_existing_output_and_bad_parts(tmp_path, capsys):
    path = write_input(tmp_path)
    out = tmp_path / "parts"
    out.mkdir()
    with pytest.raises(SystemExit) as exc:
        partition_cmd.main([str(path), "--parts", "2", "--out", str(out)])
    assert exc.value.code == 2
    assert "output exists" in capsys.readouterr().err
    for bad in ("0", "100000"):
        with pytest.raises(SystemExit):
            partition_cmd.main([str(path), "--parts", bad, "--out", str(tmp_path / "x")])
        err = capsys.readouterr().err
        assert "--parts" in err and bad in err and err.count("\n") == 1
    assert not (tmp_path / "x").exists()


def test_failed_write_leaves_nothing(tmp_path, monkeypatch):
    graph = clustered_graph()

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(ondisk, "write_meta", broken)
    with pytest.raises(OSError):
        partition_graph(graph, tmp_path / "ds", 2, "random")
    assert not (tmp_path / "ds").exists()
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".ds.tmp")]


def test_sparse_features_are_densified_per_part(tmp_path):
    from scipy.sparse import csr_matrix

    graph = clustered_graph()
    dense = graph.ndata["feat"]
    dense[np.abs(dense) < 1.0] = 0
    graph.ndata["feat"] = csr_matrix(dense)
    partition_graph(graph, tmp_path / "ds", 2, "metis")
    *_, fields = reconstruct(tmp_path / "ds")
    assert np.array_equal(fields["feat"], dense)
