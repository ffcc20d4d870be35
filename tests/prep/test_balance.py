"""--balance: METIS's constraints are the quantities the user names, recorded in meta.json."""
import json
import subprocess
import sys

import numpy as np
import pytest

from hpcgnn.prep.partition import DEFAULT_BALANCE, balance_weights, build_csc, parse_balance, partition_graph
from hpcgnn.runtime.errors import InputError
from hpcgnn.testing.graphs import clustered_graph


def test_weights_have_one_column_per_named_quantity():
    graph = clustered_graph(num_nodes=200)
    indptr = build_csc(graph)[0]
    weights, names = balance_weights(graph, indptr, DEFAULT_BALANCE)
    assert names == ["nodes", "in_degree", "train_mask", "val_mask", "test_mask"]
    assert np.array_equal(weights[:, 1], np.diff(indptr))
    assert np.array_equal(weights[:, 2], graph.ndata["train_mask"].astype(np.int64))
    weights, names = balance_weights(graph, indptr, ("nodes", "train"))
    assert names == ["nodes", "train_mask"] and weights.shape == (200, 2)
    del graph.ndata["val_mask"]  # a split the graph lacks is no constraint
    assert balance_weights(graph, indptr, ("val",))[1] == ["nodes"]


def test_parse_balance_refuses_unknown_names_in_one_line():
    assert parse_balance("nodes, train,nodes") == ("nodes", "train")
    for bad in ("nodes,edges", ""):
        with pytest.raises(InputError, match="--balance"):
            parse_balance(bad)


def test_fewer_constraints_are_recorded_and_cut_no_more(tmp_path):
    graph = clustered_graph(num_nodes=1500, num_clusters=4, p_inside=0.9)
    everything = partition_graph(graph, tmp_path / "all", 4, "metis")
    nodes_only = partition_graph(graph, tmp_path / "nodes", 4, "metis", balance=("nodes",))
    assert everything["partitioner"]["constraints"] == ["nodes", "in_degree", "train_mask", "val_mask", "test_mask"]
    assert nodes_only["partitioner"]["constraints"] == ["nodes"]
    assert nodes_only["partitioner"]["imbalance"]["num_nodes"] <= 1.031
    # one constraint leaves METIS more freedom: the cut is no worse (a little slack for its heuristics)
    assert nodes_only["partitioner"]["edge_cut"] <= 1.05 * everything["partitioner"]["edge_cut"]


def test_the_flag_reaches_meta_json(tmp_path):
    from hpcgnn.prep.read import write_npz

    write_npz(clustered_graph(num_nodes=300), tmp_path / "g.npz")
    out = tmp_path / "d"
    run = subprocess.run([sys.executable, "-m", "hpcgnn.partition", str(tmp_path / "g.npz"), "--parts", "2",
                          "--out", str(out), "--balance", "nodes,train"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    with open(out / "meta.json") as fh:
        assert json.load(fh)["partitioner"]["constraints"] == ["nodes", "train_mask"]
    bad = subprocess.run([sys.executable, "-m", "hpcgnn.partition", str(tmp_path / "g.npz"), "--parts", "2",
                          "--out", str(tmp_path / "e"), "--balance", "edges"], capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0, bad.stderr
    assert "--balance" in bad.stderr and not (tmp_path / "e").exists()
