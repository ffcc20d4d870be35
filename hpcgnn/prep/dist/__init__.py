"""Parallel preparation: every rank reads, partitions and writes its share of the graph."""
