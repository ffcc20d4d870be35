"""``--feature-scale``: every rank's rows rescaled in place with statistics of the whole graph, the
same values at any rank count and through any read path, in the field's own storage type."""
import os

import numpy as np
import pytest

from hpcgnn.testing.graphs import clustered_graph


def raw_counts(seed=0, num_nodes=500, feat_dim=6):
    """A graph whose features are large counts of unequal scales per column (raw counts in some unit)."""
    graph = clustered_graph(num_nodes=num_nodes, feat_dim=feat_dim, seed=seed)
    rng = np.random.default_rng(seed)
    scale = 1000.0 * (1 + np.arange(feat_dim))
    graph.ndata["feat"] = (rng.poisson(3.0, (num_nodes, feat_dim)) * scale).astype(np.float32)
    graph.ndata["feat"][:, -1] = 7.0  # a constant column: no deviation to divide by
    return graph


def make(comm, shared_tmp, nranks, name, feat_dtype="float32"):
    from hpcgnn.prep.partition import partition_graph

    graph = raw_counts()
    path = os.path.join(shared_tmp, f"{name}{nranks}")
    if comm.rank == 0:
        partition_graph(graph, path, nranks, "metis", feat_dtype=feat_dtype)
    comm.barrier()
    return path, graph.ndata["feat"].astype(np.float64)


def every_row(graph):
    """Every node's feature row in original-id order, read through the field's windows."""
    from hpcgnn.store import float_rows

    tensor = graph.ndata["feat"]
    gids = np.arange(graph.num_nodes)
    orig = np.concatenate(graph.comm.allgather(np.asarray(graph.orig_id)))
    rows = float_rows(tensor.gather(gids), tensor.encoding).numpy().astype(np.float64)
    out = np.empty_like(rows)
    out[orig] = rows
    return out


@pytest.mark.mpi(sizes=(1, 2))
def test_standard_and_row_scaling_use_the_whole_graph(nranks, comm, shared_tmp):
    from hpcgnn import DistGraph
    from hpcgnn.graph.feature_scale import scale_features

    path, raw = make(comm, shared_tmp, nranks, "fs")
    std = raw.std(axis=0)
    expected = {"standard": (raw - raw.mean(axis=0)) / np.where(std > 0, std, 1.0),
                "row": raw / np.abs(raw).sum(axis=1, keepdims=True),
                "none": raw}
    expected["auto"] = expected["row"]  # no negative value: counts
    for mode, want in expected.items():
        with DistGraph(path, comm) as graph:
            note = scale_features(graph, mode)
            assert note["feature_scale"] == mode and note.get("feature_scale_applied") == (
                "row" if mode == "auto" else None)
            got = every_row(graph)  # remote rows included: the writes are visible to every rank
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    standard = expected["standard"]
    assert np.allclose(standard[:, :-1].mean(axis=0), 0, atol=1e-6)
    assert np.allclose(standard[:, :-1].std(axis=0), 1, atol=1e-6) and np.all(standard[:, -1] == 0)


@pytest.mark.mpi(sizes=(2,))
def test_auto_standardises_signed_features(nranks, comm, shared_tmp):
    from hpcgnn import DistGraph
    from hpcgnn.graph.feature_scale import scale_features
    from hpcgnn.prep.partition import partition_graph

    graph = clustered_graph(num_nodes=400, seed=3)
    graph.ndata["feat"] = graph.ndata["feat"] * 1000 + 50  # signed measurements in a large unit
    raw = graph.ndata["feat"].astype(np.float64)
    path = os.path.join(shared_tmp, "signed")
    if comm.rank == 0:
        partition_graph(graph, path, nranks, "metis")
    comm.barrier()
    with DistGraph(path, comm) as dist:
        assert scale_features(dist, "auto")["feature_scale_applied"] == "standard"
        np.testing.assert_allclose(every_row(dist), (raw - raw.mean(axis=0)) / raw.std(axis=0), rtol=1e-5,
                                   atol=1e-5)


@pytest.mark.mpi(sizes=(2,))
def test_scaling_keeps_the_storage_type(nranks, comm, shared_tmp):
    from hpcgnn import DistGraph
    from hpcgnn.graph.feature_scale import scale_features

    for feat_dtype in ("bfloat16", "float16"):
        path, raw = make(comm, shared_tmp, nranks, f"fs_{feat_dtype}", feat_dtype=feat_dtype)
        with DistGraph(path, comm) as graph:
            dtype, encoding = graph.ndata["feat"].dtype, graph.ndata["feat"].encoding
            scale_features(graph, "standard")
            assert (graph.ndata["feat"].dtype, graph.ndata["feat"].encoding) == (dtype, encoding)
            got = every_row(graph)
        std = raw.std(axis=0)
        want = (raw - raw.mean(axis=0)) / np.where(std > 0, std, 1.0)
        np.testing.assert_allclose(got, want, atol=0.05)  # 8 (bfloat16) or 11 (float16) significant bits


def test_an_unknown_scale_is_one_line():
    from hpcgnn.graph.feature_scale import scale_features
    from hpcgnn.runtime.errors import InputError

    with pytest.raises(InputError, match=r"ckpt.pt: field 'feature_scale': must be one of auto, standard, row, none "
                                         r"\(value minmax\)"):
        scale_features(None, "minmax", where="ckpt.pt")


def test_the_flag_lists_the_module_s_choices(tmp_path):
    from hpcgnn.graph.feature_scale import FEATURE_SCALES
    from hpcgnn.training.config import FEATURE_SCALES as FLAG_CHOICES
    from hpcgnn.training.config import parse_train_config

    assert FLAG_CHOICES == FEATURE_SCALES
    assert parse_train_config(["--data", str(tmp_path), "--feature-scale", "row"]).input.feature_scale == "row"
