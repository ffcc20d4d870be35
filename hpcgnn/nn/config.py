"""The model's part of a run's configuration: which registered model, its shape and arithmetic.

Model builders (:mod:`hpcgnn.nn.registry`) read these fields; checkpoints store them, so a model
is rebuilt from its checkpoint alone.
"""
from __future__ import annotations

from dataclasses import dataclass

from hpcgnn.runtime.flags import MAX_HEADS, MAX_LAYERS, MAX_WIDTH, Domain
from hpcgnn.runtime.options import option

#: the layers' arithmetic (hpcgnn.nn.models.PRECISIONS)
PRECISIONS = ("fp32", "bf16")
#: the layers' kernels on the CPU (hpcgnn.nn.kernels.KERNELS)
KERNELS = ("compiled", "torch")
#: what R-GCN's input is for node types without features (``--featureless``)
FEATURELESS = ("shared", "relational")
_DROPOUT = Domain(float, ge=0, lt=1)


@dataclass(frozen=True)
class ModelConfig:
    """Local. Which model (``--model``, a name in :data:`hpcgnn.nn.MODELS`), its shape, dropout,
    normalisation and arithmetic. ``layers`` is None until the run's sampler settles it
    (:func:`hpcgnn.training.config.train_config`)."""

    model: str = option("sage", "a registered model (hpcgnn.nn.MODELS): sage, gcn, gat, and on typed graphs rgcn, "
                        "rgat")
    aggregator: str = option("mean", "GraphSAGE aggregator", choices=("mean", "gcn"))
    hidden: int = option(256, "width of every hidden layer", type=Domain(int, ge=1, le=MAX_WIDTH))
    layers: int | None = option(None, "default: number of fanouts (2 for samplers without fanouts)",
                                type=Domain(int, ge=1, le=MAX_LAYERS))
    heads: int = option(4, "GAT and R-GAT attention heads (a hidden layer is --heads x --hidden wide)",
                        type=Domain(int, ge=1, le=MAX_HEADS))
    regularizer: str = option("basis", "R-GCN: how each relation's weight W_r is parametrised: basis (W_r a "
                              "learned combination of --bases shared matrices), block (W_r block-diagonal of --bases "
                              "blocks, which must divide --hidden), none (a full W_r per relation)",
                              choices=("basis", "block", "none"))
    bases: int = option(0, "R-GCN: shared matrices of --regularizer basis (0: one per relation) or diagonal blocks "
                        "of --regularizer block", type=Domain(int, ge=0, le=MAX_WIDTH))
    featureless: str = option("shared", "R-GCN on a typed graph: the input of node types without features. shared: "
                              "one learned embedding row per node (--embed-dim wide), mapped by each W_r like "
                              "features; relational: R-GCN's featureless input layer, a learned row of (relations + "
                              "1) x --hidden per node (one --hidden slice per relation, averaged over the node's "
                              "neighbours along it, and one for its own term), (relations + 1) times the embedding's "
                              "memory", choices=FEATURELESS)
    no_self_loop: bool = option(False, "R-GCN and R-GAT: leave out each node's own term W_0 h_i (MLPerf's R-GAT "
                                "has none)")
    dropout: float = option(0.5, "between layers", type=_DROPOUT)
    input_dropout: float = option(0.0, "on the input features", type=_DROPOUT)
    norm: str = option("none", "normalisation after each hidden layer", choices=("none", "batch", "layer"))
    precision: str = option("fp32", "the layers' arithmetic: bf16 runs GEMMs, activations and aggregations in "
                            "bfloat16 (float32 weights, optimizer state, losses and reductions; AMX and AVX512-BF16 "
                            "where the CPU has them)", choices=PRECISIONS)
    kernels: str = option("compiled", "the aggregation, attention and dropout kernels on the CPU: compiled (hpcgnn's "
                          "own) or torch (torch operations, the GPU's path, the same results within float rounding)",
                          choices=KERNELS)
