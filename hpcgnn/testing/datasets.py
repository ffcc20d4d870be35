"""Small partitioned datasets for tests, and oracle views of them read straight from the files."""
from __future__ import annotations

import os

import h5py
import numpy as np

from hpcgnn.prep import ondisk
from hpcgnn.prep.partition import partition_graph
from hpcgnn.testing.graphs import clustered_graph


def make_dataset(comm, shared_tmp, parts, name="ds", **graph_args):
    """Collective over comm. Rank 0 partitions a generated graph into ``parts`` (METIS) under
    ``shared_tmp`` once; every rank gets ``(path, graph)``."""
    graph = clustered_graph(**graph_args)
    path = os.path.join(shared_tmp, f"{name}{parts}")
    if comm.rank == 0 and not os.path.exists(path):
        partition_graph(graph, path, parts, "metis")
    comm.barrier()
    return path, graph


def oracle(path):
    """Local. New-id views of a dataset, from its part files: ``(orig id of each new id, indptr, indices)``
    of the whole graph's in-edge CSC."""
    meta = ondisk.read_meta(path)
    parts = [ondisk.read_part(path, meta, p) for p in range(meta["num_parts"])]
    orig = np.concatenate([p["orig_id"] for p in parts])
    degrees = np.concatenate([np.diff(p["indptr"]) for p in parts])
    indptr = np.concatenate([[0], np.cumsum(degrees)])
    indices = np.concatenate([p["indices"] for p in parts]).astype(np.int64)
    return orig, indptr, indices


def input_eids(path):
    """Local. For every global edge id, the edge's id in the partitioner's input."""
    meta = ondisk.read_meta(path)
    return np.concatenate([ondisk.read_part(path, meta, p)["eid"] for p in range(meta["num_parts"])]).astype(np.int64)


def corrupt_bytes(part_file, dataset="feat", count=1000):
    """Local. Overwrite up to ``count`` float32 values of ``dataset``'s stored bytes in
    ``part_file`` with NaN, below HDF5 (as a failing disk or a stray write would), whatever the
    dataset's layout (chunked: the first chunk; contiguous: the start)."""
    with h5py.File(part_file, "r") as h5:
        dset = h5[dataset]
        offset = dset.id.get_chunk_info(0).byte_offset if dset.chunks else dset.id.get_offset()
        nbytes = min(4 * count, dset.id.get_storage_size() - 8)  # stay inside the data, off its checksum
    with open(part_file, "r+b") as fh:
        fh.seek(offset)
        fh.write(np.full(nbytes // 4, np.nan, dtype=np.float32).tobytes())
