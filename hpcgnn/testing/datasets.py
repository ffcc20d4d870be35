"""Small partitioned datasets for tests, and oracle views of them read straight from the files."""
from __future__ import annotations

import os

import h5py
import numpy as np

from hpcgnn.format import ondisk
from hpcgnn.prep.partition import partition_graph
from hpcgnn.testing.graphs import clustered_graph


def partition_once(comm, shared_tmp, graph, parts, name, method="metis", **partition_args):
    """Collective over comm. Rank 0 partitions ``graph`` (a ``prep.graph.Graph``, typed or not)
    into ``parts`` by ``method`` under ``shared_tmp/<name><parts>``, unless an earlier call of the
    test already did; every rank gets the dataset's path. ``partition_args`` go to
    :func:`~hpcgnn.prep.partition.partition_graph` (``feat_dtype``, ``source``, ...)."""
    path = os.path.join(shared_tmp, f"{name}{parts}")
    if comm.rank == 0 and not os.path.exists(path):
        partition_graph(graph, path, parts, method, **partition_args)
    comm.barrier()
    return path


def make_dataset(comm, shared_tmp, parts, name="ds", **graph_args):
    """Collective over comm. Rank 0 partitions a generated graph (:func:`clustered_graph`) into
    ``parts`` (METIS) under ``shared_tmp`` once; every rank gets ``(path, graph)``."""
    graph = clustered_graph(**graph_args)
    return partition_once(comm, shared_tmp, graph, parts, name), graph


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


def link_graph(num_nodes=400, avg_degree=8, p_inside=0.9, feat_dim=8, seed=0, divisible_by=1):
    """Local. An undirected clustered graph (planted communities: links are predictable) whose
    training edges, once ``EDGE_SPLIT`` holds edges out, number a multiple of ``divisible_by``
    (so every rank of a test gets the same count)."""
    from hpcgnn.prep.transform import remove_self_loops, symmetrize  # deferred: only link tests need them

    graph = clustered_graph(num_nodes=num_nodes, avg_degree=avg_degree // 2, p_inside=p_inside, feat_dim=feat_dim,
                            seed=seed)
    # features that carry the community, noisily (as a real graph's do): links are predictable
    rng = np.random.default_rng(seed + 1)
    community = np.eye(feat_dim, dtype=np.float32)[graph.ndata["label"] % feat_dim]
    graph.ndata["feat"] = community + rng.standard_normal(community.shape).astype(np.float32)
    graph = symmetrize(remove_self_loops(graph))
    while True:
        units = int((graph.src < graph.dst).sum())
        if (units - sum(int(round(f * units)) for f in EDGE_SPLIT[1:])) % divisible_by == 0:
            return graph
        # drop one undirected edge (both directions) and count again
        u, v = graph.src[graph.src < graph.dst][0], graph.dst[graph.src < graph.dst][0]
        keep = ~(((graph.src == u) & (graph.dst == v)) | ((graph.src == v) & (graph.dst == u)))
        graph = type(graph)(graph.num_nodes, graph.src[keep], graph.dst[keep], graph.ndata,
                            {k: x[keep] for k, x in graph.edata.items()}, graph.name, graph.source, True)


#: the edge split of the link-prediction test datasets: train, val, test fractions
EDGE_SPLIT = (0.8, 0.1, 0.1)


def make_link_dataset(comm, shared_tmp, parts, name="link", eval_negatives=20, contiguous=False,
                      negatives_kind="corrupt", **graph_args):
    """Collective over comm. Rank 0 holds edges out of :func:`link_graph` (:data:`EDGE_SPLIT`,
    ``eval_negatives`` per evaluation edge, of ``negatives_kind``) and partitions it into ``parts`` once; every rank
    gets ``(path, graph)``. ``contiguous`` deals nodes out in input order (part p takes the p-th
    block of ids) instead of METIS, so node and edge ids are the same for any part count."""
    from hpcgnn.prep import partition  # deferred: the module under test patches it
    from hpcgnn.prep.edge_split import hold_out_edges  # deferred: only link tests need it

    graph = hold_out_edges(link_graph(**graph_args), EDGE_SPLIT, eval_negatives, seed=0, negatives_kind=negatives_kind)
    path = os.path.join(shared_tmp, f"{name}{parts}")
    if comm.rank == 0 and not os.path.exists(path):
        method = "random" if contiguous else "metis"
        original = partition.assign_parts
        if contiguous:
            partition.assign_parts = lambda g, csc, p, *a, **k: (np.arange(g.num_nodes) * p // g.num_nodes,
                                                                 {"method": "contiguous"})
        try:
            partition.partition_graph(graph, path, parts, method)
        finally:
            partition.assign_parts = original
    comm.barrier()
    return path, graph
