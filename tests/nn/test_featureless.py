"""R-GCN's featureless input layer (``--featureless relational``): a featureless node's learned row
holds one slice per relation and one for its own term, read without one-hot rows or W_r. Checked
against a dense float64 reference written per destination and relation, and against R-GCN's
one-hot layer itself."""
import numpy as np
import pytest
import torch

from hpcgnn import nn as hnn
from hpcgnn.loading.typed_rows import TypedRows
from hpcgnn.nn.config import ModelConfig
from hpcgnn.nn.relational import ProjectedRows
from hpcgnn.nn.typed_model import TypedModel
from hpcgnn.runtime.errors import InputError
from hpcgnn.sampling import Block

WIDTHS = (3, 0, 9)  # type 1 has no features; type 2 is wider than OUT (projected before it is summed)
OUT = 6


def typed_block(rng, types, num_dst, relations, max_per_relation=3):
    """A block over input rows of node ``types`` (the first ``num_dst`` the destinations), each
    destination's edges grouped by relation ascending; sources of any type, so a relation mixes
    featured and featureless sources; destination 0 has no edges, the last relation none at all."""
    indptr, src, etype = [0], [], []
    for i in range(num_dst):
        for r in range(relations):
            count = 0 if i == 0 or (relations > 2 and r == relations - 1) else rng.integers(0, max_per_relation + 1)
            src.extend(rng.choice(types.shape[0], count, replace=False).tolist())
            etype.extend([r] * count)
        indptr.append(len(src))
    return Block(types.shape[0], num_dst, np.array(indptr, np.int64), np.array(src, np.int64),
                 np.arange(len(src), dtype=np.int64), etype=np.array(etype, np.int64))


def typed_inputs(rng, num_src, relations, width=OUT):
    types = torch.from_numpy(rng.integers(0, len(WIDTHS), num_src))
    counts = torch.bincount(types, minlength=len(WIDTHS)).tolist()
    rows = {t: torch.randn(counts[t], WIDTHS[t] or (relations + 1) * width,
                           generator=torch.Generator().manual_seed(t), requires_grad=not WIDTHS[t])
            for t in range(len(WIDTHS))}
    return types, rows


def reference(layer, projection, block, types, rows):
    """Destination by destination, relation by relation: the mean over the r-neighbours of each
    one's message (a featured source: W_r (P_t x + c_t); a featureless one: its slice r), plus the
    node's own term (W_0 (P_t x + c_t), or its last slice) and the bias (float64)."""
    relations, width = layer.num_relations, layer.out_features
    weights = [w.double() for w in layer.relation_weights()] + [layer.loop_weight.double()]
    local = np.zeros(types.shape[0], dtype=np.int64)
    for t in range(len(WIDTHS)):
        at = np.flatnonzero(types.numpy() == t)
        local[at] = np.arange(at.shape[0])

    def message(j, slot):
        t = int(types[j])
        row = rows[t][local[j]].double()
        if not WIDTHS[t]:
            return row.view(relations + 1, width)[slot]
        linear = projection.maps[t]
        return weights[slot] @ (linear.weight.double() @ row + linear.bias.double())

    etype = block.etype
    outputs = []
    for i in range(block.num_dst):
        out = layer.bias.double() + message(i, relations)
        edges = np.arange(block.indptr[i], block.indptr[i + 1])
        for r in range(relations):
            mine = edges[etype[edges] == r]
            if mine.shape[0]:
                out = out + sum(message(int(block.src_pos[e]), r) for e in mine) / mine.shape[0]
        outputs.append(out)
    return torch.stack(outputs)


@pytest.mark.parametrize("regularizer", ["basis", "none"])
def test_featureless_layer_and_gradients_equal_the_dense_reference(regularizer):
    rng = np.random.default_rng(3)
    relations = 4
    types, rows = typed_inputs(rng, 40, relations)
    block = typed_block(rng, types.numpy(), 14, relations)
    torch.manual_seed(4)
    projection = hnn.TypeProjection(WIDTHS, OUT, featureless_slices=relations + 1)
    layer = hnn.RGCNConv(OUT, OUT, relations, regularizer, 2 if regularizer == "basis" else 0)
    with torch.no_grad():
        layer.bias.normal_()
    got = layer(block, projection.lazy(types, rows))
    want = reference(layer, projection, block, types, rows)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    upstream = torch.randn(got.shape, generator=torch.Generator().manual_seed(5))
    leaves = list(layer.parameters()) + list(projection.parameters()) + [rows[1]]
    got_grads = torch.autograd.grad((got * upstream).sum(), leaves)
    want_grads = torch.autograd.grad((want * upstream.double()).sum(), leaves)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g.double(), w.double(), rtol=1e-4, atol=1e-5)
    # a featureless node's gradient reaches only the slices it was read through
    assert rows[1].shape[0] and torch.count_nonzero(got_grads[-1]) < got_grads[-1].numel()


@pytest.mark.parametrize("relations", [1, 3])
@pytest.mark.parametrize("self_loop", [True, False])
def test_featureless_layer_is_rgcn_on_one_hot_inputs(relations, self_loop):
    # with every node featureless, the layer is R-GCN's input layer on one-hot rows whose W_r's
    # column j is node j's slice r (and W_0's its last slice): one relation gives
    # h_i = b + e_i[own] + mean_{j in N(i)} e_j[0]
    rng = np.random.default_rng(6)
    num_src, num_dst = 30, 10
    block = typed_block(rng, np.zeros(num_src, np.int64), num_dst, relations)
    slots = torch.randn(num_src, relations + 1, OUT, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    layer = hnn.RGCNConv(num_src, OUT, relations, "none", self_loop=self_loop)
    one_hot = hnn.RGCNConv(num_src, OUT, relations, "none", self_loop=self_loop)
    with torch.no_grad():
        layer.bias.normal_()
        one_hot.bias.copy_(layer.bias)
        one_hot.weight.copy_(slots[:, :relations].permute(1, 2, 0))
        if self_loop:
            one_hot.loop_weight.copy_(slots[:, relations].T)
    projection = hnn.TypeProjection([0], OUT, featureless_slices=relations + 1)
    rows = {0: slots.float().reshape(num_src, -1)}
    got = layer(block, ProjectedRows(projection, torch.zeros(num_src, dtype=torch.int64), rows))
    want = one_hot(block, torch.eye(num_src))
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    if relations == 1:
        a = torch.zeros(num_dst, num_src, dtype=torch.float64)
        a[torch.from_numpy(block.dst_index()), torch.from_numpy(block.src_pos)] = 1
        mean = a / a.sum(1, keepdim=True).clamp(min=1)
        explicit = layer.bias.double() + mean @ slots[:, 0] + (slots[:num_dst, 1] if self_loop else 0)
        torch.testing.assert_close(got.double(), explicit, rtol=1e-5, atol=1e-5)


def test_stack_runs_layer_wise_and_in_bf16_and_refuses_a_dense_projection():
    rng = np.random.default_rng(8)
    relations, hidden = 3, 8
    types, rows = typed_inputs(rng, 50, relations, hidden)
    blocks = [typed_block(rng, types.numpy(), 20, relations), typed_block(rng, types[:20].numpy(), 6, relations)]
    torch.manual_seed(9)
    config = ModelConfig(model="rgcn", layers=2, hidden=hidden, dropout=0.0, featureless="relational")
    model = TypedModel(hnn.TypeProjection(WIDTHS, hidden, relations + 1),
                       hnn.build_model(config, hidden, 4, num_relations=relations))
    model.eval()
    out = model(blocks, TypedRows(types, {}, rows))
    hidden_rows = model.layer_forward(0, blocks[0], TypedRows(types, {}, rows))
    torch.testing.assert_close(model.layer_forward(1, blocks[1], hidden_rows), out)
    hnn.set_precision(model, "bf16")
    low = model(blocks, TypedRows(types, {}, rows)).detach()
    assert low.dtype == torch.float32 and (low - out.detach()).norm() / out.norm() < 3e-2
    with pytest.raises(ValueError, match="--featureless relational"):
        model.projection(types, rows)
    with pytest.raises(ValueError, match="width"):  # rows of another layer's width
        model.stack.layers[0](blocks[0], model.projection.lazy(types, {**rows, 1: rows[1][:, :-1]}))


class _Graph:
    class schema:
        num_relations = 5


@pytest.mark.parametrize("flags, field", [(dict(model="rgat"), "--featureless"),
                                          (dict(layers=1, fanouts=5), "--featureless"),
                                          (dict(input_dropout=0.2), "--featureless"),
                                          (dict(embed_dim=16), "--embed-dim")])
def test_relational_rows_are_refused_in_one_line_where_they_cannot_serve(flags, field, tmp_path):
    from hpcgnn.tasks.node import relational_embed_dim
    from hpcgnn.training.config import parse_train_config

    args = ["--data", str(tmp_path), "--model", "rgcn", "--hidden", "8", "--featureless", "relational"]
    for name, value in flags.items():
        args += [f"--{name.replace('_', '-')}", str(value)]
    config = parse_train_config(args)
    with pytest.raises(InputError) as refused:
        relational_embed_dim(config, _Graph())
    assert refused.value.field == field and "\n" not in str(refused.value)
    assert relational_embed_dim(parse_train_config(["--data", str(tmp_path), "--model", "rgcn", "--hidden", "8",
                                                    "--featureless", "relational"]), _Graph()) == 6 * 8
