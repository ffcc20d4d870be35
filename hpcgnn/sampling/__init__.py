"""Mini-batch samplers over a DistGraph. ``Block``/``MiniBatch`` are what they produce and
``Sampler`` the protocol they follow; a new sampler is a new module here. For link prediction,
:mod:`.negative` draws negative pairs and :mod:`.exclude` hides a batch's own edges from any
sampler."""
from hpcgnn.sampling.block import Block, MiniBatch, Sampler
from hpcgnn.sampling.exclude import ExcludedEdges
from hpcgnn.sampling.negative import NEGATIVE_SAMPLERS, NegativeSampler, build_negative_sampler
from hpcgnn.sampling.neighbor import NeighborSampler

__all__ = ["NEGATIVE_SAMPLERS", "Block", "ExcludedEdges", "MiniBatch", "NegativeSampler", "NeighborSampler",
           "Sampler", "build_negative_sampler"]
