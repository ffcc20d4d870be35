"""R ranks on a P-part dataset: each rank holds P / R consecutive parts as one shard where R
divides P, else one of R even ranges of the node ids (beginning or ending inside a part); every
read by global id equals the files', through shared memory and the RMA route; training on a
many-part dataset equals one process's; a shard too large for its machine stops before loading."""
import os

import numpy as np
import pytest

from hpcgnn.format import ondisk
from hpcgnn.format.part_group import shard_node_starts
from hpcgnn.format.schema import ETYPE
from hpcgnn.runtime.comm import FORCE_RMA_ENV
from hpcgnn.runtime.errors import InputError
from hpcgnn.testing.datasets import input_eids, make_dataset, oracle, partition_once
from hpcgnn.testing.training import one_process_reference
from tests.prep.test_typed_partition import dense, typed_test_graph


@pytest.mark.mpi(sizes=(1, 2, 4))
@pytest.mark.parametrize("parts", [3, 4, 12])
def test_ranks_holding_several_parts_read_any_node(nranks, comm, shared_tmp, parts, monkeypatch):
    from hpcgnn import DistGraph

    path, graph = make_dataset(comm, shared_tmp, parts, num_nodes=600)
    meta = ondisk.read_meta(path)
    orig, indptr, indices = oracle(path)
    edge_origin = input_eids(path)
    starts = shard_node_starts(meta, nranks)
    if parts % nranks == 0:  # whole parts: every (P/R)-th part start
        assert np.array_equal(starts, meta["node_starts"][::parts // nranks])
    else:  # even ranges of the ids
        assert np.abs(np.diff(starts) - 600 / nranks).max() < 1
    for route in ("shm", "rma"):
        monkeypatch.setenv(FORCE_RMA_ENV, "1" if route == "rma" else "0")
        with DistGraph(path, comm) as g:
            assert np.array_equal(g.book.starts, starts)
            assert np.array_equal(g.edge_book.starts, indptr[starts])  # a shard's edges follow its nodes
            start, end = g.local_nodes
            assert (start, end) == (starts[comm.rank], starts[comm.rank + 1])
            # this rank's shard: its segments' rows in part order, one CSC over them
            assert np.array_equal(g.orig_id, orig[start:end])
            assert np.array_equal(g.indptr, indptr[start:end + 1] - indptr[start])
            assert np.array_equal(g.indices, indices[indptr[start]:indptr[end]])
            rng = np.random.default_rng(comm.rank)
            for gids in (rng.integers(0, g.num_nodes, 300), np.arange(g.num_nodes), np.zeros(0, np.int64)):
                for name in ("feat", "label", "train_mask"):
                    assert np.array_equal(g.ndata[name].gather(gids), graph.ndata[name][orig[gids]]), (route, name)
                offsets, src, eids = g.in_edges(gids)
                assert np.array_equal(np.diff(offsets), indptr[gids + 1] - indptr[gids])
                assert np.array_equal(src, np.concatenate([indices[indptr[v]:indptr[v + 1]] for v in gids])
                                      if len(gids) else [])
                assert np.array_equal(g.edata["weight"].gather(eids), graph.edata["weight"][edge_origin[eids]])
            # the dataset's fingerprint hashes the parts, not the shards
            assert g.part_digests() == comm.bcast(g.part_digests(), root=0)


@pytest.mark.mpi(sizes=(1, 2))
@pytest.mark.parametrize("parts", [3, 4])
def test_typed_shards_of_several_parts_read_by_type_id(nranks, comm, shared_tmp, parts):
    """A typed dataset: each type's ids are numbered in global id order, so a rank's range of ids
    holds one contiguous range of every type's ids, also where it begins inside a part."""
    from hpcgnn import DistGraph

    graph = typed_test_graph()
    path = partition_once(comm, shared_tmp, graph, parts, "typed-groups")
    orig, _, _ = oracle(path)
    edge_origin = input_eids(path)
    with DistGraph(path, comm) as g:
        rng = np.random.default_rng(comm.rank)
        for node_type, fields in graph.typed_fields.items():
            t = graph.schema.type_index(node_type)
            count = g.layout.num_nodes_of(t)
            for field, values in fields.items():
                tensor = g.typed_ndata[node_type][field]
                types, tids = g.layout.type_ids(np.arange(g.num_nodes))
                below = [np.count_nonzero(types[:b] == t) for b in g.book.starts]  # type-t nodes before each shard
                assert np.array_equal(tensor.book.starts, below)
                mine = np.arange(*tensor.book.part_range(comm.rank))
                want = dense(values)[orig[g.layout.gids_of(t, mine)] - graph.type_offsets[t]]
                assert np.array_equal(tensor.local, want)
                for tids in (rng.integers(0, count, 200), np.arange(count)):
                    want = dense(values)[orig[g.layout.gids_of(t, tids)] - graph.type_offsets[t]]
                    assert np.array_equal(tensor.gather(tids), want), (node_type, field)
        eids = np.arange(g.num_edges)
        assert np.array_equal(g.edata[ETYPE].gather(eids), graph.edata[ETYPE][edge_origin[eids]])


@pytest.mark.mpi(sizes=(1, 2))
def test_a_bad_value_in_a_grouped_part_names_that_parts_file(nranks, comm, shared_tmp):
    """Each part's values are checked on its own rows, so the error names the part holding them."""
    import h5py

    from hpcgnn import DistGraph

    path, _ = make_dataset(comm, shared_tmp, 4, name="badlabel", num_nodes=300)
    meta = ondisk.read_meta(path)
    last = ondisk.part_path(path, meta, 3)
    if comm.rank == 0:
        with h5py.File(last, "r+") as h5:
            label = h5["label"][()]
            label[0] = 10_000_000
            h5["label"][...] = label
    comm.barrier()
    with pytest.raises(InputError, match=rf"{os.path.basename(last)}: field 'label': .*\(value 10000000\)"):
        DistGraph(path, comm)


@pytest.mark.mpi(sizes=(1, 2))
@pytest.mark.parametrize("parts", [3, 4])
def test_training_on_a_many_part_dataset_equals_one_process(nranks, comm, shared_tmp, parts):
    """Full neighbourhoods, one batch per step: the ranks' averaged gradient is one process's, so
    R ranks on a 3- or 4-part dataset train the parameters of one process on a 1-part dataset."""
    from hpcgnn.prep.partition import partition_graph
    from hpcgnn.testing.graphs import clustered_graph
    from hpcgnn.training.config import parse_train_config
    from hpcgnn.training.loop import run

    graph = clustered_graph(num_nodes=400, avg_degree=6)
    train = np.zeros(400, dtype=bool)
    train[np.random.default_rng(1).choice(400, 80, replace=False)] = True
    graph.ndata["train_mask"] = train
    single, many = os.path.join(shared_tmp, "single"), os.path.join(shared_tmp, f"many{parts}")
    if comm.rank == 0:
        partition_graph(graph, single, 1, "metis")
        partition_graph(graph, many, parts, "metis")
    comm.barrier()
    common = ["--fanouts", "all,all", "--batch-size", "1000", "--dropout", "0", "--epochs", "3", "--lr", "0.01",
              "--eval-every", "0", "--hidden", "8", "--no-progress", "--prefetch", "0"]
    model, history = run(parse_train_config(["--data", many, *common]), comm)
    params, losses = one_process_reference(comm, single, common)
    assert np.allclose([h["loss"] for h in history], losses, rtol=1e-5, atol=1e-6)
    mine = np.concatenate([p.detach().numpy().reshape(-1) for p in model.parameters()])
    assert np.allclose(mine, params, rtol=1e-4, atol=1e-5)


@pytest.mark.mpi(sizes=(2,))
def test_shards_larger_than_the_machines_memory_stop_before_any_window(nranks, comm, shared_tmp, monkeypatch):
    """The ranks of one machine would together hold more than it has available: one line naming
    each rank's parts and bytes, on every rank, before a window is allocated."""
    from hpcgnn import DistGraph

    path, _ = make_dataset(comm, shared_tmp, 4, num_nodes=600)
    monkeypatch.setattr("hpcgnn.graph.dist_graph.available_memory", lambda: 1000)
    first = 2 * comm.rank
    with pytest.raises(InputError, match=rf"meta\.json: field 'num_parts': rank {comm.rank} would hold parts "
                                         rf"{first}-{first + 1} \(0\.00 GiB\) and the 2 ranks on \S+ 0\.00 GiB, more "
                                         r"than its 0\.00 GiB available: run on more machines .*\(value 4\)"):
        DistGraph(path, comm)
    monkeypatch.setattr("hpcgnn.graph.dist_graph.available_memory", lambda: 10**12)
    with DistGraph(path, comm) as g:
        assert g.parts == range(first, first + 2)


@pytest.mark.mpi(sizes=(2,))
@pytest.mark.parametrize("negatives_kind", ["corrupt", "uniform"])
def test_held_out_edges_follow_their_destination_into_the_shards(nranks, comm, shared_tmp, negatives_kind):
    """A link dataset of 3 parts on 2 ranks: each rank holds the held-out edges whose destination it
    owns, and together the ranks hold every part's, each once."""
    from hpcgnn import DistGraph
    from hpcgnn.testing.datasets import make_link_dataset

    path, _ = make_link_dataset(comm, shared_tmp, 3, name=f"link-{negatives_kind}", negatives_kind=negatives_kind)
    meta = ondisk.read_meta(path)
    names = ondisk.link_arrays(meta)
    with DistGraph(path, comm) as g:
        for split in ondisk.LINK_SPLITS:
            mine = dict(zip(names, g.link[split], strict=True))
            assert ((mine["dst"] >= g.local_nodes[0]) & (mine["dst"] < g.local_nodes[1])).all()
            everyone = comm.allgather(mine)
            stored = [ondisk.read_part(path, meta, p) for p in range(3)]

            def table(columns):  # one row per held-out edge: its source, destination, negatives
                return np.unique(np.column_stack([np.asarray(c).reshape(len(c), -1) for c in columns]), axis=0)

            want = table([np.concatenate([part[f"{ondisk.LINK_PREFIX}{split}_{name}"] for part in stored])
                          for name in names])
            got = table([np.concatenate([held[name] for held in everyone]) for name in names])
            count = sum(len(held["dst"]) for held in everyone)
            assert np.array_equal(got, want) and count == sum(len(part[f"{ondisk.LINK_PREFIX}{split}_dst"])
                                                              for part in stored), split


def test_a_shard_boundary_inside_a_part_checks_the_offsets_it_cuts_at(tmp_path):
    """A range beginning inside a part reads the part's CSC offsets there before the part's values
    are checked: a corrupt offset is one line naming the file, not a wrong slice."""
    import h5py

    from hpcgnn.format.part_group import PartGroup
    from hpcgnn.prep.partition import partition_graph
    from hpcgnn.testing.graphs import clustered_graph

    partition_graph(clustered_graph(num_nodes=200), str(tmp_path / "ds"), 2, "random")
    meta = ondisk.read_meta(tmp_path / "ds")
    middle = meta["node_starts"][1] // 2
    with PartGroup(tmp_path / "ds", meta, middle, meta["node_starts"][2]) as shard:
        assert shard.edge_start == int(ondisk.read_part(tmp_path / "ds", meta, 0)["indptr"][middle])
    with h5py.File(ondisk.part_path(tmp_path / "ds", meta, 0), "r+") as h5:
        h5["indptr"][middle] = 10**9
    with pytest.raises(InputError, match=r"part-00000\.h5: field 'indptr': offsets of nodes \d+ and \d+ must rise"):
        PartGroup(tmp_path / "ds", meta, middle, meta["node_starts"][2])
