"""Offline preparation: read a graph in the format a user holds, clean it up, generate synthetic
graphs, partition with METIS and write the HDF5 dataset that the runtime loads.

Data flows ``read/`` -> :mod:`~hpcgnn.prep.transform` -> :mod:`~hpcgnn.prep.partition`
(-> :mod:`~hpcgnn._metis`) -> :mod:`~hpcgnn.format.ondisk`; :mod:`~hpcgnn.prep.inspection`
reads a dataset back and verifies it.
"""
