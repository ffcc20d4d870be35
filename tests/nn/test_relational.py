"""R-GCN and R-GAT layers, their stacks and the per-type input layer, against dense per-relation
references written with explicit loops over relations (float64)."""
import numpy as np
import pytest
import torch
from torch.nn import functional as F

from hpcgnn import nn as hnn
from hpcgnn.loading.typed_rows import TypedRows
from hpcgnn.nn.config import ModelConfig
from hpcgnn.nn.relational import RelationalAdjacency, relational_adjacency
from hpcgnn.nn.typed_model import TypedModel
from hpcgnn.runtime.errors import InputError
from hpcgnn.sampling import Block

RELATIONS = 3


def typed_block(rng, num_src=40, num_dst=12, relations=RELATIONS, max_per_relation=4):
    """A block whose destinations have 0..max distinct sources per relation, each destination's
    edges grouped by relation ascending (as the per-relation sampler gives them); destination 0
    has no edges, relation ``relations - 1`` none at all when ``relations > 2``."""
    indptr, src, etype = [0], [], []
    for i in range(num_dst):
        for r in range(relations):
            count = 0 if i == 0 or (relations > 2 and r == relations - 1) else rng.integers(0, max_per_relation + 1)
            src.extend(rng.choice(num_src, count, replace=False).tolist())
            etype.extend([r] * count)
        indptr.append(len(src))
    block = Block(num_src, num_dst, np.array(indptr, np.int64), np.array(src, np.int64),
                  np.arange(len(src), dtype=np.int64))
    block.etype = np.array(etype, np.int64)
    return block


def dense_relations(block, relations):
    """``A[r]``: [num_dst, num_src] float64, 1 where an r-edge leads from the source to the destination."""
    a = torch.zeros(relations, block.num_dst, block.num_src, dtype=torch.float64)
    a[torch.from_numpy(block.etype), torch.from_numpy(block.dst_index()), torch.from_numpy(block.src_pos)] += 1
    return a


def explicit_weights(layer):
    """Every relation's W_r from the layer's raw parameters, one relation at a time (float64)."""
    weights = []
    for r in range(layer.num_relations):
        if layer.regularizer == "basis":
            w = sum(layer.coefficients[r, b].double() * layer.bases[b].double() for b in range(layer.num_bases))
        elif layer.regularizer == "block":
            w = torch.block_diag(*[layer.blocks[r, b].double() for b in range(layer.num_bases)])
        else:
            w = layer.weight[r].double()
        weights.append(w)
    return weights


def rgcn_reference(layer, block, h):
    a = dense_relations(block, layer.num_relations)
    h = h.double()
    out = h[: block.num_dst] @ layer.loop_weight.double().T + layer.bias.double()
    for r, w in enumerate(explicit_weights(layer)):
        count = a[r].sum(1, keepdim=True)
        mean = torch.where(count > 0, a[r] / count.clamp(min=1), torch.zeros(()))
        out = out + (mean @ h) @ w.T
    return out


def rgat_reference(layer, block, h):
    a = dense_relations(block, layer.num_relations)
    h = h.double()
    heads, dim = layer.heads, layer.out_dim
    out = torch.zeros(block.num_dst, heads * dim, dtype=torch.float64)
    if layer.loop_weight is not None:
        out = out + h[: block.num_dst] @ layer.loop_weight.double().T
    for r in range(layer.num_relations):
        z = (h @ layer.weight[r].double().T).view(-1, heads, dim)
        score_src = (z * layer.attn_src[r].double()).sum(-1)
        score_dst = (z[: block.num_dst] * layer.attn_dst[r].double()).sum(-1)
        for k in range(heads):
            logits = F.leaky_relu(score_src[None, :, k] + score_dst[:, None, k], layer.negative_slope)
            logits = logits.masked_fill(a[r] == 0, float("-inf"))
            alpha = torch.nan_to_num(torch.softmax(logits, dim=1))  # a row without r-edges: no message
            out[:, k * dim:(k + 1) * dim] += alpha @ z[:, k]
    out = out + layer.bias.double()
    return out if layer.concat else out.view(-1, heads, dim).mean(1)


def make_rgcn(regularizer):
    return hnn.RGCNConv(8, 6, RELATIONS, regularizer, {"basis": 2, "block": 2, "none": 0}[regularizer])


LAYERS = {"rgcn-basis": (lambda: make_rgcn("basis"), rgcn_reference),
          "rgcn-block": (lambda: make_rgcn("block"), rgcn_reference),
          "rgcn-none": (lambda: make_rgcn("none"), rgcn_reference),
          "rgat-hidden": (lambda: hnn.RGATConv(8, 5, RELATIONS, heads=3), rgat_reference),
          "rgat-output": (lambda: hnn.RGATConv(8, 5, RELATIONS, heads=3, concat=False), rgat_reference),
          "rgat-mlperf": (lambda: hnn.RGATConv(8, 5, RELATIONS, heads=2, self_loop=False), rgat_reference)}


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_and_gradients_equal_the_dense_per_relation_reference(name):
    make, reference = LAYERS[name]
    torch.manual_seed(0)
    layer = make()
    block = typed_block(np.random.default_rng(1))
    h = torch.randn(block.num_src, 8, requires_grad=True)
    out = layer(hnn.BlockTensors(block), h)
    expected = reference(layer, block, h)
    assert out.dtype == torch.float32 and out.shape == expected.shape
    torch.testing.assert_close(out.double(), expected.detach(), rtol=1e-5, atol=1e-5)
    # the kernels compute in float32 (no float64 build for gradcheck): the dense reference's
    # float64 gradients, of the input rows and of every parameter, are the oracle
    upstream = torch.randn_like(out)
    grads = torch.autograd.grad((out * upstream).sum(), [h, *layer.parameters()])
    expected_grads = torch.autograd.grad((expected * upstream.double()).sum(), [h, *layer.parameters()])
    for got, want in zip(grads, expected_grads):
        torch.testing.assert_close(got.double(), want.double(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["rgcn-basis", "rgat-hidden"])
def test_bf16_layer_is_close_to_the_reference(name):
    make, reference = LAYERS[name]
    torch.manual_seed(0)
    layer = make()
    block = typed_block(np.random.default_rng(2))
    h = torch.randn(block.num_src, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        first = layer(hnn.BlockTensors(block), h)  # an input layer: float32 rows in
        second = layer(hnn.BlockTensors(block), h.bfloat16())  # a hidden layer: bfloat16 rows in
    expected = reference(layer, block, h).detach()
    for out in (first, second):
        assert out.dtype == torch.bfloat16
        error = (out.double() - expected).norm() / expected.norm()
        assert error < 2e-2, error


@pytest.mark.parametrize("regularizer", ["basis", "block"])
def test_decompositions_give_the_dense_weights_they_imply(regularizer):
    torch.manual_seed(3)
    layer = hnn.RGCNConv(12, 8, 4, regularizer, 2 if regularizer == "block" else 3)
    dense = layer.relation_weights()
    assert dense.shape == (4, 8, 12)
    for r, w in enumerate(explicit_weights(layer)):
        torch.testing.assert_close(dense[r].double(), w.detach(), rtol=1e-6, atol=1e-7)
    if regularizer == "block":
        # off the diagonal blocks every W_r is zero
        assert torch.count_nonzero(dense[:, :4, 6:]) == 0 and torch.count_nonzero(dense[:, 4:, :6]) == 0


def test_one_relation_rgcn_equals_sage_mean_with_copied_weights():
    torch.manual_seed(4)
    block = typed_block(np.random.default_rng(5), relations=1)
    sage = hnn.SAGEConv(8, 6, "mean")
    rgcn = hnn.RGCNConv(8, 6, 1, "none")
    with torch.no_grad():
        rgcn.weight[0].copy_(sage.fc_neigh.weight)
        rgcn.loop_weight.copy_(sage.fc_self.weight)
        rgcn.bias.copy_(sage.fc_self.bias)
    h = torch.randn(block.num_src, 8)
    expected = sage(hnn.BlockTensors(block), h)
    torch.testing.assert_close(rgcn(hnn.BlockTensors(block), h), expected, rtol=1e-5, atol=1e-6)
    block.etype = None  # a homogeneous block is the one-relation case
    torch.testing.assert_close(rgcn(hnn.BlockTensors(block), h), expected, rtol=1e-5, atol=1e-6)


def test_adjacency_groups_pairs_by_relation_and_sorts_unsorted_edges():
    rng = np.random.default_rng(6)
    block = typed_block(rng)
    adj = RelationalAdjacency(block, RELATIONS)
    a = dense_relations(block, RELATIONS)
    pairs = [(r, i) for r in range(RELATIONS) for i in range(block.num_dst) if a[r, i].sum() > 0]
    assert list(zip(adj.pair_rel.tolist(), adj.pair_dst.tolist())) == pairs
    assert adj.present == [0, 1] and adj.relation_rows[2] == 0
    # each relation projects only the sources its edges read
    sources = adj.sources.split(adj.source_counts)
    for r in range(RELATIONS):
        assert sources[r].tolist() == torch.nonzero(a[r].sum(0)).flatten().tolist()
    # edges of a destination in another order: the same layer output
    shuffled = Block(block.num_src, block.num_dst, block.indptr, block.src_pos.copy(), block.eids)
    shuffled.etype = block.etype.copy()
    for i in range(block.num_dst):
        lo, hi = block.indptr[i], block.indptr[i + 1]
        perm = lo + rng.permutation(hi - lo)
        shuffled.src_pos[lo:hi], shuffled.etype[lo:hi] = block.src_pos[perm], block.etype[perm]
    torch.manual_seed(7)
    for layer in (make_rgcn("basis"), hnn.RGATConv(8, 5, RELATIONS, heads=2)):
        h = torch.randn(block.num_src, 8)
        torch.testing.assert_close(layer(hnn.BlockTensors(shuffled), h), layer(hnn.BlockTensors(block), h),
                                   rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="relation 1 in a model of 1 relations"):
        RelationalAdjacency(block, 1)


def test_block_tensors_keep_the_adjacency_and_empty_blocks_give_the_self_term():
    block = typed_block(np.random.default_rng(8))
    tensors = hnn.BlockTensors(block)
    assert relational_adjacency(tensors, RELATIONS) is relational_adjacency(tensors, RELATIONS)
    empty = Block(5, 3, np.zeros(4, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), etype=np.zeros(0))
    h = torch.randn(5, 8)
    rgcn = make_rgcn("none")
    torch.testing.assert_close(rgcn(hnn.BlockTensors(empty), h), h[:3] @ rgcn.loop_weight.T + rgcn.bias)
    rgat = hnn.RGATConv(8, 5, RELATIONS, heads=3, self_loop=False)
    torch.testing.assert_close(rgat(hnn.BlockTensors(empty), h), rgat.bias.expand(3, -1))


def test_type_projection_places_every_type_at_its_positions():
    torch.manual_seed(9)
    projection = hnn.TypeProjection([3, 0, 5], 4)
    types = torch.tensor([2, 0, 1, 2, 2, 0, 1])
    rows = {0: torch.randn(2, 3), 1: torch.randn(2, 4, requires_grad=True), 2: torch.randn(3, 5)}
    out = projection(types, rows)
    seen = {0: 0, 1: 0, 2: 0}
    for k, t in enumerate(types.tolist()):
        x = rows[t][seen[t]]
        seen[t] += 1
        expected = x if t == 1 else projection.maps[t](x)  # type 1 has no features: its embedding as it is
        torch.testing.assert_close(out[k], expected)
    out[2].sum().backward()  # the embedding row at position 2 is type 1's first
    assert rows[1].grad[0].tolist() == [1.0] * 4 and rows[1].grad[1].tolist() == [0.0] * 4
    with pytest.raises(ValueError, match="rows of shape"):
        projection(types, {**rows, 0: torch.randn(3, 3)})
    with pytest.raises(ValueError, match="no input"):
        projection(types, {0: rows[0], 2: rows[2]})


def stack_blocks(rng, sizes=(60, 20, 6), relations=RELATIONS):
    blocks = []
    for num_src, num_dst in zip(sizes, sizes[1:]):
        blocks.append(typed_block(rng, num_src, num_dst, relations, max_per_relation=3))
    return blocks


@pytest.mark.parametrize("model", ["rgcn", "rgat"])
def test_registered_stacks_match_layer_wise_forward_and_bf16(model):
    torch.manual_seed(10)
    config = ModelConfig(model=model, hidden=8, layers=2, heads=2, bases=2, dropout=0.3, norm="layer")
    net = hnn.build_model(config, 10, 4, num_relations=RELATIONS)
    assert isinstance(net, hnn.RGCN if model == "rgcn" else hnn.RGAT)
    assert all(layer.num_relations == RELATIONS for layer in net.layers)
    blocks = stack_blocks(np.random.default_rng(11))
    x = torch.randn(60, 10)
    net.eval()
    out = net(blocks, x)
    assert out.shape == (6, 4) and out.dtype == torch.float32
    # layer-wise inference runs the same layers one block at a time
    h = x
    for i, block in enumerate(blocks):
        h = net.layer_forward(i, hnn.BlockTensors(block), h)
    torch.testing.assert_close(h, out)
    hnn.set_precision(net, "bf16")
    low = net(blocks, x)
    assert low.dtype == torch.float32
    assert (low - out).norm() / out.norm() < 3e-2
    net.train()
    net(blocks, x).sum().backward()
    assert all(p.grad is not None for p in net.layers[-1].parameters())


def test_registry_passes_relations_only_to_relational_models():
    assert {"rgcn", "rgat"} <= hnn.RELATIONAL and "sage" not in hnn.RELATIONAL
    sage = hnn.build_model(ModelConfig(model="sage", layers=2), 10, 4, num_relations=5)
    assert isinstance(sage, hnn.SAGE)
    one = hnn.build_model(ModelConfig(model="rgcn", layers=2, regularizer="none"), 10, 4)
    assert one.layers[0].num_relations == 1
    blocky = hnn.build_model(ModelConfig(model="rgcn", layers=2, hidden=8, regularizer="block", bases=4), 10, 6, 3)
    # the block count divides the hidden layer's widths, not the input's 10 or the 6 classes
    assert [layer.regularizer for layer in blocky.layers] == ["none", "none"]
    blocky = hnn.build_model(ModelConfig(model="rgcn", layers=3, hidden=8, regularizer="block", bases=4), 10, 6, 3)
    assert [layer.regularizer for layer in blocky.layers] == ["none", "block", "none"]
    with pytest.raises(InputError, match="--bases"):
        hnn.build_model(ModelConfig(model="rgcn", layers=2, hidden=8, regularizer="block", bases=3), 10, 4, 3)
    no_loop = hnn.build_model(ModelConfig(model="rgat", layers=2, no_self_loop=True), 10, 4, 3)
    assert all(layer.loop_weight is None for layer in no_loop.layers)


def typed_input_block(rng, types, num_dst, source_type, max_per_relation=3):
    """A block over input rows of node types ``types`` (the first ``num_dst`` the destinations):
    relation ``r``'s edges read sources of type ``source_type[r]`` (None: of any type)."""
    indptr, src, etype = [0], [], []
    for i in range(num_dst):
        for r, t in enumerate(source_type):
            pool = np.arange(types.shape[0]) if t is None else np.flatnonzero(types == t)
            count = 0 if i == 0 else rng.integers(0, min(max_per_relation, pool.shape[0]) + 1)
            src.extend(rng.choice(pool, count, replace=False).tolist())
            etype.extend([r] * count)
        indptr.append(len(src))
    return Block(types.shape[0], num_dst, np.array(indptr, np.int64), np.array(src, np.int64),
                 np.arange(len(src), dtype=np.int64), etype=np.array(etype, np.int64))


@pytest.mark.parametrize("self_loop", [True, False])
@pytest.mark.parametrize("mixed", [False, True])
def test_rgcn_reads_unprojected_typed_rows_as_it_reads_projected_ones(self_loop, mixed):
    # the input layer maps each relation's mean of unprojected rows by W_r P_t (plus W_r c_t) and
    # each destination's own row by W_0 P_t: the same outputs and gradients, parameters and
    # embedding rows alike, as projecting every row first; a relation whose sources mix types
    # (mixed) takes the projected route
    rng = np.random.default_rng(12)
    types = torch.from_numpy(rng.integers(0, 3, 50))
    widths = [3, 0, 11]  # type 1 has no features: embedding rows of the hidden width; type 2 wider than it
    blocks = [typed_input_block(rng, types.numpy(), 20, [0, 1, 2, None if mixed else 0]),
              typed_input_block(rng, types[:20].numpy(), 6, [0, 1, 2, 0])]
    counts = torch.bincount(types, minlength=3).tolist()
    results = []
    for projected_first in (True, False):
        torch.manual_seed(13)
        projection = hnn.TypeProjection(widths, 8)
        stack = hnn.RGCN(8, 8, 4, 4, 2, "basis", 2, self_loop, dropout=0.0)
        if projected_first:
            stack.reads_projected_rows = False
        model = TypedModel(projection, stack)
        rows = {t: torch.randn(counts[t], widths[t] or 8, generator=torch.Generator().manual_seed(t),
                               requires_grad=widths[t] == 0) for t in range(3)}
        out = model(blocks, TypedRows(types, {}, rows))
        upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(14))
        params = list(model.parameters())
        grads = torch.autograd.grad((out * upstream).sum(), params + [rows[1]])
        hnn.set_precision(model, "bf16")
        low = model(blocks, TypedRows(types, {}, rows)).detach()
        results.append((out, grads, low))
    (want, want_grads, _), (got, got_grads, low) = results
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-6)
    assert low.dtype == torch.float32 and (low - want.detach()).norm() / want.norm() < 3e-2
