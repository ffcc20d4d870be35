import os
import subprocess
import sys

import numpy as np
import pytest

from hpcgnn.runtime.comm import FORCE_RMA_ENV
from hpcgnn.testing.datasets import input_eids, make_dataset, oracle
from hpcgnn.testing.graphs import clustered_graph


@pytest.mark.mpi(sizes=(1, 2, 4))
@pytest.mark.parametrize("route", ["shm", "rma"])
def test_dist_graph_reads_any_node(nranks, comm, shared_tmp, route, monkeypatch):
    from hpcgnn import DistGraph

    monkeypatch.setenv(FORCE_RMA_ENV, "1" if route == "rma" else "0")
    path, graph = make_dataset(comm, shared_tmp, nranks)
    orig, indptr, indices = oracle(path)
    edge_origin = input_eids(path)
    with DistGraph(path, comm) as g:
        assert (g.num_nodes, g.num_edges) == (graph.num_nodes, graph.num_edges)
        start, end = g.local_nodes
        assert np.array_equal(g.orig_id, orig[start:end])
        assert np.array_equal(g.indptr, indptr[start:end + 1] - indptr[start])
        rng = np.random.default_rng(comm.rank)
        for gids in (rng.integers(0, g.num_nodes, 300), np.arange(start, end), np.zeros(0, np.int64),
                     np.repeat(rng.integers(0, g.num_nodes, 3), 4)):
            for name in ("feat", "label", "train_mask"):
                assert np.array_equal(g.ndata[name].gather(gids), graph.ndata[name][orig[gids]]), name
            offsets, src, eids = g.in_edges(gids)
            want = [indices[indptr[v]:indptr[v + 1]] for v in gids]
            assert np.array_equal(np.diff(offsets), [len(w) for w in want])
            assert np.array_equal(src, np.concatenate(want) if want else [])
            assert np.array_equal(eids, np.concatenate([np.arange(indptr[v], indptr[v + 1]) for v in gids])
                                  if len(gids) else [])
            # edge fields follow the global edge ids
            assert np.array_equal(g.edata["weight"].gather(eids), graph.edata["weight"][edge_origin[eids]])
        assert np.array_equal(g.in_degrees(gids), np.diff(offsets))


@pytest.mark.mpi(sizes=(2, 4))
def test_node_split_is_disjoint_complete_and_even(nranks, comm, shared_tmp):
    from hpcgnn import DistGraph, node_split

    path, graph = make_dataset(comm, shared_tmp, nranks, num_nodes=1000)
    orig, _, _ = oracle(path)
    with DistGraph(path, comm) as g:
        for mask in ("train_mask", g.ndata["val_mask"], graph.ndata["test_mask"][orig]):
            mine = node_split(mask, g, seed=5)
            assert np.array_equal(mine, node_split(mask, g, seed=5))
            everyone = comm.allgather(mine)
            joined = np.concatenate(everyone)
            full = mask if not isinstance(mask, str) else g.ndata[mask]
            expected = np.flatnonzero(full.gather(np.arange(g.num_nodes)) if hasattr(full, "gather") else full)
            assert np.array_equal(np.sort(joined), expected)  # disjoint and complete
            lengths = [len(x) for x in everyone]
            assert max(lengths) - min(lengths) <= (0 if len(expected) % nranks == 0 else 1)
            # locality: a rank keeps as many of its own selected nodes as its share allows
            owned = np.count_nonzero((mine >= g.local_nodes[0]) & (mine < g.local_nodes[1]))
            local_selected = expected[(expected >= g.local_nodes[0]) & (expected < g.local_nodes[1])]
            assert owned == min(len(local_selected), len(mine))


def test_standalone_mode_without_mpirun(tmp_path):
    from hpcgnn.prep.partition import partition_graph

    graph = clustered_graph(num_nodes=200)
    partition_graph(graph, tmp_path / "one", 1, "metis")
    script = ("import numpy as np; from hpcgnn import DistGraph; g = DistGraph({!r}); "
              "print(g.num_nodes, g.ndata['feat'].gather(np.arange(5)).shape); g.close()").format(str(tmp_path / "one"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI", "HYDRA", "MPI"))}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["200", "(5,", "8)"]


@pytest.mark.mpi(sizes=(2, 4))
@pytest.mark.parametrize("route", ["shm", "rma"])
def test_barrier_makes_every_ranks_field_writes_visible(nranks, comm, shared_tmp, route, monkeypatch):
    """Writes to node and edge fields of rows other ranks own are seen by all after barrier()."""
    from hpcgnn import DistGraph

    monkeypatch.setenv(FORCE_RMA_ENV, "1" if route == "rma" else "0")
    path, _ = make_dataset(comm, shared_tmp, nranks, num_nodes=400)
    with DistGraph(path, comm) as g:
        for rounds in range(3):  # repeated: a missing fence would show as a stale row in some round
            target = (comm.rank + 1) % nranks  # every rank writes the next rank's rows (remote)
            nodes = np.arange(*g.book.part_range(target))
            g.ndata["feat"][nodes] = np.full((nodes.shape[0], 8), comm.rank + 10 * rounds, np.float32)
            edges = np.arange(*g.edge_book.part_range(target))
            g.edata["weight"][edges] = np.full(edges.shape[0], comm.rank + 10 * rounds, np.float32)
            g.barrier()
            writer = (g.book.owner(np.arange(g.num_nodes)) - 1) % nranks
            assert np.array_equal(g.ndata["feat"].gather(np.arange(g.num_nodes))[:, 3], writer + 10 * rounds)
            edge_writer = (g.edge_book.owner(np.arange(g.num_edges)) - 1) % nranks
            assert np.array_equal(g.edata["weight"].gather(np.arange(g.num_edges)), edge_writer + 10 * rounds)
            g.barrier()  # nobody writes the next round while another still reads
