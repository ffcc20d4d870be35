"""Part files name every node by its id in the input file (``orig_id``), whatever renumbered it
on the way: ``--largest-component``, an edge list's ``--relabel`` or ``--id-base 1``. And the
partition command says, a line per stage, where its time goes."""
import h5py
import numpy as np

from hpcgnn.cli.partition import main as partition_main
from hpcgnn.format import ondisk
from hpcgnn.prep.graph import Graph
from hpcgnn.prep.inspection import verify
from hpcgnn.prep.read.npz import write_npz
from hpcgnn.testing.graphs import clustered_graph


def two_components(big=240, small=60):
    """A clustered graph of ``big`` nodes beside one of ``small`` nodes, their ids interleaved at
    random; ``feat[:, 0]`` is each node's input id, so a row tells which node it belongs to."""
    first, second = clustered_graph(num_nodes=big, seed=0), clustered_graph(num_nodes=small, seed=1)
    new_id = np.random.default_rng(7).permutation(big + small)  # position in the union -> input id
    src = new_id[np.concatenate([first.src, second.src + big])]
    dst = new_id[np.concatenate([first.dst, second.dst + big])]
    ndata = {}
    for name in first.ndata:
        values = np.concatenate([first.ndata[name], second.ndata[name]])
        ndata[name] = np.empty_like(values)
        ndata[name][new_id] = values
    ndata["feat"][:, 0] = np.arange(big + small)
    return Graph(big + small, src, dst, ndata, {}, name="two"), np.sort(new_id[:big])


def load_parts(directory):
    meta = ondisk.read_meta(directory)
    return meta, [ondisk.read_part(directory, meta, p) for p in range(meta["num_parts"])]


def input_edges_of(meta, parts):
    """Every stored edge as (input id of source, input id of destination)."""
    orig = np.concatenate([p["orig_id"] for p in parts])  # global id -> input id
    pairs = set()
    for part_id, part in enumerate(parts):
        dst = meta["node_starts"][part_id] + np.repeat(np.arange(part["indptr"].shape[0] - 1), np.diff(part["indptr"]))
        pairs.update(zip(orig[part["indices"]].tolist(), orig[dst].tolist()))
    return pairs


def test_largest_component_keeps_the_input_files_ids(tmp_path, capsys):
    graph, kept = two_components()
    write_npz(graph, tmp_path / "g.npz")
    assert partition_main([str(tmp_path / "g.npz"), "--parts", "2", "--out", str(tmp_path / "d"),
                           "--symmetrize", "--largest-component", "--split", "0.5,0.25,0.25"]) == 0
    meta, parts = load_parts(tmp_path / "d")
    orig = np.concatenate([p["orig_id"] for p in parts])
    assert meta["num_nodes"] == 240 and np.array_equal(np.sort(orig), kept)
    # row i of every part is node orig_id[i] of the input: its own features
    for part in parts:
        np.testing.assert_array_equal(part["feat"], graph.ndata["feat"][part["orig_id"]])
        np.testing.assert_array_equal(part["label"], graph.ndata["label"][part["orig_id"]])
    both_ways = set(zip(graph.src.tolist(), graph.dst.tolist())) | set(zip(graph.dst.tolist(), graph.src.tolist()))
    assert input_edges_of(meta, parts) == {(s, d) for s, d in both_ways if s in set(kept.tolist())}
    assert "orig_id" not in meta["node_fields"]
    assert verify(tmp_path / "d", meta) == []  # ids above num_nodes are fine while distinct

    # one line per stage, in pipeline order, each with its time
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("partition: ")]
    stages = [line.split(": ")[1].split(" ")[0] for line in lines]
    assert stages == ["read", "symmetrize", "largest", "split", "in-edge", "metis", "write"], lines
    assert all(line.endswith("s total)") for line in lines), lines
    assert "largest component: 240 nodes" in lines[2]


def test_inspect_refuses_an_input_id_repeated_across_parts(tmp_path):
    graph, _ = two_components()
    write_npz(graph, tmp_path / "g.npz")
    assert partition_main([str(tmp_path / "g.npz"), "--parts", "2", "--out", str(tmp_path / "d"),
                           "--largest-component"]) == 0
    meta, parts = load_parts(tmp_path / "d")
    beyond = parts[0]["orig_id"][parts[0]["orig_id"] >= meta["num_nodes"]][0]  # an id only the input has
    with h5py.File(tmp_path / "d" / ondisk.part_file_name(1), "r+") as h5:
        h5["orig_id"][0] = beyond
    assert "orig_id repeats ids across parts" in verify(tmp_path / "d", meta)


def test_relabelled_and_one_based_edge_lists_keep_the_files_ids(tmp_path):
    rng = np.random.default_rng(3)
    big = 10**12 + 7 * np.arange(40)  # raw ids: sparse and far above the node count
    small = 5 * 10**11 + np.arange(5)
    edges = [(big[i], big[(i + 1) % 40]) for i in range(40)] + \
        [tuple(rng.choice(big, 2, replace=False)) for _ in range(30)] + [(small[i], small[i + 1]) for i in range(4)]
    text = "".join(f"{s} {d}\n" for s, d in edges)
    (tmp_path / "e.txt").write_text(text)
    assert partition_main([str(tmp_path / "e.txt"), "--parts", "2", "--out", str(tmp_path / "d"),
                           "--relabel", "--largest-component"]) == 0
    meta, parts = load_parts(tmp_path / "d")
    assert np.array_equal(np.sort(np.concatenate([p["orig_id"] for p in parts])), big)
    assert input_edges_of(meta, parts) == {(int(s), int(d)) for s, d in edges if s in set(big.tolist())}
    assert verify(tmp_path / "d", meta) == []

    (tmp_path / "one.txt").write_text("1 2\n2 3\n3 1\n")  # 1-based: the file has no node 0
    assert partition_main([str(tmp_path / "one.txt"), "--parts", "1", "--out", str(tmp_path / "one"),
                           "--id-base", "1"]) == 0
    meta, parts = load_parts(tmp_path / "one")
    assert parts[0]["orig_id"].tolist() == [1, 2, 3]
    assert input_edges_of(meta, parts) == {(1, 2), (2, 3), (3, 1)}
