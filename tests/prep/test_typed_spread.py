"""Typed graphs on the spread route (``--method multilevel|ldg``, ``mpirun generate hetero``):
the dataset holds every edge of every relation with its types and every per-type field row at its
type id, checked against the input graph; it is the serial partitioner's dataset for the same
part assignment; each node type's count is balanced; the hetero graph drawn on the ranks is the
serial draw, bit for bit."""
import json
import os

import numpy as np
import pytest

from hpcgnn.format import ondisk
from hpcgnn.format.schema import ETYPE
from hpcgnn.prep import inspection, partition
from hpcgnn.prep.dist.cleanup import prepare
from hpcgnn.prep.dist.generate import hetero_spread_graph
from hpcgnn.prep.dist.ingest import spread_graph
from hpcgnn.prep.dist.pipeline import partition_spread
from hpcgnn.prep.generate_hetero import hetero_graph, write_typed_npz
from hpcgnn.runtime.errors import InputError
from tests.prep.test_typed_partition import check_against_input, read_dataset, typed_test_graph

HETERO = dict(num_nodes=3000, num_edges=20000, feat_dim=8, num_classes=6, seed=2)


def parts_by_input_id(directory):
    """The part of every input node of a dataset (through ``orig_id``)."""
    meta, parts = read_dataset(directory)
    orig = np.concatenate([p["orig_id"] for p in parts])
    owner = np.repeat(np.arange(meta["num_parts"]), np.diff(meta["node_starts"]))
    assignment = np.empty(orig.shape[0], dtype=np.int64)
    assignment[orig] = owner
    return assignment


@pytest.mark.mpi(sizes=(2, 4))
def test_spread_route_writes_the_typed_dataset_of_the_input(nranks, comm, shared_tmp):
    """Rank 0's typed graph dealt out and partitioned spread over the ranks, by multilevel and by
    ldg (one launch): every edge of every relation with its types and relation, every typed
    feature row at its typed id, in-edges grouped by relation, inspect --verify clean; multilevel
    balances every node type's count."""
    for method in ("multilevel", "ldg"):
        out = os.path.join(shared_tmp, method)
        graph = spread_graph(comm, typed_test_graph() if comm.rank == 0 else None)
        assert graph.schema.node_types == ("paper", "author", "institute")
        partition_spread(comm, graph, 3, out, method, seed=1)
        if comm.rank == 0:
            meta = check_against_input(typed_test_graph(), out)
            assert meta["partitioner"]["constraints"][:3] == ["nodes@paper", "nodes@author", "nodes@institute"]
            if method == "multilevel":
                counts = np.asarray(meta["schema"]["type_counts"])
                assert (counts.max(axis=0) <= np.ceil(counts.sum(axis=0) * 1.03 / 3) + 1).all(), counts


@pytest.mark.mpi(sizes=(2, 4))
def test_spread_writer_writes_the_serial_dataset_for_the_same_assignment(nranks, comm, shared_tmp, monkeypatch):
    """The serial partitioner given the spread route's assignment writes the same part files, array
    for array, and meta.json's schema, counts, field specs and edge digest (self loops dropped
    first, so the edges are numbered anew in input order)."""
    spread_dir, serial_dir = os.path.join(shared_tmp, "spread"), os.path.join(shared_tmp, "serial")
    typed = typed_test_graph()
    typed.src[:7] = typed.dst[:7]  # self loops of cites, which --remove-self-loops drops
    graph = prepare(comm, spread_graph(comm, typed if comm.rank == 0 else None), drop_self_loops=True)
    partition_spread(comm, graph, 3, spread_dir, "multilevel", feat_dtype="bfloat16")
    if comm.rank == 0:
        assignment = parts_by_input_id(spread_dir)
        monkeypatch.setattr(partition, "assign_parts", lambda *args, **kwargs: (assignment, {"method": "given"}))
        cleaned = partition.prepare(typed, drop_self_loops=True)
        partition.partition_graph(cleaned, serial_dir, 3, feat_dtype="bfloat16")
        meta, expected = ondisk.read_meta(spread_dir), ondisk.read_meta(serial_dir)
        for key in ("version", "schema", "node_starts", "edge_starts", "node_fields", "edge_fields", "edge_digest",
                    "num_edges", "index_dtype"):
            assert json.dumps(meta[key]) == json.dumps(expected[key]), key
        for part in range(3):
            got, want = ondisk.read_part(spread_dir, meta, part), ondisk.read_part(serial_dir, expected, part)
            assert sorted(got) == sorted(want)
            for name in want:
                assert np.asarray(got[name]).dtype == np.asarray(want[name]).dtype, name
                assert np.array_equal(np.asarray(got[name]), np.asarray(want[name])), (part, name)
        assert inspection.verify(spread_dir, meta) == []


@pytest.mark.mpi(sizes=(2,))
def test_each_node_type_is_balanced(nranks, comm, shared_tmp):
    """Papers and authors in separate components: one nodes column would let the partitioner give
    each part one type; nodes@paper and nodes@author spread both."""
    out = os.path.join(shared_tmp, "ds")
    graph = typed_test_graph(papers=400, authors=400, separate=True)
    partition_spread(comm, spread_graph(comm, graph if comm.rank == 0 else None), 2, out, balance=("nodes",))
    if comm.rank == 0:
        meta = ondisk.read_meta(out)
        assert meta["partitioner"]["constraints"] == ["nodes@paper", "nodes@author"]
        counts = np.asarray(meta["schema"]["type_counts"])
        assert (counts.max(axis=0) <= 206).all(), counts  # within 3 % of 200, one node of slack
        assert meta["partitioner"]["imbalance"]["nodes@author"] <= 1.03


@pytest.mark.mpi(sizes=(2,))
def test_clean_up_across_types_is_refused_on_every_rank(nranks, comm):
    """--symmetrize, --dedup and --largest-component would mix relations: each is refused on every rank."""
    graph = spread_graph(comm, typed_test_graph() if comm.rank == 0 else None)
    for flag, option in (("--symmetrize", "symmetrize_edges"), ("--dedup", "dedup_edges"),
                         ("--largest-component", "largest_cc")):
        with pytest.raises(InputError, match=f"field '{flag}'.*not applied to a typed graph"):
            prepare(comm, graph, **{option: True})


@pytest.mark.mpi(sizes=(1, 3))
def test_hetero_drawn_on_the_ranks_is_the_serial_draw(nranks, comm):
    """Every edge at its serial id with its ends and relation, every node field and per-type row:
    the graph of a seed on any number of ranks; each rank holds only its destinations' edges."""
    graph, summary = hetero_spread_graph(comm, **HETERO)
    first, end = graph.block(comm.rank)
    assert ((graph.dst >= first) & (graph.dst < end)).all()
    pieces = comm.gather((graph.src, graph.dst, graph.eid, graph.edata[ETYPE], graph.ndata,
                          {t: f["feat"] for t, f in graph.typed_fields.items()}), root=0)
    if comm.rank == 0:
        serial = hetero_graph(**HETERO)
        src, dst, eid, etype = (np.concatenate([p[column] for p in pieces]) for column in range(4))
        order = np.argsort(eid)
        assert np.array_equal(eid[order], np.arange(serial.num_edges))
        assert np.array_equal(src[order], serial.src) and np.array_equal(dst[order], serial.dst)
        assert np.array_equal(etype[order], serial.edata[ETYPE]) and etype.dtype == serial.edata[ETYPE].dtype
        for name, values in serial.ndata.items():
            assert np.array_equal(np.concatenate([p[4][name] for p in pieces]), values), name
        for node_type, fields in serial.typed_fields.items():
            assert np.array_equal(np.concatenate([p[5][node_type] for p in pieces]), fields["feat"]), node_type
        assert summary["edges"]["rev_topic"] == int((serial.edata[ETYPE] == 7).sum())


@pytest.mark.mpi(sizes=(2, 4))
def test_generate_hetero_under_mpirun_partitions_the_serial_graph(nranks, comm, shared_tmp, capsys):
    from hpcgnn.cli.generate import main

    out = os.path.join(shared_tmp, "igbh")
    assert main(["hetero", "--nodes", "3000", "--edges", "20000", "--feat-dim", "8", "--classes", "6", "--seed", "2",
                 "--parts", "3", "--method", "multilevel", "--out", out]) == 0
    if comm.rank == 0:
        assert "hetero: 3,000 nodes, 40,000 edges, 3 parts" in capsys.readouterr().out
        meta = check_against_input(hetero_graph(**HETERO), out)
        assert meta["source"]["generator"]["method"] == "multilevel"
        assert meta["partitioner"]["imbalance"]["nodes@paper"] <= 1.03


@pytest.mark.mpi(sizes=(2,))
def test_partition_command_takes_a_typed_npz_by_multilevel(nranks, comm, shared_tmp):
    from hpcgnn.cli.partition import main

    path, out = os.path.join(shared_tmp, "igbh.npz"), os.path.join(shared_tmp, "ds")
    if comm.rank == 0:
        write_typed_npz(hetero_graph(**HETERO), path)
    comm.barrier()
    assert main([path, "--parts", "2", "--method", "multilevel", "--out", out]) == 0
    if comm.rank == 0:
        check_against_input(hetero_graph(**HETERO), out)
