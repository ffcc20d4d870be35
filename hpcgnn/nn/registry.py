"""Models by name: ``build_model(config, in_dim, num_classes, num_relations)`` for the trainer and
evaluation.

A new model is a class in :mod:`hpcgnn.nn.models` (or anywhere) plus one :func:`register` call
with a builder that reads what it needs from the :class:`~hpcgnn.nn.config.ModelConfig`; the
trainer never names a model. A model registered ``relational=True`` (R-GCN, R-GAT) has a weight
per relation, so its builder also takes the graph's number of relations; the other models treat
every edge alike, on a typed graph too.
"""
from __future__ import annotations

from hpcgnn.nn.config import ModelConfig
from hpcgnn.nn.kernels import set_kernels
from hpcgnn.nn.models import GAT, GCN, SAGE, set_precision
from hpcgnn.nn.relational_models import RGAT, RGCN
from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.registry import Registry

#: name -> builder(config, in_dim, num_classes) -> model, or for the names in RELATIONAL
#: builder(config, in_dim, num_classes, num_relations)
MODELS = Registry("model")
#: the registered models whose builders take the number of relations
RELATIONAL = set()


def register(name, builder, relational=False):
    """Local. Make ``builder(config, in_dim, num_classes)`` available as ``--model name``; with
    ``relational``, ``builder(config, in_dim, num_classes, num_relations)``."""
    MODELS.add(name, builder)
    if relational:
        RELATIONAL.add(name)


def build_model(config: ModelConfig, in_dim: int, num_classes: int, num_relations: int | None = None):
    """Local. The model ``config.model`` names, for ``in_dim`` input features and ``num_classes``
    outputs, shaped by ``config`` (``hidden``, ``layers``, ``dropout``, ``norm``, ``precision``, ``kernels``).
    ``num_relations`` reaches relational models only (None: one relation, a homogeneous graph)."""
    builder = MODELS.named(config.model)
    if config.model in RELATIONAL:
        model = builder(config, in_dim, num_classes, 1 if num_relations is None else int(num_relations))
    else:
        model = builder(config, in_dim, num_classes)
    set_precision(model, config.precision)
    set_kernels(model, config.kernels)
    return model


def _common(config: ModelConfig):
    return {"dropout": config.dropout, "norm": None if config.norm == "none" else config.norm,
            "input_dropout": config.input_dropout}


def _rgcn(config: ModelConfig, in_dim, num_classes, num_relations):
    if config.regularizer == "block" and (config.bases < 1 or config.hidden % config.bases):
        raise InputError(None, "--regularizer block splits every relation's weight into --bases diagonal blocks: "
                         f"give a number of blocks that divides --hidden ({config.hidden})", "--bases", config.bases)
    return RGCN(in_dim, config.hidden, num_classes, num_relations, config.layers, config.regularizer, config.bases,
                not config.no_self_loop, **_common(config))


register("sage", lambda c, i, o: SAGE(i, c.hidden, o, c.layers, c.aggregator, **_common(c)))
register("gcn", lambda c, i, o: GCN(i, c.hidden, o, c.layers, **_common(c)))
register("gat", lambda c, i, o: GAT(i, c.hidden, o, c.layers, c.heads, **_common(c)))
register("rgcn", _rgcn, relational=True)
register("rgat", lambda c, i, o, r: RGAT(i, c.hidden, o, r, c.layers, c.heads, not c.no_self_loop, **_common(c)),
         relational=True)
