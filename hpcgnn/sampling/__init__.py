"""Mini-batch samplers over a DistGraph. ``Block``/``MiniBatch`` are what they produce and
``Sampler`` the protocol they follow; a new sampler is a new module here that registers itself
(:mod:`.registry`) and one import line below. For link prediction,
:mod:`.negative` draws negative pairs and :mod:`.exclude` hides a batch's own edges from any
sampler."""
# the registered samplers, in the order of --sampler's choices
from hpcgnn.sampling import cluster, layer, randomwalk, relational, saint, vr  # noqa: E402,F401,I001 (registration)
from hpcgnn.sampling.block import Block, MiniBatch, Sampler
from hpcgnn.sampling.exclude import ExcludedEdges
from hpcgnn.sampling.negative import NEGATIVE_SAMPLERS, NegativeSampler, build_negative_sampler
from hpcgnn.sampling.neighbor import NeighborSampler
from hpcgnn.sampling.registry import SAMPLERS, SamplerRun, SamplerSpec, register_sampler, sampler_spec  # noqa: E402

__all__ = ["NEGATIVE_SAMPLERS", "Block", "ExcludedEdges", "MiniBatch", "NegativeSampler", "NeighborSampler",
           "SAMPLERS", "Sampler", "SamplerRun", "SamplerSpec", "build_negative_sampler", "register_sampler",
           "sampler_spec"]
