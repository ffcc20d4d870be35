"""Compact feature storage (``partition --feat-dtype``): bfloat16 rounding as torch does it, the
2-byte rows written, read back through both window routes and fed to training as float32."""
import json
import os

import numpy as np
import pytest
import torch

from hpcgnn.format.feat_dtype import bfloat16_bits, bfloat16_values, encode
from hpcgnn.runtime.comm import FORCE_RMA_ENV
from hpcgnn.runtime.errors import InputError
from hpcgnn.testing.datasets import partition_once
from hpcgnn.testing.graphs import clustered_graph


def test_bfloat16_bits_round_to_nearest_even_as_torch_does():
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.standard_normal(10_000).astype(np.float32) * 10.0 ** rng.integers(-30, 30, 10_000),
                             np.float32([0.0, -0.0, 1.0, 1 + 2 ** -8, 1 + 3 * 2 ** -8, np.inf, -np.inf, 3.4e38])])
    want = torch.from_numpy(values).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    assert np.array_equal(bfloat16_bits(values), want)
    assert np.array_equal(bfloat16_values(want), torch.from_numpy(values).to(torch.bfloat16).float().numpy())
    assert encode(np.float32([0.5, -2.0]), "float16").dtype == np.float16
    assert encode(values, "float32").dtype == np.float32
    with pytest.raises(InputError, match="--feat-dtype.*float16.*value 70000"):
        encode(np.float32([1.0, 70000.0]), "float16", "x.npz")


def partitioned(comm, shared_tmp, nranks, feat_dtype):
    graph = clustered_graph(num_nodes=800, p_inside=0.9, feat_dim=12)
    graph.ndata["feat"] = (graph.ndata["feat"] * np.float32(np.pi)).astype(np.float32)  # not bf16-exact
    return partition_once(comm, shared_tmp, graph, nranks, f"feat_{feat_dtype}_", feat_dtype=feat_dtype), graph


@pytest.mark.mpi(sizes=(4,))
def test_two_byte_features_read_back_as_their_rounded_values(nranks, comm, shared_tmp, monkeypatch):
    """bfloat16 through shared memory and through RMA, float16 through RMA (one launch): the
    stored dtype and encoding, gathered, indexed and fetched rows all decode to the rounded values."""
    from hpcgnn import DistGraph
    from hpcgnn.loading.fetch import FieldFetch
    from hpcgnn.sampling import NeighborSampler
    from hpcgnn.store import float_rows

    for feat_dtype, route in (("bfloat16", "shm"), ("bfloat16", "rma"), ("float16", "rma")):
        monkeypatch.setenv(FORCE_RMA_ENV, "1" if route == "rma" else "0")
        path, graph = partitioned(comm, shared_tmp, nranks, feat_dtype)
        with open(os.path.join(path, "meta.json")) as fh:
            spec = json.load(fh)["node_fields"]["feat"]
        assert spec["dtype"] == ("uint16" if feat_dtype == "bfloat16" else "float16")
        assert spec.get("encoding") == ("bfloat16" if feat_dtype == "bfloat16" else None)
        rounded = torch.from_numpy(graph.ndata["feat"]).to(getattr(torch, feat_dtype)).float().numpy()
        with DistGraph(path, comm) as g:
            feat = g.ndata["feat"]
            assert feat.dtype.itemsize == 2 and feat.window.row_bytes == 24
            gids = np.random.default_rng(comm.rank).integers(0, g.num_nodes, 200)
            decoded = float_rows(feat.gather(gids), feat.encoding)
            assert decoded.dtype == torch.float32
            orig = _orig(path)
            assert np.array_equal(decoded.numpy(), rounded[orig[gids]])
            assert np.array_equal(feat[gids].numpy(), decoded.numpy())  # indexing decodes too
            assert not np.array_equal(decoded.numpy(), graph.ndata["feat"][orig[gids]])  # really rounded
            batch = FieldFetch(g)(NeighborSampler([3]).sample(g, np.arange(*g.local_nodes)[:20], seed=1))
            assert batch.feat.dtype == torch.float32
            assert np.array_equal(batch.feat.numpy(), rounded[orig[batch.input_gids]])


def _orig(path):
    from hpcgnn.testing.datasets import oracle

    return oracle(path)[0]


@pytest.mark.mpi(sizes=(2,))
def test_training_on_bfloat16_features_learns(nranks, comm, shared_tmp):
    from hpcgnn.testing.training import assert_learns
    from hpcgnn.training.config import parse_train_config

    path, _ = partitioned(comm, shared_tmp, nranks, "bfloat16")
    assert_learns(comm, parse_train_config(["--data", path, "--fanouts", "5,5", "--batch-size", "50", "--hidden", "32",
                                    "--epochs", "8", "--eval-every", "8", "--no-progress", "--prefetch", "1",
                                    "--lr", "0.01", "--feature-scale", "none"]), 0.55)  # chance: 0.25


def test_a_bad_encoding_in_meta_json_is_refused(tmp_path):
    from hpcgnn.format import ondisk
    from hpcgnn.prep.partition import partition_graph

    path = str(tmp_path / "d")
    partition_graph(clustered_graph(num_nodes=100, avg_degree=4), path, 1, "metis", feat_dtype="bfloat16")
    meta_path = os.path.join(path, "meta.json")
    with open(meta_path) as fh:
        meta = json.load(fh)
    for field in ("bfloat8", "float16"):
        meta["node_fields"]["feat"]["encoding"] = field
        with open(meta_path, "w") as fh:
            json.dump(meta, fh)
        with pytest.raises(InputError, match="node_fields.feat.encoding"):
            ondisk.read_meta(path)
    meta["node_fields"]["feat"].update(encoding="bfloat16", dtype="float32")
    with open(meta_path, "w") as fh:
        json.dump(meta, fh)
    with pytest.raises(InputError, match="node_fields.feat.encoding"):
        ondisk.read_meta(path)
