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
_DROPOUT = Domain(float, ge=0, lt=1)


@dataclass(frozen=True)
class ModelConfig:
    """Local. Which model (``--model``, a name in :data:`hpcgnn.nn.MODELS`), its shape, dropout,
    normalisation and arithmetic. ``layers`` is None until the run's sampler settles it
    (:func:`hpcgnn.training.config.train_config`)."""

    model: str = option("sage", "a registered model (hpcgnn.nn.MODELS): sage, gcn, gat")
    aggregator: str = option("mean", "GraphSAGE aggregator", choices=("mean", "gcn"))
    hidden: int = option(256, "width of every hidden layer", type=Domain(int, ge=1, le=MAX_WIDTH))
    layers: int | None = option(None, "default: number of fanouts (2 for samplers without fanouts)",
                                type=Domain(int, ge=1, le=MAX_LAYERS))
    heads: int = option(4, "GAT attention heads", type=Domain(int, ge=1, le=MAX_HEADS))
    dropout: float = option(0.5, "between layers", type=_DROPOUT)
    input_dropout: float = option(0.0, "on the input features", type=_DROPOUT)
    norm: str = option("none", "normalisation after each hidden layer", choices=("none", "batch", "layer"))
    precision: str = option("fp32", "the layers' arithmetic: bf16 runs GEMMs, activations and aggregations in "
                            "bfloat16 (float32 weights, optimizer state, losses and reductions; AMX and AVX512-BF16 "
                            "where the CPU has them)", choices=PRECISIONS)
