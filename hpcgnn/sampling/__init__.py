"""Mini-batch samplers over a DistGraph. ``Block``/``MiniBatch`` are what they produce and
``Sampler`` the protocol they follow; a new sampler is a new module here."""
from hpcgnn.sampling.block import Block, MiniBatch, Sampler
from hpcgnn.sampling.neighbor import NeighborSampler

__all__ = ["Block", "MiniBatch", "NeighborSampler", "Sampler"]
