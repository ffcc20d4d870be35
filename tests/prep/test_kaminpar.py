"""``--method kaminpar``: the ParHIP file handed to KaMinPar, its partitions against METIS's, and
what the method refuses."""
import os
import sys

import numpy as np
import pytest

from hpcgnn import _csr
from hpcgnn import partition as partition_cmd
from hpcgnn._metis import part_graph_kway
from hpcgnn.format.ondisk import read_meta
from hpcgnn.prep.generate import rmat_graph
from hpcgnn.prep.inspection import verify
from hpcgnn.prep.kaminpar import part_graph_kaminpar, write_parhip
from hpcgnn.prep.partition import build_csc
from hpcgnn.prep.read import write_npz
from hpcgnn.runtime.errors import InputError


def adjacency(graph):
    indptr, indices, _ = build_csc(graph)
    return _csr.symmetric_adjacency(indptr, indices, graph.num_nodes)


def cut(xadj, adjncy, parts):
    rows = np.repeat(np.arange(xadj.shape[0] - 1), np.diff(xadj))
    return int((parts[rows] != parts[adjncy]).sum()) // 2


def test_the_parhip_file_is_the_binary_layout(tmp_path):
    xadj, adjncy = np.array([0, 2, 3, 4]), np.array([1, 2, 0, 0])
    write_parhip(tmp_path / "g", xadj, adjncy, np.array([5, 6, 7]))
    words = np.fromfile(tmp_path / "g", dtype="<u8")
    header_and_offsets = 3 + 4
    assert list(words[:3]) == [1, 3, 4]  # version 1: vertex weights, no edge weights
    # offsets are byte positions of each vertex's first neighbour in the file
    assert list(words[3:7]) == [(header_and_offsets + x) * 8 for x in (0, 2, 3, 4)]
    assert list(words[7:11]) == [1, 2, 0, 0] and list(words[11:]) == [5, 6, 7]
    write_parhip(tmp_path / "u", xadj, adjncy)
    assert np.fromfile(tmp_path / "u", dtype="<u8")[0] == 3 and os.path.getsize(tmp_path / "u") == 11 * 8


def test_kaminpar_cuts_like_metis_within_the_balance(tmp_path):
    graph = rmat_graph(6000, 60000, feat_dim=2, seed=2)
    xadj, adjncy = adjacency(graph)
    metis = part_graph_kway(xadj, adjncy, 4, np.ones((graph.num_nodes, 1), np.int64), 0)
    parts = part_graph_kaminpar(xadj, adjncy, 4, seed=0, threads=1, scratch_parent=tmp_path)
    assert cut(xadj, adjncy, parts) <= 1.10 * cut(xadj, adjncy, metis)
    assert np.bincount(parts, minlength=4).max() <= 1.03 * graph.num_nodes / 4 + 1
    assert np.array_equal(parts, part_graph_kaminpar(xadj, adjncy, 4, seed=0, threads=1, scratch_parent=tmp_path))
    degree = np.diff(xadj)
    weighted = part_graph_kaminpar(xadj, adjncy, 4, degree[:, None], seed=0, threads=1, scratch_parent=tmp_path)
    assert np.bincount(weighted, weights=degree, minlength=4).max() <= 1.03 * degree.sum() / 4 + degree.max()
    assert os.listdir(tmp_path) == []  # the scratch file is gone


def test_the_command_partitions_with_kaminpar_and_refuses_two_constraints(tmp_path, monkeypatch):
    write_npz(rmat_graph(3000, 30000, feat_dim=2, seed=1), tmp_path / "g.npz")
    out = tmp_path / "parts"
    partition_cmd.main([str(tmp_path / "g.npz"), "--parts", "3", "--symmetrize", "--method", "kaminpar",
                        "--out", str(out)])
    meta = read_meta(out)
    assert verify(out, meta) == []
    assert meta["partitioner"]["method"] == "kaminpar" and meta["partitioner"]["constraints"] == ["nodes"]
    assert meta["partitioner"]["imbalance"]["num_nodes"] <= 1.03 + 3 / 3000
    with pytest.raises(SystemExit):
        partition_cmd.main([str(tmp_path / "g.npz"), "--parts", "2", "--method", "kaminpar", "--balance",
                            "nodes,in_degree", "--out", str(tmp_path / "no")])
    monkeypatch.setitem(sys.modules, "kaminpar", None)  # not installed
    with pytest.raises(InputError, match=r"field '--method': needs the kaminpar package"):
        part_graph_kaminpar(np.array([0, 1, 2]), np.array([1, 0]), 2)
    assert not (tmp_path / "no").exists()
