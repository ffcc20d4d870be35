"""The distributed pipeline (``--method multilevel``): parallel reading, clean-up, partitioning and
writing with the graph spread over the ranks, checked against the serial pipeline."""
import os
import subprocess
import sys
import tracemalloc
import zipfile

import numpy as np
import pytest

from hpcgnn.format.ondisk import read_meta
from hpcgnn.prep import transform
from hpcgnn.prep.dist.cleanup import prepare
from hpcgnn.prep.dist.ingest import NpzArrays, read_npz_spread
from hpcgnn.prep.dist.multilevel import multilevel_parts, undirected_level
from hpcgnn.prep.dist.pipeline import balance_columns
from hpcgnn.prep.dist.write import write_spread
from hpcgnn.prep.generate import rmat_graph
from hpcgnn.prep.graph import Graph
from hpcgnn.prep.inspection import verify
from hpcgnn.prep.partition import assign_parts, build_csc
from hpcgnn.prep.read import write_npz
from hpcgnn.runtime.errors import InputError


def messy_graph(num_nodes=3000, num_edges=24000) -> Graph:
    """An RMAT graph with what clean-up removes: self loops, repeated edges (with an edge field
    that tells the copies apart) and a few small components."""
    graph = rmat_graph(num_nodes, num_edges, feat_dim=4, seed=3)
    rng = np.random.default_rng(0)
    repeats = rng.choice(graph.num_edges, 500)
    loops = rng.choice(num_nodes, 50)
    src = np.concatenate([graph.src, graph.src[repeats], loops, [num_nodes - 1]])
    dst = np.concatenate([graph.dst, graph.dst[repeats], loops, [num_nodes - 2]])
    weight = np.arange(src.shape[0], dtype=np.float32)
    return Graph(num_nodes, src, dst, graph.ndata, {"weight": weight}, "messy")


def gathered_edges(comm, graph):
    """Every rank's (src, dst, weight) triples, sorted, on every rank."""
    parts = comm.allgather(np.stack([graph.src, graph.dst, graph.edata["weight"].astype(np.int64)], axis=1))
    edges = np.concatenate(parts)
    return edges[np.lexsort(edges.T[::-1])]


def serial_edges(graph):
    edges = np.stack([graph.src, graph.dst, graph.edata["weight"].astype(np.int64)], axis=1)
    return edges[np.lexsort(edges.T[::-1])]


def pipeline_peaks(comm, path, parts):
    """Peak traced bytes of reading ``path`` over ``comm``, and of cleaning and partitioning it."""
    tracemalloc.start()
    graph = read_npz_spread(comm, path)
    read_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.reset_peak()
    graph = prepare(comm, graph, symmetrize_edges=True)
    weights, _ = balance_columns(comm, graph, ("nodes", "in_degree"))
    level = undirected_level(comm, graph.starts, graph.src, graph.dst, weights, True)
    multilevel_parts(comm, level, parts, coarse_nodes=2000)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return np.array([read_peak, peak])


@pytest.mark.mpi(sizes=(1, 2, 4))
def test_spread_pipeline_matches_the_serial_one(nranks, comm, shared_tmp):
    path = os.path.join(shared_tmp, "messy.npz")
    graph = messy_graph()
    if comm.rank == 0:
        write_npz(graph, path)
    comm.barrier()
    # reading: every rank its slice; the union is the file
    spread = read_npz_spread(comm, path)
    assert np.array_equal(gathered_edges(comm, spread), serial_edges(graph))
    first, end = spread.block(comm.rank)
    assert np.array_equal(spread.ndata["feat"], graph.ndata["feat"][first:end])
    assert ((spread.dst >= first) & (spread.dst < end)).all()
    # clean-up: the serial steps' graph, edge fields of the copy the serial path keeps
    for options in ({"drop_self_loops": True, "symmetrize_edges": True, "largest_cc": True},
                    {"dedup_edges": True}):
        cleaned = prepare(comm, spread, **options)
        serial = transform.prepare(graph, **options)
        assert cleaned.num_nodes == serial.num_nodes
        assert np.array_equal(gathered_edges(comm, cleaned), serial_edges(serial))
        lo, hi = cleaned.block(comm.rank)
        for name in ("orig_id", "label"):
            if name in serial.ndata:
                assert np.array_equal(cleaned.ndata[name], serial.ndata[name][lo:hi])
    # without edge fields dedup ranks copies by eid in the kernel, and consume empties the input
    bare_path = os.path.join(shared_tmp, "bare.npz")
    bare = Graph(graph.num_nodes, graph.src, graph.dst, graph.ndata, {}, "bare")
    if comm.rank == 0:
        write_npz(bare, bare_path)
    comm.barrier()
    spread_bare = read_npz_spread(comm, bare_path)
    cleaned_bare = prepare(comm, spread_bare, symmetrize_edges=True, consume=True)
    assert spread_bare.num_local_edges == 0
    serial_bare = transform.prepare(bare, symmetrize_edges=True)
    pairs = np.concatenate(comm.allgather(np.stack([cleaned_bare.src, cleaned_bare.dst], axis=1)))
    assert np.array_equal(pairs[np.lexsort(pairs.T[::-1])],
                          np.stack([serial_bare.src, serial_bare.dst], axis=1)[np.lexsort((serial_bare.dst,
                                                                                          serial_bare.src))])
    # partitioning: balanced, and a cut close to serial METIS's on the same graph
    weights, names = balance_columns(comm, cleaned, ("nodes", "in_degree", "train"))
    level = undirected_level(comm, cleaned.starts, cleaned.src, cleaned.dst, weights, False)
    part, info = multilevel_parts(comm, level, 4, coarse_nodes=1000)
    assert len(info["levels"]) >= 2 and info["levels"][-1] <= 1000, info  # it did coarsen
    parts = np.concatenate(comm.allgather(part))
    serial_parts, _ = assign_parts(serial, build_csc(serial), 4, balance=("nodes", "in_degree", "train"),
                                   keep_degree=0)
    undirected = transform.symmetrize(transform.remove_self_loops(serial))
    cut = int((parts[undirected.src] != parts[undirected.dst]).sum()) // 2
    serial_cut = int((serial_parts[undirected.src] != serial_parts[undirected.dst]).sum()) // 2
    assert cut == info["undirected_cut"]
    assert cut <= 1.10 * serial_cut, (cut, serial_cut)
    totals = np.stack([np.ones(serial.num_nodes), np.bincount(serial.dst, minlength=serial.num_nodes),
                       serial.ndata["train_mask"]], axis=1)
    loads = np.stack([totals[parts == p].sum(axis=0) for p in range(4)])
    assert (loads <= np.ceil(totals.sum(axis=0) * 1.03 / 4)).all(), loads
    # writing: a valid dataset with the nodes and edges of the cleaned graph
    out = os.path.join(shared_tmp, "parts")
    meta = write_spread(comm, cleaned, part, 4, out, {"method": "multilevel"}, {})
    if comm.rank == 0:
        assert verify(out, read_meta(out)) == []
        assert meta["num_edges"] == serial.num_edges and meta["node_starts"][-1] == serial.num_nodes
        assert meta["partitioner"]["edge_cut"] == int((parts[serial.src] != parts[serial.dst]).sum())


@pytest.mark.mpi(sizes=(4,))
def test_memory_per_rank_shrinks_with_the_ranks(nranks, comm, shared_tmp):
    path = os.path.join(shared_tmp, "g.npz")
    if comm.rank == 0:
        write_npz(rmat_graph(20000, 300000, feat_dim=4, seed=1), path)
    comm.barrier()
    spread = np.max(comm.allgather(pipeline_peaks(comm, path, 4)), axis=0)
    if comm.rank == 0:
        from mpi4py import MPI

        alone = pipeline_peaks(MPI.COMM_SELF, path, 4)
        # a quarter of the graph per rank (measured: 0.25-0.27 of one rank's peak), plus what every
        # rank holds whole (block starts, rank 0's coarsest graph)
        assert (spread < 0.4 * alone).all(), (spread, alone)
    comm.barrier()


@pytest.mark.mpi(sizes=(2,))
def test_bad_input_gives_the_serial_readers_error_on_every_rank(nranks, comm, shared_tmp):
    from hpcgnn.prep.read import read_graph

    cases = {
        "range.npz": dict(src=np.array([0, 1, 7]), dst=np.array([1, 2, 0]), num_nodes=np.int64(3)),
        "lengths.npz": dict(src=np.array([0, 1, 2]), dst=np.array([1, 2])),
        "masks.npz": dict(src=np.array([0, 1]), dst=np.array([1, 2]), train_mask=np.array([0, 1, 1], bool),
                          val_mask=np.array([0, 1, 0], bool)),
        "nan.npz": dict(src=np.array([0, 1]), dst=np.array([1, 2]), feat=np.array([[0.0], [np.nan], [1.0]])),
    }
    for name, arrays in cases.items():
        path = os.path.join(shared_tmp, name)
        if comm.rank == 0:
            np.savez(path, **arrays)
        comm.barrier()
        with pytest.raises(InputError) as serial:
            read_graph(path)
        with pytest.raises(InputError) as spread:
            read_npz_spread(comm, path)
        # the failing rank's own message, or the one naming that rank's message
        assert serial.value.field in str(spread.value) and path in str(spread.value), (serial.value, spread.value)


def test_compressed_and_stored_members_read_the_same_rows(tmp_path):
    arrays = {"src": np.arange(1000) % 97, "feat": np.arange(3000, dtype=np.float32).reshape(1000, 3)}
    np.savez(tmp_path / "stored.npz", **arrays)
    np.savez_compressed(tmp_path / "deflated.npz", **arrays)
    with zipfile.ZipFile(tmp_path / "deflated.npz") as archive:
        assert all(i.compress_type == zipfile.ZIP_DEFLATED for i in archive.infolist())
    for name in ("stored.npz", "deflated.npz"):
        reader = NpzArrays(tmp_path / name)
        assert reader.shape("feat") == (1000, 3)
        for key in arrays:
            assert np.array_equal(reader.rows(key, 123, 456), arrays[key][123:456])


def test_the_command_refuses_serial_only_options_in_one_line(tmp_path):
    write_npz(rmat_graph(200, 1000, feat_dim=2, seed=0), tmp_path / "g.npz")
    run = subprocess.run([sys.executable, "-m", "hpcgnn.partition", str(tmp_path / "g.npz"), "--parts", "2",
                          "--out", str(tmp_path / "d"), "--method", "multilevel", "--split", "0.5,0.2,0.3"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and run.stderr.strip().count("\n") == 0, run.stderr
    assert "--split" in run.stderr and not (tmp_path / "d").exists()
    for flags in (["--method", "metis", "--coarse-nodes", "100"], ["--method", "multilevel", "--coarse-nodes", "1"]):
        bad = subprocess.run([sys.executable, "-m", "hpcgnn.partition", str(tmp_path / "g.npz"), "--parts", "2",
                              "--out", str(tmp_path / "d"), *flags], capture_output=True, text=True, timeout=120)
        assert bad.returncode == 2 and "--coarse-nodes" in bad.stderr and not (tmp_path / "d").exists(), bad.stderr
    ok = subprocess.run([sys.executable, "-m", "hpcgnn.partition", str(tmp_path / "g.npz"), "--parts", "2",
                         "--out", str(tmp_path / "d"), "--method", "multilevel", "--symmetrize",
                         "--coarse-nodes", "50"],
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    meta = read_meta(tmp_path / "d")
    assert verify(tmp_path / "d", meta) == []
    assert meta["partitioner"]["method"] == "multilevel" and meta["partitioner"]["levels"][-1] < 200
