"""The one-pass per-relation hop over in-memory CSC tables (``_sample.sample_hop_by_relation``, the
shared-memory route of :func:`hpcgnn.graph.typed_sampling.sample_neighbors_by_relation`) against the
numpy oracle of the per-relation streams and against the positions kernel plus a gather."""

import numpy as np
import pytest

from hpcgnn import _sample
from tests.sampling.test_relational import grouped_rows, reference_by_relation


def part_tables(rng, node_counts, num_relations, source_dtype, relation_dtype):
    """Parts laid out back to back in one table each, at row offsets a node table gives them (a
    padding row of other data before every part): ``(part_starts, indptr, indptr_row, indices,
    indices_row, relation, relation_row, edge_starts)`` and per part its ``(indptr, relation ids)``."""
    part_starts = np.concatenate([[0], np.cumsum(node_counts)]).astype(np.int64)
    indptrs, relations, sources = [], [], []
    for n in node_counts:
        _, degree, relation, _ = grouped_rows(rng, n, num_relations, 25, relation_dtype)
        indptrs.append(np.concatenate([[0], np.cumsum(degree)]).astype(np.int64))
        relations.append(relation)
        sources.append(rng.integers(0, part_starts[-1], relation.shape[0]).astype(source_dtype))

    def back_to_back(arrays, pad_value):
        rows, table, at = [], [], 0
        for array in arrays:
            table += [np.full(3, pad_value, array.dtype), array]
            rows.append(at + 3)
            at += 3 + array.shape[0]
        return np.concatenate(table), np.array(rows, np.int64)

    indptr, indptr_row = back_to_back(indptrs, -7)
    indices, indices_row = back_to_back(sources, 5)
    relation, relation_row = back_to_back(relations, num_relations - 1)
    edge_starts = np.concatenate([[0], np.cumsum([r.shape[0] for r in relations])]).astype(np.int64)
    tables = (part_starts, indptr, indptr_row, indices, indices_row, relation, relation_row, edge_starts)
    return tables, indptrs, relations, sources


@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("source_dtype,relation_dtype", [(np.int32, np.int8), (np.int64, np.int16)])
def test_hop_matches_the_oracle_and_the_positions_kernel(replace, source_dtype, relation_dtype):
    """Counts, sources, global edge ids, relations and degrees of nodes of three parts (repeats
    included) equal the oracle's picks read from each node's own part."""
    rng = np.random.default_rng(21 + replace)
    num_relations = 6
    tables, indptrs, relations, sources = part_tables(rng, [40, 25, 60], num_relations, source_dtype,
                                                      relation_dtype)
    part_starts, edge_starts = tables[0], tables[-1]
    gids = np.concatenate([rng.integers(0, part_starts[-1], 150), [0, part_starts[-1] - 1, 41, 41]])
    owner = np.searchsorted(part_starts, gids, side="right") - 1
    lid = gids - part_starts[owner]
    begin = np.array([indptrs[p][v] for p, v in zip(owner, lid)], np.int64)
    degree = np.array([indptrs[p][v + 1] - indptrs[p][v] for p, v in zip(owner, lid)], np.int64)
    row_relations = np.concatenate([relations[p][b:b + d] for p, b, d in zip(owner, begin, degree)])
    for fanouts in ([1, 2, 3, 17, 0, -1], [3] * num_relations, [-1] * num_relations):
        fanouts = np.array(fanouts, np.int64)
        counts, src, eids, rel, deg = _sample.sample_hop_by_relation(gids, *tables[:-1], edge_starts, fanouts,
                                                                     replace, 99)
        want_counts, positions, want_rel = reference_by_relation(begin, degree, row_relations, fanouts, replace, 99)
        edge_owner = np.repeat(owner, want_counts)
        assert np.array_equal(counts, want_counts) and np.array_equal(rel, want_rel) and np.array_equal(deg, degree)
        assert np.array_equal(eids, edge_starts[edge_owner] + positions)
        assert np.array_equal(src, [sources[p][q] for p, q in zip(edge_owner, positions)])
        assert all(a.dtype == np.int64 for a in (counts, src, eids, rel, deg))
        # the positions kernel on the same rows, read in place, picks the same edges
        counts2, positions2, rel2 = _sample.sample_positions_by_relation(
            begin, degree, tables[5], fanouts, replace, 99, tables[6][owner] + begin)
        assert np.array_equal(counts2, counts) and np.array_equal(positions2, positions) and np.array_equal(rel2, rel)


def test_hop_refuses_ids_and_rows_outside_the_tables():
    rng = np.random.default_rng(4)
    tables, _, _, _ = part_tables(rng, [5, 5], 3, np.int32, np.int8)
    fanouts = np.array([2, 2, 2], np.int64)
    for gid in (-1, 10):
        with pytest.raises(ValueError, match=rf"gids\[0\] = {gid} is outside the ids \[0, 10\)"):
            _sample.sample_hop_by_relation(np.array([gid]), *tables, fanouts, False, 0)
    short = list(tables)
    short[5] = tables[5][:tables[6][1]]  # the second part's relation ids cut off
    with pytest.raises(ValueError, match="row lies outside the tables"):
        _sample.sample_hop_by_relation(np.arange(10), *short, fanouts, False, 0)
    unordered = list(tables)
    unordered[5] = tables[5].copy()
    unordered[5][tables[6][0]:] = np.where(np.arange(unordered[5].shape[0] - tables[6][0]) % 2, 0, 2)
    with pytest.raises(ValueError, match="not grouped by ascending relation id"):
        _sample.sample_hop_by_relation(np.arange(10), *unordered, fanouts, False, 0)
    with pytest.raises(ValueError, match="outside the 2 fanouts"):
        _sample.sample_hop_by_relation(np.arange(10), *tables, fanouts[:2], False, 0)
