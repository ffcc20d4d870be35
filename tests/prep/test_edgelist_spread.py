"""Edge lists read by byte ranges: every rank parses its lines, and together they read the
serial reader's graph, headers, weights, 1-based ids and errors included."""
import os
import subprocess
import sys

import numpy as np
import pytest

from hpcgnn.format.ondisk import read_meta
from hpcgnn.prep.dist.edgelist import read_edgelist_spread, splittable
from hpcgnn.prep.generate import rmat_graph
from hpcgnn.prep.graph import Graph
from hpcgnn.prep.read import read_edgelist, write_npz
from hpcgnn.runtime.errors import InputError
from tests.conftest import mpiexec_path

# (file text, reader options): a count header, a column header, a numeric first line that is
# an edge, 1-based weighted ids with comments between the lines, no final newline
CASES = {
    "count header": ("{n} {m}\n{edges}", {}),
    "names": ("src,dst\n{edges_comma}", {}),
    "first line an edge": ("{edges}", {}),
    "one-based weighted": ("# made by a test\n{edges_one_weighted}", {"id_base": 1}),
    "no final newline": ("{edges}", {"header": False}),
}


def texts():
    rng = np.random.default_rng(5)
    src, dst = rng.integers(0, 300, 2000), rng.integers(0, 300, 2000)
    weight = rng.random(2000).round(3)
    lines = [f"{s} {d}" for s, d in zip(src, dst)]
    one = [f"{s + 1}\t{d + 1}\t{w}" + ("\n# a comment between edges" if i % 97 == 0 else "")
           for i, (s, d, w) in enumerate(zip(src, dst, weight))]
    fill = {"n": 300, "m": len(lines), "edges": "\n".join(lines) + "\n",
            "edges_comma": "\n".join(f"{s},{d}" for s, d in zip(src, dst)) + "\n",
            "edges_one_weighted": "\n".join(one) + "\n"}
    out = {name: (template.format(**fill), options) for name, (template, options) in CASES.items()}
    text, options = out["no final newline"]
    out["no final newline"] = (text.rstrip("\n"), options)
    return out


def gathered(comm, graph):
    """Every rank's edges in input order (by eid), as (src, dst, weight) rows."""
    weight = graph.edata.get("weight", np.zeros(graph.src.shape[0], np.float32))
    rows = np.concatenate(comm.allgather(np.stack([graph.eid, graph.src, graph.dst, weight * 1000], axis=1)))
    return rows[np.argsort(rows[:, 0], kind="stable")][:, 1:]


@pytest.mark.mpi(sizes=(1, 2, 4))
def test_ranks_read_the_serial_readers_graph(nranks, comm, shared_tmp):
    for name, (text, options) in texts().items():
        path = os.path.join(shared_tmp, name.replace(" ", "_") + ".txt")
        if comm.rank == 0:
            with open(path, "w") as fh:
                fh.write(text)
        comm.barrier()
        assert splittable(path)
        serial = read_edgelist(path, **options)
        # small blocks: each rank's range is parsed in several pieces
        spread = read_edgelist_spread(comm, path, chunk_bytes=512, **options)
        assert spread.num_nodes == serial.num_nodes, name
        weight = serial.edata.get("weight", np.zeros(serial.num_edges, np.float32))
        want = np.stack([serial.src, serial.dst, weight * 1000], axis=1)
        assert np.array_equal(gathered(comm, spread), want), name
        first, end = spread.block(comm.rank)
        if "orig_id" in serial.ndata:
            assert np.array_equal(spread.ndata["orig_id"], serial.ndata["orig_id"][first:end]), name


@pytest.mark.mpi(sizes=(2, 4))
def test_a_bad_line_is_named_by_its_file_line_on_every_rank(nranks, comm, shared_tmp):
    path = os.path.join(shared_tmp, "bad.txt")
    lines = [f"{i} {i + 1}" for i in range(3000)]
    lines[2500] = "2500 x"  # file line 2501, in the last rank's range
    if comm.rank == 0:
        with open(path, "w") as fh:
            fh.write("\n".join(lines) + "\n")
    comm.barrier()
    with pytest.raises(InputError) as serial:
        read_edgelist(path)
    with pytest.raises(InputError) as spread:
        read_edgelist_spread(comm, path, chunk_bytes=256)
    assert "line 2501" in str(serial.value)
    if comm.rank == nranks - 1:
        assert str(spread.value) == str(serial.value)
    else:
        assert f"rank {nranks - 1} failed" in str(spread.value) and "line 2501" in str(spread.value)


def test_the_multilevel_command_reads_an_edge_list_by_ranges(tmp_path):
    graph = rmat_graph(2000, 16000, feat_dim=2, seed=3)
    (tmp_path / "g.txt").write_text("".join(f"{s} {d}\n" for s, d in zip(graph.src, graph.dst)))
    write_npz(Graph(graph.num_nodes, graph.src, graph.dst), tmp_path / "g.npz")
    metas = []
    for name in ("g.txt", "g.npz"):
        run = subprocess.run([mpiexec_path(), "-n", "2", sys.executable, "-m", "hpcgnn.partition", str(tmp_path / name),
                              "--parts", "2", "--symmetrize", "--method", "multilevel", "--split", "dataset",
                              "--out", str(tmp_path / f"p_{name}")], capture_output=True, text=True, timeout=120,
                             env=dict(os.environ, OMP_NUM_THREADS="1"))
        assert run.returncode == 0, run.stderr
        metas.append(read_meta(tmp_path / f"p_{name}"))
    assert metas[0]["source"]["format"] == "edgelist" and metas[0]["source"]["read"] == "byte ranges"
    assert metas[1]["source"]["read"] == "rows"
    assert metas[0]["partitioner"]["edge_cut"] == metas[1]["partitioner"]["edge_cut"]
    assert metas[0]["node_starts"] == metas[1]["node_starts"]
