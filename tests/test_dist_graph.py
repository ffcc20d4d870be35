import os
import subprocess
import sys

import numpy as np
import pytest

from hpcgnn import format as fmt
from hpcgnn.comm import FORCE_RMA_ENV
from hpcgnn.errors import InputError
from tests.graphs import clustered_graph


def make_dataset(comm, shared_tmp, parts, name="ds", **graph_args):
    """Rank 0 partitions a generated graph into ``parts``; every rank gets the path and graph."""
    from hpcgnn.partition import partition_graph

    graph = clustered_graph(**graph_args)
    path = os.path.join(shared_tmp, f"{name}{parts}")
    if comm.rank == 0 and not os.path.exists(path):
        partition_graph(graph, path, parts, "metis")
    comm.barrier()
    return path, graph


def oracle(path):
    """New-id views of the dataset, from the part files: orig id of each new id, CSC."""
    meta = fmt.read_meta(path)
    parts = [fmt.read_part(path, meta, p) for p in range(meta["num_parts"])]
    orig = np.concatenate([p["orig_id"] for p in parts])
    degrees = np.concatenate([np.diff(p["indptr"]) for p in parts])
    indptr = np.concatenate([[0], np.cumsum(degrees)])
    indices = np.concatenate([p["indices"] for p in parts]).astype(np.int64)
    return orig, indptr, indices


@pytest.mark.mpi(sizes=(1, 2, 4))
@pytest.mark.parametrize("route", ["shm", "rma"])
def test_dist_graph_reads_any_node(nranks, comm, shared_tmp, route, monkeypatch):
    from hpcgnn import DistGraph

    monkeypatch.setenv(FORCE_RMA_ENV, "1" if route == "rma" else "0")
    path, graph = make_dataset(comm, shared_tmp, nranks)
    orig, indptr, indices = oracle(path)
    input_eids = _input_eids(path)
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
            assert np.array_equal(g.edata["weight"].gather(eids), graph.edata["weight"][input_eids[eids]])
        assert np.array_equal(g.in_degrees(gids), np.diff(offsets))


def _input_eids(path):
    meta = fmt.read_meta(path)
    return np.concatenate([fmt.read_part(path, meta, p)["eid"] for p in range(meta["num_parts"])]).astype(np.int64)


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


@pytest.mark.mpi(sizes=(2,))
def test_part_count_mismatch_is_a_clear_error(nranks, comm, shared_tmp):
    from hpcgnn import DistGraph

    path, _ = make_dataset(comm, shared_tmp, 3, name="three")
    with pytest.raises(InputError, match=r"num_parts.*3 parts but the job has 2 ranks"):
        DistGraph(path, comm)


def test_standalone_mode_without_mpirun(tmp_path):
    from hpcgnn.partition import partition_graph

    graph = clustered_graph(num_nodes=200)
    partition_graph(graph, tmp_path / "one", 1, "metis")
    script = ("import numpy as np; from hpcgnn import DistGraph; g = DistGraph({!r}); "
              "print(g.num_nodes, g.ndata['feat'].gather(np.arange(5)).shape); g.close()").format(str(tmp_path / "one"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI", "HYDRA", "MPI"))}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["200", "(5,", "8)"]
