"""Per-relation neighbour sampling: the kernel against a numpy oracle of its streams, the graph-level
primitives against a serial oracle of the raw edge list at 1, 2 and 4 ranks on both routes, and the
``relational`` sampler's blocks and options."""

import numpy as np
import pytest

from hpcgnn import _sample
from hpcgnn.runtime.comm import FORCE_RMA_ENV
from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.rng import GOLDEN_GAMMA, MASK64, mix64
from hpcgnn.testing.reference import ROW_MULTIPLIER, SEED_MULTIPLIER, TWO_POW_MINUS_53

RELATION_MULTIPLIER = 0xA0761D6478BD642F


# ------------------------------------------------------------------ oracle
def run_below(seed, row, relation, draws, bounds):
    """``floor(u * bound)`` of draws ``draws`` of the stream of ``relation``'s run in row ``row``."""
    stream = (seed * SEED_MULTIPLIER + row * ROW_MULTIPLIER + relation * RELATION_MULTIPLIER + GOLDEN_GAMMA) & MASK64
    bits = mix64(np.uint64(stream) + np.asarray(draws, dtype=np.uint64)) >> np.uint64(11)
    return np.floor(bits.astype(np.float64) * TWO_POW_MINUS_53 * np.asarray(bounds, np.float64)).astype(np.int64)


def run_picks(seed, row, relation, length, fanout, replace):
    """In-run indices the kernel picks from one relation's run (the module docstring's modes)."""
    if fanout == 0 or length == 0:
        return np.empty(0, np.int64)
    if fanout == -1 or (not replace and length <= fanout):
        return np.arange(length)
    if replace:
        return run_below(seed, row, relation, np.arange(fanout), length)
    first = length - fanout
    candidates = np.arange(first, length)
    picks = []
    for candidate, draw in zip(candidates, run_below(seed, row, relation, candidates - first, candidates + 1)):
        picks.append(int(candidate) if draw in picks else int(draw))
    return np.array(picks, dtype=np.int64)


def reference_by_relation(begin, degree, relation, fanouts, replace, seed):
    """``(counts, positions, relations)`` of ``sample_positions_by_relation``, row by row, run by run."""
    seed &= MASK64
    offsets = np.concatenate([[0], np.cumsum(degree)])
    counts, positions, relations = [], [], []
    for row, start in enumerate(begin):
        rel = np.asarray(relation[offsets[row]:offsets[row + 1]], dtype=np.int64)
        count = 0
        for r in np.unique(rel):
            at = np.flatnonzero(rel == r)
            picks = run_picks(seed, row, int(r), at.shape[0], int(fanouts[r]), replace)
            positions.append(start + at[0] + picks)
            relations.append(np.full(picks.shape[0], r))
            count += picks.shape[0]
        counts.append(count)
    cat = lambda parts: np.concatenate(parts + [np.empty(0, np.int64)]).astype(np.int64)  # noqa: E731
    return np.array(counts, np.int64), cat(positions), cat(relations)


def grouped_rows(rng, num_rows, num_relations, max_run, dtype=np.int8):
    """Rows whose candidates are runs of ascending relation ids (some rows empty, some relations absent)."""
    begin = rng.integers(0, 10**9, num_rows)
    runs = rng.integers(0, max_run + 1, (num_rows, num_relations)) * (rng.random((num_rows, num_relations)) < 0.6)
    degree = runs.sum(axis=1)
    relation = np.concatenate([np.repeat(np.arange(num_relations), r) for r in runs]).astype(dtype)
    return begin, degree, relation, runs


# ------------------------------------------------------------------ kernel
@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int64])
def test_kernel_matches_the_oracle_bit_for_bit(replace, dtype):
    rng = np.random.default_rng(3 + replace)
    num_relations = 7
    begin, degree, relation, runs = grouped_rows(rng, 200, num_relations, 40, dtype)
    for fanouts in ([1, 2, 3, 5, 16, 17, 25], [-1, 0, 1, -1, 0, 30, 4], [3] * num_relations):
        fanouts = np.array(fanouts, dtype=np.int64)
        counts, positions, relations = _sample.sample_positions_by_relation(begin, degree, relation, fanouts,
                                                                           replace, 11)
        want = reference_by_relation(begin, degree, relation, fanouts, replace, 11)
        for got, expected in zip((counts, positions, relations), want):
            assert got.dtype == np.int64 and np.array_equal(got, expected), fanouts
        # the invariants, independently of the oracle: per (row, relation) the count, picks inside the run
        row = np.repeat(np.arange(begin.shape[0]), counts)
        per_run = np.zeros_like(runs)
        np.add.at(per_run, (row, relations), 1)
        full = fanouts[None, :] == -1
        want_counts = np.where(full, runs, np.where(runs > 0, fanouts[None, :], 0) if replace
                               else np.minimum(runs, fanouts[None, :]))
        assert np.array_equal(per_run, want_counts)
        run_start = np.concatenate([np.zeros((runs.shape[0], 1), np.int64), np.cumsum(runs, axis=1)[:, :-1]], axis=1)
        in_run = positions - begin[row] - run_start[row, relations]
        assert ((in_run >= 0) & (in_run < runs[row, relations])).all()
        if not replace:
            assert np.unique(positions + (row << 40)).shape[0] == positions.shape[0]  # distinct per row


def test_relation_ids_read_in_place_give_the_same_picks():
    """Rows' relation ids read from a table at ``relation_begin`` (a CSC's column, rows in any order and
    with gaps) give what the concatenated ids give."""
    rng = np.random.default_rng(8)
    begin, degree, relation, _ = grouped_rows(rng, 150, 5, 30)
    offsets = np.concatenate([[0], np.cumsum(degree)])
    order = rng.permutation(begin.shape[0])
    gaps = rng.integers(0, 4, begin.shape[0])
    table, starts, at = [], np.empty_like(degree), 0
    for row in order:
        table.append(np.full(gaps[row], 4, np.int8))  # ids of other rows' edges between the rows
        starts[row] = at + gaps[row]
        table.append(relation[offsets[row]:offsets[row + 1]])
        at = starts[row] + degree[row]
    table = np.concatenate(table)
    fanouts = np.array([1, 3, -1, 0, 20])
    for replace in (False, True):
        want = _sample.sample_positions_by_relation(begin, degree, relation, fanouts, replace, 4)
        got = _sample.sample_positions_by_relation(begin, degree, table, fanouts, replace, 4, starts)
        assert all(np.array_equal(a, b) for a, b in zip(got, want))
    with pytest.raises(ValueError, match="outside a table"):
        _sample.sample_positions_by_relation(begin[:1], np.array([5]), table[:3], fanouts, False, 4, np.array([0]))


@pytest.mark.parametrize("replace", [False, True])
def test_one_relation_gives_the_homogeneous_picks(replace):
    """A graph of one relation samples exactly as sample_positions: the typed and untyped paths agree."""
    rng = np.random.default_rng(5)
    begin = rng.integers(0, 10**9, 300)
    degree = rng.integers(0, 60, 300)
    for fanout in (-1, 0, 1, 5, 16, 17, 40):
        counts, positions = _sample.sample_positions(begin, degree, fanout, replace, 2024)
        by_rel = _sample.sample_positions_by_relation(begin, degree, np.zeros(int(degree.sum()), np.int16),
                                                     np.array([fanout]), replace, 2024)
        assert np.array_equal(by_rel[0], counts) and np.array_equal(by_rel[1], positions), fanout
        assert not by_rel[2].any()


def test_more_relations_than_the_fanout_are_each_sampled():
    """A node with in-edges of 10 relations and fanout 1 gets 10 picks, one in each relation's run."""
    lengths = np.arange(1, 11)
    relation = np.repeat(np.arange(10), lengths).astype(np.int8)
    for replace in (False, True):
        counts, positions, relations = _sample.sample_positions_by_relation(
            np.array([1000]), np.array([lengths.sum()]), relation, np.ones(10, np.int64), replace, 9)
        assert counts.tolist() == [10] and relations.tolist() == list(range(10))
        assert np.array_equal(relation[positions - 1000], relations)


def test_bad_candidates_are_refused():
    one = np.array([0])
    fan = np.array([2, 2], dtype=np.int64)
    for unordered in ([1, 0], [1, 0, 0], [0, 0, 1, 0]):  # caught where a run starts or ends
        with pytest.raises(ValueError, match="not grouped"):
            _sample.sample_positions_by_relation(one, np.array([len(unordered)]), np.array(unordered, np.int8),
                                                 fan, False, 0)
    with pytest.raises(ValueError, match="relation id 2, outside the 2 fanouts"):
        _sample.sample_positions_by_relation(one, np.array([2]), np.array([0, 2], np.int8), fan, False, 0)
    with pytest.raises(ValueError, match="relation has 2 entries, degree needs 3"):
        _sample.sample_positions_by_relation(one, np.array([3]), np.array([0, 1], np.int8), fan, False, 0)
    with pytest.raises(ValueError, match="fanouts"):
        _sample.sample_positions_by_relation(one, np.array([2]), np.array([0, 1], np.int8),
                                             np.array([2, -2]), False, 0)


# ------------------------------------------------------------ on a dataset
NUM_PAPERS = 150
HUB = 0  # paper 0 has in-edges of all 10 paper-bound relations


def relational_graph():
    """A typed graph of 12 relations: 10 into papers (the hub among their destinations), one into authors,
    one into venues."""
    from hpcgnn.prep.typed import typed_graph

    rng = np.random.default_rng(7)
    counts = {"paper": NUM_PAPERS, "author": 90, "venue": 12}
    types = list(counts)
    relations = []
    for r in range(10):
        src_type = types[r % 3]
        m = 40 + 25 * r
        dst = np.concatenate([rng.integers(0, NUM_PAPERS, m), np.full(1 + r % 3, HUB)])
        relations.append((src_type, f"r{r}", "paper", rng.integers(0, counts[src_type], dst.shape[0]), dst))
    relations.append(("paper", "r10", "author", rng.integers(0, NUM_PAPERS, 300), rng.integers(0, 90, 300)))
    relations.append(("author", "r11", "venue", rng.integers(0, 90, 120), rng.integers(0, 12, 120)))
    feat = {"paper": {"feat": rng.standard_normal((NUM_PAPERS, 4)).astype(np.float32)}}
    return typed_graph(counts, relations, typed_fields=feat, name="relational")


def raw_in_edges(graph):
    """Input edge ids of every input node's in-edges, in input order: ``(indptr, eids)``."""
    eids = np.argsort(graph.dst, kind="stable")
    indptr = np.concatenate([[0], np.cumsum(np.bincount(graph.dst, minlength=graph.num_nodes))])
    return indptr, eids


def oracle_sample(graph, seeds, fanouts, replace, seed):
    """The picks of ``seeds`` (input ids) from the raw edge list: ``(counts, input eids)``."""
    indptr, eids = raw_in_edges(graph)
    degree = np.diff(indptr)[seeds]
    relation = np.concatenate([graph.edata["etype"][eids[indptr[v]:indptr[v + 1]]] for v in seeds])
    counts, positions, _ = reference_by_relation(indptr[seeds], degree, relation, fanouts, replace, seed)
    return counts, eids[positions]


@pytest.mark.mpi(sizes=(1, 2, 4))
def test_dist_graph_matches_the_serial_oracle_on_both_routes(nranks, comm, shared_tmp, monkeypatch):
    """Same picks at 1, 2 and 4 ranks (streams are keyed by the seed's index, not the rank), local and
    remote rows alike, through shared memory and through RMA; an untyped dataset gives the picks of
    ``sample_neighbors``."""
    from hpcgnn import DistGraph
    from hpcgnn.graph.typed_sampling import in_edges_by_relation, sample_neighbors_by_relation
    from hpcgnn.testing.datasets import input_eids, make_dataset, oracle, partition_once

    graph = relational_graph()
    path = partition_once(comm, shared_tmp, graph, nranks, "relational")
    untyped, _ = make_dataset(comm, shared_tmp, nranks, num_nodes=300)
    orig, _, _ = oracle(path)
    new_id = np.argsort(orig)
    edge_origin = input_eids(path)
    rng = np.random.default_rng(1)
    seeds = np.concatenate([[HUB], rng.choice(np.arange(1, graph.num_nodes), 70, replace=False)])
    cases = [(np.full(12, 2), False, 5), (np.array([1, 0, 3, -1, 17, 2, 1, 1, 0, 4, 2, 3]), False, 6),
             (np.full(12, 1), True, 7), (np.full(12, -1), False, 8)]
    for route in ("shm", "rma"):
        monkeypatch.setenv(FORCE_RMA_ENV, "1" if route == "rma" else "0")
        with DistGraph(path, comm) as g:
            for fanouts, replace, seed in cases:
                picked, etype = sample_neighbors_by_relation(g, new_id[seeds], fanouts, replace, seed)
                counts, want = oracle_sample(graph, seeds, fanouts, replace, seed)
                assert np.array_equal(picked.counts, counts), (route, fanouts)
                assert np.array_equal(edge_origin[picked.eids], want), (route, fanouts)
                assert np.array_equal(orig[picked.src], graph.src[want])
                assert np.array_equal(etype, graph.edata["etype"][want])
                assert np.array_equal(picked.degree, np.bincount(graph.dst, minlength=graph.num_nodes)[seeds])
            # the hub: in-edges of 10 relations, fanout 1 -> one pick of each
            picked, etype = sample_neighbors_by_relation(g, new_id[[HUB]], 1, seed=3)
            assert picked.counts.tolist() == [10] and etype.tolist() == list(range(10))
            # seeds given by type: ids among each type's nodes
            types, tids = g.layout.type_ids(new_id[seeds])
            by_type = {g.schema.node_types[t]: tids[types == t] for t in np.unique(types)}
            in_type_order = np.concatenate([new_id[seeds][types == t] for t in np.unique(types)])
            for got, want in zip(sample_neighbors_by_relation(g, by_type, 2, seed=5)[0],
                                 sample_neighbors_by_relation(g, in_type_order, 2, seed=5)[0]):
                assert np.array_equal(got, want)
            # all in-edges with their relations, grouped by relation
            offsets, src, eids, etype = in_edges_by_relation(g, new_id[seeds])
            indptr, raw = raw_in_edges(graph)
            want = np.concatenate([raw[indptr[v]:indptr[v + 1]] for v in seeds])
            assert np.array_equal(np.diff(offsets), np.diff(indptr)[seeds])
            assert np.array_equal(edge_origin[eids], want) and np.array_equal(orig[src], graph.src[want])
            assert np.array_equal(etype, graph.edata["etype"][want])
        # a dataset without relations is the one-relation case: the homogeneous primitives' results
        with DistGraph(untyped, comm) as g:
            some = np.random.default_rng(0).choice(g.num_nodes, 100, replace=False)
            for fanout, replace in ((3, False), (20, False), (4, True), (-1, False)):
                picked, etype = sample_neighbors_by_relation(g, some, fanout, replace, seed=12)
                want = g.sample_neighbors(some, fanout, replace, seed=12)
                assert all(np.array_equal(a, b) for a, b in zip(picked, want)) and not etype.any()
            offsets, src, eids, etype = in_edges_by_relation(g, some)
            assert all(np.array_equal(a, b) for a, b in zip((offsets, src, eids), g.in_edges(some)))
            assert not etype.any()


@pytest.mark.mpi(sizes=(2,))
def test_sampler_blocks_carry_each_edges_relation(nranks, comm, shared_tmp):
    """Blocks of the registered sampler: every edge's etype is its stored relation, each destination's
    edges grouped by relation with that relation's fanout of the layer (by name from the options)."""
    from hpcgnn import DistGraph
    from hpcgnn.graph.typed_sampling import in_edges_by_relation
    from hpcgnn.sampling.registry import SamplerRun, sampler_spec
    from hpcgnn.testing.datasets import partition_once
    from hpcgnn.training.config import train_config

    path = partition_once(comm, shared_tmp, relational_graph(), nranks, "relational")
    config = train_config({"sampler": "relational", "fanouts": (3, 2), "relation_fanouts": "r1=0,all;r4=1;r10=all,5"})
    spec = sampler_spec("relational")
    with DistGraph(path, comm) as g:
        sampler = spec.build(g, config.sampler.options, SamplerRun(layers=2, seed=4))
        layer_fanouts = [np.full(12, 3), np.full(12, 2)]
        for layer, (r1, r4, r10) in enumerate(((0, 1, -1), (-1, 1, 5))):
            layer_fanouts[layer][[1, 4, 10]] = (r1, r4, r10)
        seeds = np.arange(*g.local_nodes)[::3]
        batch = sampler.sample(g, seeds, seed=17)
        assert sampler.sample(g, seeds, seed=17).input_gids.tolist() == batch.input_gids.tolist()
        for block, fanouts in zip(batch.blocks, layer_fanouts):
            dst = batch.input_gids[:block.num_dst]
            assert block.etype.dtype == np.int64 and block.etype.shape == block.eids.shape
            assert np.array_equal(block.etype, g.edata["etype"].gather(block.eids))
            offsets, src, eids, etype = in_edges_by_relation(g, dst)
            per_dst_relation = np.zeros((block.num_dst, 12), np.int64)
            np.add.at(per_dst_relation, (block.dst_index(), block.etype), 1)
            available = np.zeros((block.num_dst, 12), np.int64)
            np.add.at(available, (np.repeat(np.arange(block.num_dst), np.diff(offsets)), etype), 1)
            assert np.array_equal(per_dst_relation, np.where(fanouts == -1, available, np.minimum(available, fanouts)))
            for i in range(block.num_dst):  # grouped by relation, ascending
                run = block.etype[block.indptr[i]:block.indptr[i + 1]]
                assert (np.diff(run) >= 0).all()
            # every edge's source is the edge's stored source
            sources = batch.input_gids[:block.num_src][block.src_pos]
            at = np.searchsorted(eids, block.eids, sorter=np.argsort(eids))
            assert np.array_equal(sources, src[np.argsort(eids)][at])
        inference = spec.inference(config.sampler.options, 0)
        one = inference.sample(g, seeds[:5])
        assert np.array_equal(one.blocks[0].etype, in_edges_by_relation(g, seeds[:5])[3])


def test_relation_fanouts_by_name(tmp_path):
    from hpcgnn.format.schema import Schema
    from hpcgnn.sampling.relational import layer_fanouts, parse_relation_fanouts
    from hpcgnn.training.config import parse_train_config, train_config

    schema = Schema(("paper", "author"), (("paper", "cites", "paper"), ("author", "writes", "paper"),
                                          ("paper", "rev_writes", "author")))
    layers = layer_fanouts(schema, (15, 10), "cites=5,all;rev_writes=0")
    assert [x.tolist() for x in layers] == [[5, 15, 0], [-1, 10, 0]]
    assert parse_relation_fanouts(" ") == ()
    with pytest.raises(InputError, match=r"--relation-fanouts.*'cited'.*cites, writes, rev_writes"):
        layer_fanouts(schema, (15, 10), "cited=5")
    for bad in ("cites", "cites=5,x", "cites=5;cites=6", "a b=1", "cites=-2"):
        with pytest.raises(InputError, match="--relation-fanouts"):
            parse_relation_fanouts(bad)
    with pytest.raises(InputError, match=r"--relation-fanouts.*one fanout per layer \(3.*cites=5,all"):
        train_config({"sampler": "relational", "fanouts": (1, 2, 3), "relation_fanouts": "cites=5,all"})
    with pytest.raises(InputError, match="--relation-fanouts.*applies to --sampler relational only"):
        train_config({"sampler": "neighbor", "relation_fanouts": "cites=5"})
    config_file = tmp_path / "run.toml"
    config_file.write_text('sampler = "relational"\nfanouts = [15, 10, 5]\n'
                           'relation_fanouts = "cites=5,10,all;writes=2"\n')
    config = parse_train_config(["--config", str(config_file), "--data", str(tmp_path)])
    assert config.sampler.options.relation_fanouts == "cites=5,10,all;writes=2" and config.model.layers == 3
    assert [x.tolist() for x in layer_fanouts(schema, config.sampler.options.fanouts,
                                              config.sampler.options.relation_fanouts)] == \
        [[5, 2, 15], [10, 2, 10], [-1, 2, 5]]
