"""Link prediction models: any encoder of the registry plus an edge predictor.

``LinkModel`` is an encoder (``build_model`` with ``hidden`` outputs: every node's embedding)
and a predictor scoring a pair of embeddings with one logit. It is a layer stack to everything
that runs layer stacks (layer-wise inference, checkpoints, the gradient buffer): ``layers``,
``layer_forward`` and ``needs_degrees`` are the encoder's, and the predictor's parameters are
trained and checkpointed with it.

Predictors (``--predictor``):

* ``dot``: ``<h_u, h_v>``, the graph auto-encoder's decoder (Kipf & Welling 2016);
* ``mlp``: a two-layer perceptron on ``h_u * h_v`` (symmetric in u and v, as the dot product).
"""
from __future__ import annotations

import torch
from torch import nn

from hpcgnn.nn.registry import build_model


class DotPredictor(nn.Module):
    """Local. ``score(h_u, h_v) = sum(h_u * h_v)``."""

    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, h_u, h_v):
        return (h_u * h_v).sum(-1)


class MLPPredictor(nn.Module):
    """Local. ``score(h_u, h_v) = w2 . relu(W1 (h_u * h_v) + b1) + b2``."""

    def __init__(self, dim):
        super().__init__()
        self.hidden = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, 1)

    def forward(self, h_u, h_v):
        return self.out(torch.relu(self.hidden(h_u * h_v))).squeeze(-1)


PREDICTORS = {"dot": DotPredictor, "mlp": MLPPredictor}


class LinkModel(nn.Module):
    """Local. An encoder of node embeddings and a predictor of edges from them.

    Parameters
    ----------
    encoder : LayerStack
        Computes every node's embedding (its output width is the predictor's input).
    predictor : nn.Module
        ``predictor(h_u, h_v) -> logits``.
    """

    def __init__(self, encoder, predictor):
        super().__init__()
        self.encoder = encoder
        self.predictor = predictor

    @property
    def layers(self):
        return self.encoder.layers

    @property
    def needs_degrees(self):
        return getattr(self.encoder, "needs_degrees", False)

    def layer_forward(self, i, block, h):
        """Local. Encoder layer ``i`` alone (layer-wise inference of the embeddings)."""
        return self.encoder.layer_forward(i, block, h)

    def forward(self, blocks, x, input_degree=None):
        """Local. Embeddings of the last block's destination nodes."""
        return self.encoder(blocks, x, input_degree)

    def score(self, h_u, h_v):
        """Local. One logit per pair of embedding rows."""
        return self.predictor(h_u, h_v)


def build_link_model(config, in_dim: int, predictor: str = "dot") -> LinkModel:
    """Local. The encoder the :class:`~hpcgnn.nn.config.ModelConfig` ``config`` describes, with
    ``config.hidden`` outputs, and the edge-score ``predictor`` on its embeddings."""
    if predictor not in PREDICTORS:
        raise ValueError(f"unknown predictor {predictor!r} (choose from {', '.join(PREDICTORS)})")
    encoder = build_model(config, in_dim, config.hidden)
    return LinkModel(encoder, PREDICTORS[predictor](config.hidden))
