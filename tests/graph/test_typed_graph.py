"""DistGraph on a typed dataset: the schema and the (part, type) layout from meta.json, per-type
node fields sharded by type id and readable from any rank (shared memory and the RMA route),
each edge's relation; a homogeneous dataset seen as the one-type case."""
import os

import numpy as np
import pytest

from hpcgnn.format import ondisk
from hpcgnn.format.schema import ETYPE, Schema, TypeLayout
from hpcgnn.runtime.comm import FORCE_RMA_ENV
from hpcgnn.testing.datasets import input_eids, make_dataset, oracle, partition_once
from tests.prep.test_typed_partition import dense, typed_test_graph


@pytest.mark.mpi(sizes=(1, 2, 4))
def test_typed_fields_read_by_type_id_from_any_rank(nranks, comm, shared_tmp, monkeypatch):
    """Every per-type field, the labels and each edge's relation read back from any rank, and a write
    seen by every rank, through shared memory and through the RMA route (both in one launch)."""
    from hpcgnn import DistGraph

    graph = typed_test_graph()
    path = partition_once(comm, shared_tmp, graph, nranks, "typed-metis")
    orig, _, _ = oracle(path)
    edge_origin = input_eids(path)
    meta = ondisk.read_meta(path)
    for route in ("shm", "rma"):
        monkeypatch.setenv(FORCE_RMA_ENV, "1" if route == "rma" else "0")
        with DistGraph(path, comm) as g:
            assert g.schema == graph.schema and g.is_typed
            assert np.array_equal(g.layout.type_counts, meta["schema"]["type_counts"])
            assert np.array_equal(g.layout.node_starts, g.book.starts)
            assert {t: sorted(f) for t, f in g.typed_ndata.items()} == {"paper": ["feat"], "author": ["feat", "year"]}
            rng = np.random.default_rng(comm.rank)
            for node_type, fields in graph.typed_fields.items():
                t = graph.schema.type_index(node_type)
                count = g.layout.num_nodes_of(t)
                start, end = g.layout.block_range(comm.rank, t)
                for field, values in fields.items():
                    tensor = g.typed_ndata[node_type][field]
                    assert tensor.shape == (count, *values.shape[1:])
                    assert np.array_equal(tensor.book.starts, g.layout.type_starts[t])
                    # this rank's shard: its own block of the type, in id order
                    assert np.array_equal(tensor.local, dense(values)[orig[start:end] - graph.type_offsets[t]])
                    for tids in (rng.integers(0, count, 200), np.arange(count), np.zeros(0, np.int64)):
                        want = dense(values)[orig[g.layout.gids_of(t, tids)] - graph.type_offsets[t]]
                        assert np.array_equal(tensor.gather(tids), want), (node_type, field)
            gids = rng.integers(0, g.num_nodes, 300)
            assert np.array_equal(g.ndata["label"].gather(gids), graph.ndata["label"][orig[gids]])
            eids = rng.integers(0, g.num_edges, 300)
            assert np.array_equal(g.edata[ETYPE].gather(eids), graph.edata[ETYPE][edge_origin[eids]])
            # a write to another rank's typed rows is seen by every rank after the graph's barrier
            g.barrier()  # nobody writes while another still reads
            year = g.typed_ndata["author"]["year"]
            target = (comm.rank + 1) % nranks
            rows = np.arange(*year.book.part_range(target))
            year[rows] = np.full(rows.shape[0], comm.rank, dtype=np.int64)
            g.barrier()
            writer = (year.book.owner(np.arange(year.shape[0])) - 1) % nranks
            assert np.array_equal(year.gather(np.arange(year.shape[0])), writer)
            g.barrier()
        assert g.typed_ndata == {}


@pytest.mark.mpi(sizes=(2,))
def test_homogeneous_dataset_is_the_one_type_case(nranks, comm, shared_tmp):
    from hpcgnn import DistGraph

    path, graph = make_dataset(comm, shared_tmp, nranks, num_nodes=200)
    with DistGraph(path, comm) as g:
        assert g.schema == Schema.homogeneous() and g.typed_ndata == {} and not g.is_typed
        assert isinstance(g.layout, TypeLayout) and np.array_equal(g.layout.node_starts, g.book.starts)
        types, tids = g.layout.type_ids(np.arange(g.num_nodes))
        assert not types.any() and np.array_equal(tids, np.arange(g.num_nodes))
        assert ETYPE not in g.edata and sorted(g.ndata) == sorted(graph.ndata)


def spoiled_copy(comm, path, copy, spoil):
    """Collective over comm. Rank 0 copies the dataset ``path`` to ``copy`` and rewrites part 1's
    relation index as ``spoil(indptr, etype)`` returns it."""
    import shutil

    import h5py

    if comm.rank == 0:
        shutil.copytree(path, copy)
        with h5py.File(os.path.join(copy, "part-00001.h5"), "r+") as h5:
            h5["edge_etype"][...] = spoil(h5["indptr"][()], h5["edge_etype"][()])
    comm.barrier()
    return copy


def out_of_range(indptr, values):
    values[-1] = 6
    return values


def one_row_reversed(indptr, values):
    row = next(i for i in range(indptr.shape[0] - 1)
               if values[indptr[i]] != values[indptr[i + 1] - 1])  # a row of two relations
    values[indptr[row]:indptr[row + 1]] = values[indptr[row]:indptr[row + 1]][::-1]
    return values


@pytest.mark.mpi(sizes=(2,))
def test_a_bad_relation_index_fails_every_rank(nranks, comm, shared_tmp):
    """Loading checks each edge's relation index (one pass): an index out of range in part 1 is
    refused on every rank, naming part 1's file; so is a row whose relations fall (the per-relation
    sampler finds a relation's run of a row by binary search), while a fall at a row's start is the
    next node, and fine: the dataset as written loads."""
    from hpcgnn import DistGraph
    from hpcgnn.runtime.errors import InputError

    path = partition_once(comm, shared_tmp, typed_test_graph(), nranks, "typed-random", "random")
    bad = spoiled_copy(comm, path, os.path.join(shared_tmp, "typed-bad-etype"), out_of_range)
    with pytest.raises(InputError, match=r"part-00001.h5: field 'edge_etype': relation index outside \[0, 6\)"):
        DistGraph(bad, comm)
    unordered = spoiled_copy(comm, path, os.path.join(shared_tmp, "typed-unordered-etype"), one_row_reversed)
    with pytest.raises(InputError, match=r"part-00001.h5: field 'edge_etype': in-edges not grouped by relation in "
                                         r"ascending order"):
        DistGraph(unordered, comm)
    DistGraph(path, comm).close()
