import numpy as np
import pytest

from hpcgnn.prep.graph import Graph
from hpcgnn.prep.transform import apply_split, dedup, largest_component, prepare, remove_self_loops, symmetrize
from hpcgnn.runtime.errors import InputError


def toy():
    # 0<->1 twice, 1->2, 2->2 loop, 3->4 (second component), 5 isolated
    src = np.array([0, 1, 0, 1, 2, 3])
    dst = np.array([1, 0, 1, 2, 2, 4])
    label = np.array([0, 1, 0, 1, 0, -1])
    return Graph(6, src, dst, {"label": label, "x": np.arange(6.0)}, {"w": np.arange(6.0)})


def edges(g):
    return sorted(zip(g.src.tolist(), g.dst.tolist()))


def test_remove_self_loops_and_dedup_keep_first_and_order():
    g = dedup(remove_self_loops(toy()))
    assert list(zip(g.src, g.dst)) == [(0, 1), (1, 0), (1, 2), (3, 4)]
    assert g.edata["w"].tolist() == [0.0, 1.0, 3.0, 5.0]


def test_symmetrize_is_simple_bidirected_graph_with_fields():
    g = symmetrize(toy())
    assert g.symmetric
    assert edges(g) == [(0, 1), (1, 0), (1, 2), (2, 1), (2, 2), (3, 4), (4, 3)]
    weight = dict(zip(zip(g.src.tolist(), g.dst.tolist()), g.edata["w"].tolist()))
    assert weight[(2, 1)] == weight[(1, 2)] == 3.0 and weight[(4, 3)] == 5.0
    assert np.array_equal(np.diff(g.dst) >= 0, np.ones(g.num_edges - 1, bool))  # CSC order


def test_largest_component_renumbers_and_filters_fields():
    g = largest_component(toy())
    assert g.num_nodes == 3 and g.ndata["x"].tolist() == [0.0, 1.0, 2.0]
    assert edges(g) == [(0, 1), (0, 1), (1, 0), (1, 2), (2, 2)]


def test_random_split_is_seeded_disjoint_and_skips_unlabelled():
    rng = np.random.default_rng(0)
    label = rng.integers(-1, 3, 1000)
    g = Graph(1000, np.array([0]), np.array([1]), {"label": label})
    a = apply_split(g, "0.5,0.25,0.25", seed=3)
    b = apply_split(g, "0.5,0.25,0.25", seed=3)
    c = apply_split(g, "0.5,0.25,0.25", seed=4)
    masks = [a.ndata[m] for m in ("train_mask", "val_mask", "test_mask")]
    assert all(np.array_equal(a.ndata[m], b.ndata[m]) for m in ("train_mask", "val_mask", "test_mask"))
    assert not np.array_equal(a.ndata["train_mask"], c.ndata["train_mask"])
    assert (sum(m.astype(int) for m in masks) <= 1).all()
    covered = masks[0] | masks[1] | masks[2]
    assert np.array_equal(covered, label >= 0)
    assert abs(masks[0].sum() - 0.5 * (label >= 0).sum()) <= 1


def test_per_class_split_is_the_shchur_protocol():
    label = np.repeat(np.arange(3), [60, 70, 80])
    g = apply_split(Graph(210, np.array([0]), np.array([1]), {"label": label}), "per-class:20,30", seed=1)
    for cls in range(3):
        assert g.ndata["train_mask"][label == cls].sum() == 20
        assert g.ndata["val_mask"][label == cls].sum() == 30
    assert g.ndata["test_mask"].sum() == 210 - 150


@pytest.mark.parametrize("spec", ["0.7,0.7,0.1", "a,b,c", "0.5,0.5", "per-class:x"])
def test_bad_split_spec_is_an_input_error(spec):
    with pytest.raises(InputError, match="--split"):
        apply_split(toy(), spec)


def test_split_without_labels_is_an_input_error():
    g = Graph(3, np.array([0]), np.array([1]))
    with pytest.raises(InputError, match="label"):
        apply_split(g, "0.5,0.5,0")


def test_prepare_applies_options_in_documented_order():
    g = prepare(toy(), symmetrize_edges=True, drop_self_loops=True, largest_cc=True, split="per-class:1,0")
    assert g.num_nodes == 3 and (2, 2) not in edges(g) and g.ndata["train_mask"].sum() == 2
