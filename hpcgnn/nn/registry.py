"""Models by name: ``build_model(config, in_dim, num_classes)`` for the trainer and evaluation.

A new model is a class in :mod:`hpcgnn.nn.models` (or anywhere) plus one :func:`register` call
with a builder that reads what it needs from the :class:`~hpcgnn.nn.config.ModelConfig`; the
trainer never names a model.
"""
from __future__ import annotations

from hpcgnn.nn.config import ModelConfig
from hpcgnn.nn.models import GAT, GCN, SAGE, set_precision
from hpcgnn.runtime.registry import Registry

#: name -> builder(config, in_dim, num_classes) -> model
MODELS = Registry("model")


def register(name, builder):
    """Local. Make ``builder(config, in_dim, num_classes)`` available as ``--model name``."""
    MODELS.add(name, builder)


def build_model(config: ModelConfig, in_dim: int, num_classes: int):
    """Local. The model ``config.model`` names, for ``in_dim`` input features and ``num_classes``
    outputs, shaped by ``config`` (``hidden``, ``layers``, ``dropout``, ``norm``, ``precision``)."""
    model = MODELS.named(config.model)(config, in_dim, num_classes)
    set_precision(model, config.precision)
    return model


def _common(config: ModelConfig):
    return {"dropout": config.dropout, "norm": None if config.norm == "none" else config.norm,
            "input_dropout": config.input_dropout}


register("sage", lambda c, i, o: SAGE(i, c.hidden, o, c.layers, c.aggregator, **_common(c)))
register("gcn", lambda c, i, o: GCN(i, c.hidden, o, c.layers, **_common(c)))
register("gat", lambda c, i, o: GAT(i, c.hidden, o, c.layers, c.heads, **_common(c)))
