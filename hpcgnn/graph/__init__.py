"""The distributed graph: ``DistGraph`` (a partition in MPI windows, with the one-hop
primitives every sampler uses) and the split of training nodes and edges over the ranks."""
from hpcgnn.graph.dist_graph import DistGraph, Neighbors
from hpcgnn.graph.split import SeedEdges, edge_split, fold_of_nodes, node_split

__all__ = ["DistGraph", "Neighbors", "SeedEdges", "edge_split", "fold_of_nodes", "node_split"]
