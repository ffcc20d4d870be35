"""``--method ldg``: the streaming greedy over the ranks finds planted clusters, keeps its
documented balance bound, and reports the cut it made."""
import subprocess
import sys

import numpy as np
import pytest

from hpcgnn.format.ondisk import read_meta
from hpcgnn.prep import transform
from hpcgnn.prep.dist.ingest import spread_graph
from hpcgnn.prep.dist.multilevel import undirected_level
from hpcgnn.prep.dist.pipeline import balance_columns
from hpcgnn.prep.dist.streaming import ldg_parts
from hpcgnn.prep.generate import rmat_graph
from hpcgnn.prep.inspection import verify
from hpcgnn.prep.read import write_npz
from hpcgnn.testing.graphs import clustered_graph


@pytest.mark.mpi(sizes=(1, 2, 4))
def test_streaming_greedy_finds_planted_clusters_within_its_balance_bound(nranks, comm):
    parts, chunk = 4, 64
    graph = transform.symmetrize(clustered_graph(num_nodes=4000, num_clusters=parts, avg_degree=10, seed=2,
                                                 edge_field=False)) if comm.rank == 0 else None
    spread = spread_graph(comm, graph)
    weights, _ = balance_columns(comm, spread, ("nodes",))
    level = undirected_level(comm, spread.starts, spread.src, spread.dst, weights, True)
    part, info = ldg_parts(comm, level, parts, chunk=chunk)
    every = np.concatenate(comm.allgather(part))
    whole = comm.bcast(graph, root=0)
    assert every.min() >= 0 and every.max() < parts
    cut = int((every[whole.src] != every[whole.dst]).sum()) // 2
    assert cut == info["undirected_cut"]
    # planted clusters keep 95% of the edges inside: random parts would cut 3/4 of them
    assert cut < 0.25 * (whole.num_edges // 2), cut
    # a round's placements see the loads before it: overshoot of at most chunk vertices a rank
    sizes = np.bincount(every, minlength=parts)
    assert sizes.max() <= np.ceil(1.03 * whole.num_nodes / parts) + chunk * nranks, sizes


def test_the_command_writes_ldg_parts_and_refuses_coarse_nodes(tmp_path):
    write_npz(rmat_graph(3000, 20000, feat_dim=2, seed=0), tmp_path / "g.npz")
    base = [sys.executable, "-m", "hpcgnn.partition", str(tmp_path / "g.npz"), "--parts", "3", "--symmetrize",
            "--method", "ldg", "--out", str(tmp_path / "d")]
    bad = subprocess.run(base + ["--coarse-nodes", "100"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "field '--coarse-nodes'" in bad.stderr and not (tmp_path / "d").exists()
    ok = subprocess.run(base, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    meta = read_meta(tmp_path / "d")
    assert verify(tmp_path / "d", meta) == [] and meta["partitioner"]["method"] == "ldg"
