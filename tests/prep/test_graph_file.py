"""The graph file (``.h5``): written by one process or by every rank in turn, read whole or by
rows, drawn in parallel by ``generate`` and copied in parallel by ``convert``; the same graph
whatever the number of ranks."""
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

import hpcgnn.prep.dist.graph_file as graph_file
from hpcgnn.convert import main as convert_main
from hpcgnn.format.ondisk import id_dtype
from hpcgnn.generate import main as generate_main
from hpcgnn.prep.dist.generate import generate_rmat_file
from hpcgnn.prep.dist.ingest import read_h5graph_spread, read_npz_spread
from hpcgnn.prep.generate import rmat_graph
from hpcgnn.prep.graph import Graph
from hpcgnn.prep.read import detect_format, read_graph, write_npz
from hpcgnn.prep.read.h5graph import H5GraphArrays, write_h5graph
from hpcgnn.runtime.errors import InputError
from tests.conftest import mpiexec_path

RMAT = dict(num_nodes=3000, num_edges=40000, feat_dim=5, seed=4)


def weighted_graph() -> Graph:
    graph = rmat_graph(2000, 15000, feat_dim=3, seed=1)
    weight = np.linspace(0, 1, graph.num_edges, dtype=np.float32)
    return Graph(graph.num_nodes, graph.src, graph.dst, graph.ndata, {"weight": weight}, "weighted")


def assert_same_graph(got: Graph, want: Graph):
    assert got.num_nodes == want.num_nodes
    assert np.array_equal(got.src, want.src) and np.array_equal(got.dst, want.dst)
    assert list(got.ndata) == list(want.ndata) and list(got.edata) == list(want.edata)
    for mine, theirs in ((got.ndata, want.ndata), (got.edata, want.edata)):
        for key in theirs:
            assert mine[key].dtype == theirs[key].dtype and np.array_equal(mine[key], theirs[key]), key


def test_a_graph_file_holds_the_graph_with_narrow_ids(tmp_path):
    graph = weighted_graph()
    path = tmp_path / "g.h5"
    write_h5graph(graph, path)
    assert detect_format(path) == "h5graph"
    assert_same_graph(read_graph(path), graph)
    with h5py.File(path) as h5:
        assert h5["src"].dtype == np.int32 and h5["edges/weight"].chunks is not None
    assert id_dtype(2**31 - 1) == np.int32 and id_dtype(2**31) == np.int64  # the part files' rule
    # by rows, under the .npz keys
    with H5GraphArrays(path) as arrays:
        assert np.array_equal(arrays.rows("edge_weight", 10, 20), graph.edata["weight"][10:20])
        assert np.array_equal(arrays.rows("feat", 1990, 2000), graph.ndata["feat"][1990:])
        assert int(arrays.rows("num_nodes", 0, 1)) == graph.num_nodes
    # compressed chunks: smaller, same graph
    write_h5graph(graph, tmp_path / "z.h5", compress=True)
    assert os.path.getsize(tmp_path / "z.h5") < os.path.getsize(path)
    assert_same_graph(read_graph(tmp_path / "z.h5"), graph)


def test_bad_graph_files_are_named_in_one_line(tmp_path):
    foreign = tmp_path / "other.h5"
    with h5py.File(foreign, "w") as h5:
        h5["x"] = np.arange(3)
    with pytest.raises(InputError, match=r"other\.h5: field 'format': is not a hpcgnn graph file"):
        detect_format(foreign)
    path = tmp_path / "g.h5"
    write_h5graph(weighted_graph(), path)
    with h5py.File(path, "r+") as h5:
        h5.attrs["version"] = 99
    with pytest.raises(InputError, match=r"g\.h5: field 'version': .*cannot read.*\(value 99\)"):
        read_graph(path)
    with h5py.File(path, "r+") as h5:
        h5.attrs["version"] = 1
        h5["dst"][0] = 5000
    with pytest.raises(InputError, match=r"g\.h5: field 'dst': node id out of range"):
        read_graph(path)
    truncated = tmp_path / "cut.h5"
    truncated.write_bytes(path.read_bytes()[:4000])
    with pytest.raises(InputError, match=r"cut\.h5"):
        read_graph(truncated, format="h5graph")


def test_convert_and_generate_on_one_process(tmp_path, capsys):
    edges = tmp_path / "e.txt"
    edges.write_text("# a comment\n1 2\n2 3\n3 1\n5 1\n")
    assert convert_main([str(edges), str(tmp_path / "e.h5"), "--id-base", "1"]) == 0
    assert_same_graph(read_graph(tmp_path / "e.h5"), read_graph(edges, id_base=1))
    generate_main(["rmat", "--nodes", "3000", "--edges", "40000", "--feat-dim", "5", "--seed", "4",
                   "--out", str(tmp_path / "r.h5")])
    assert_same_graph(read_graph(tmp_path / "r.h5"), rmat_graph(**RMAT))
    assert "-> " in capsys.readouterr().out


@pytest.mark.mpi(sizes=(1, 2, 4))
def test_ranks_draw_and_write_the_serial_graph(nranks, comm, shared_tmp):
    path = os.path.join(shared_tmp, "rmat.h5")
    # small chunks: several routed chunks per round, ranks with and without blocks
    summary = generate_rmat_file(comm, path, chunk_edges=20000, **RMAT)
    serial = rmat_graph(**RMAT)
    assert_same_graph(read_graph(path), serial)
    assert summary["num_edges"] == serial.num_edges
    assert summary["homophily"] == pytest.approx(np.mean(serial.ndata["label"][serial.src]
                                                         == serial.ndata["label"][serial.dst]))
    # the parallel reader takes the graph file as it takes the .npz
    npz = os.path.join(shared_tmp, "rmat.npz")
    if comm.rank == 0:
        write_npz(serial, npz)
    comm.barrier()
    from_h5, from_npz = read_h5graph_spread(comm, path), read_npz_spread(comm, npz)
    assert np.array_equal(from_h5.src, from_npz.src) and np.array_equal(from_h5.eid, from_npz.eid)
    assert all(np.array_equal(from_h5.ndata[k], from_npz.ndata[k]) for k in from_npz.ndata)
    # the command: convert by rows and generate, under the launcher
    converted = os.path.join(shared_tmp, "converted.h5")
    assert convert_main([npz, converted]) == 0
    assert_same_graph(read_graph(converted), read_graph(npz))
    generated = os.path.join(shared_tmp, "generated.h5")
    generate_main(["rmat", "--nodes", "3000", "--edges", "40000", "--feat-dim", "5", "--seed", "4",
                   "--out", generated])
    assert_same_graph(read_graph(generated), serial)


@pytest.mark.mpi(sizes=(2,))
def test_a_failed_turn_fails_every_rank_and_leaves_nothing(nranks, comm, shared_tmp, monkeypatch):
    out = os.path.join(shared_tmp, "half.h5")

    def broken(*args):
        raise OSError(28, "No space left on device")

    if comm.rank == 1:
        monkeypatch.setattr(graph_file, "write_rows", broken)
    with pytest.raises((InputError, OSError)) as failed:
        generate_rmat_file(comm, out, **RMAT)
    if comm.rank == 0:
        assert "rank 1 failed" in str(failed.value)
    comm.barrier()
    assert not os.path.exists(out)
    assert not [name for name in os.listdir(shared_tmp) if name.startswith(".half.h5")]


def test_what_one_process_must_do_is_refused_under_mpirun(tmp_path):
    write_npz(rmat_graph(200, 1000, feat_dim=2, seed=0), tmp_path / "g.npz")
    (tmp_path / "e.txt").write_text("0 1\n1 2\n")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for args, field in ((["hpcgnn.generate", "sbm", "--nodes", "100", "--avg-degree", "3", "--out",
                          str(tmp_path / "s.h5")], "field 'kind'"),
                        (["hpcgnn.generate", "rmat", "--nodes", "100", "--edges", "300", "--out",
                          str(tmp_path / "r.npz")], "field '--out'"),
                        (["hpcgnn.convert", str(tmp_path / "e.txt"), str(tmp_path / "e.h5")], "field 'format'")):
        run = subprocess.run([mpiexec_path(), "-n", "2", sys.executable, "-m", *args], capture_output=True,
                             text=True, timeout=120, env=env)
        lines = [line for line in run.stderr.splitlines() if line.strip()]
        assert run.returncode != 0 and field in run.stderr, run.stderr
        assert len(set(lines)) == 1, run.stderr  # one line, however many ranks said it
        assert not [p for p in os.listdir(tmp_path) if p.endswith(".h5") or ".tmp" in p]
