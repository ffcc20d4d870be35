"""An OGB dataset streamed by rank 0 into the ranks reads the serial reader's graph, and its
bad input gives the serial reader's errors on every rank."""
import gzip
import os
import subprocess
import sys

import numpy as np
import pytest

from hpcgnn.format.ondisk import read_meta
from hpcgnn.prep.dist.ogb import read_ogb_spread, streamable
from hpcgnn.prep.inspection import verify
from hpcgnn.prep.read.ogb import read_ogb
from hpcgnn.runtime.errors import InputError
from tests.conftest import mpiexec_path


def write_gz(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with gzip.open(path, "wt") as fh:
        fh.write(text)


def write_dataset(root, num_nodes=500, num_edges=4000):
    rng = np.random.default_rng(1)
    src, dst = rng.integers(0, num_nodes, num_edges), rng.integers(0, num_nodes, num_edges)
    write_gz(f"{root}/raw/edge.csv.gz", "".join(f"{s},{d}\n" for s, d in zip(src, dst)))
    write_gz(f"{root}/raw/num-node-list.csv.gz", f"{num_nodes}\n")
    write_gz(f"{root}/raw/num-edge-list.csv.gz", f"{num_edges}\n")
    write_gz(f"{root}/raw/node-feat.csv.gz", "".join(f"{i / 7:.3f},{-i},{i % 5}\n" for i in range(num_nodes)))
    write_gz(f"{root}/raw/node-label.csv.gz", "".join("nan\n" if i % 9 == 0 else f"{i % 4}\n"
                                                      for i in range(num_nodes)))
    order = rng.permutation([i for i in range(num_nodes) if i % 9])
    for stem, ids in (("train", order[:200]), ("valid", order[200:300]), ("test", order[300:400])):
        write_gz(f"{root}/split/random/{stem}.csv.gz", "".join(f"{i}\n" for i in ids))


@pytest.mark.mpi(sizes=(1, 2, 4))
def test_the_streamed_dataset_is_the_serial_readers(nranks, comm, shared_tmp):
    root = os.path.join(shared_tmp, "ogbn_toy")
    if comm.rank == 0:
        write_dataset(root)
    comm.barrier()
    assert streamable(root)
    serial = read_ogb(root)
    # small blocks: many exchanges, rows of one block landing on several ranks
    spread = read_ogb_spread(comm, root, chunk_bytes=300)
    assert spread.num_nodes == serial.num_nodes and spread.name == serial.name
    rows = np.concatenate(comm.allgather(np.stack([spread.eid, spread.src, spread.dst], axis=1)))
    rows = rows[np.argsort(rows[:, 0])]
    assert np.array_equal(rows[:, 0], np.arange(serial.num_edges))
    assert np.array_equal(rows[:, 1], serial.src) and np.array_equal(rows[:, 2], serial.dst)
    first, end = spread.block(comm.rank)
    assert ((spread.dst >= first) & (spread.dst < end)).all()
    assert sorted(spread.ndata) == sorted(serial.ndata)
    for key, values in serial.ndata.items():
        assert np.array_equal(spread.ndata[key], values[first:end]), key
    # bad input: the serial reader's one line on every rank (the out-of-range id is in a late block)
    bad = os.path.join(shared_tmp, "bad")
    if comm.rank == 0:
        write_dataset(bad)
        edges = [f"{i % 500},{(i * 7) % 500}\n" for i in range(4000)]
        edges[3500] = "3,512\n"
        write_gz(f"{bad}/raw/edge.csv.gz", "".join(edges))
    comm.barrier()
    with pytest.raises(InputError) as serial_error:
        read_ogb(bad)
    with pytest.raises(InputError) as spread_error:
        read_ogb_spread(comm, bad, chunk_bytes=300)
    assert "field 'dst': node id out of range [0, 500) (value 512)" in str(serial_error.value)
    assert "field 'dst': node id out of range [0, 500) (value 512)" in str(spread_error.value)


def test_the_multilevel_command_streams_an_ogb_dataset(tmp_path):
    write_dataset(str(tmp_path / "ogbn_toy"), num_nodes=300, num_edges=2000)
    run = subprocess.run([mpiexec_path(), "-n", "2", sys.executable, "-m", "hpcgnn.partition",
                          str(tmp_path / "ogbn_toy"), "--parts", "2", "--symmetrize", "--method", "multilevel",
                          "--out", str(tmp_path / "p")],
                         capture_output=True, text=True, timeout=120, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert run.returncode == 0, run.stderr
    meta = read_meta(tmp_path / "p")
    assert meta["source"]["read"] == "streamed by rank 0" and verify(tmp_path / "p", meta) == []
