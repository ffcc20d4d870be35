"""``DistGraph``: rank r of an MPI job holds part r of a partitioned dataset in memory.

The part's CSC (in-edges of the owned nodes), its node fields and its edge fields live in MPI
windows, so every rank can read any node's features and any node's in-edges by global id
(the sampler reads remote adjacency this way). With one part, a plain ``python script.py``
works: MPI starts as a world of one.
"""
from __future__ import annotations

import os

import numpy as np

from hpcgnn import _csr
from hpcgnn import format as fmt
from hpcgnn.comm import allgather_int, node_comm, world
from hpcgnn.dist_tensor import DistTensor
from hpcgnn.errors import InputError
from hpcgnn.partition_book import PartitionBook
from hpcgnn.window import RowWindow


class DistGraph:
    """Collective over comm. Load part ``comm.rank`` of the dataset at ``path``.

    Attributes
    ----------
    num_nodes, num_edges : int
    book : PartitionBook
        Node ownership (``book.owner(gids)``, ``book.to_local(gids)``).
    edge_book : PartitionBook
        Edge ownership: part r stores global edge ids ``[edge_starts[r], edge_starts[r+1])``.
    local_nodes : tuple of int
        ``(start, end)``: the global ids this rank owns.
    ndata, edata : dict of DistTensor
        Node fields (``feat``, ``label``, masks, ...) and edge fields, readable by global id.
    indptr, indices : ndarray
        This rank's CSC: in-edges of owned node ``i`` (local) are sources
        ``indices[indptr[i]:indptr[i+1]]`` (global ids), global edge ids
        ``edge_book.node_starts[rank] + position``.
    """

    def __init__(self, path, comm=None):
        self.comm = comm if comm is not None else world()
        self.path = os.fspath(path)
        self.meta = fmt.read_meta(self.path)
        parts = self.meta["num_parts"]
        if parts != self.comm.size:
            raise InputError(os.path.join(self.path, "meta.json"),
                             f"dataset has {parts} parts but the job has {self.comm.size} ranks "
                             f"(run it with mpirun -np {parts})", "num_parts", parts)
        self.book = PartitionBook(self.meta["node_starts"])
        self.edge_book = PartitionBook(self.meta["edge_starts"])
        self.num_nodes = int(self.meta["num_nodes"])
        self.num_edges = int(self.meta["num_edges"])
        self.name = self.meta.get("graph_name", "graph")
        rank = self.comm.rank
        self.local_nodes = self.book.node_range(rank)
        self.local_edges = self.edge_book.node_range(rank)
        n_local = self.local_nodes[1] - self.local_nodes[0]
        e_local = self.local_edges[1] - self.local_edges[0]
        import h5py

        self._ncomm = node_comm(self.comm)
        part_file = fmt.part_path(self.path, self.meta, rank)
        with h5py.File(part_file, "r") as h5:
            self._check_part(h5, part_file, n_local, e_local)
            # indptr rows: n_local + 1 per rank, so reading rows lid and lid + 1 gives a degree
            self._indptr_win = RowWindow(self.comm, n_local + 1, (), np.int64, ncomm=self._ncomm)
            h5["indptr"].read_direct(self._indptr_win.local)
            self._indices_win = RowWindow(self.comm, e_local, (), h5["indices"].dtype, ncomm=self._ncomm)
            if e_local:
                h5["indices"].read_direct(self._indices_win.local)
            self.orig_id = h5["orig_id"][()]
            self.ndata = {name: self._field(h5, name, (self.num_nodes, *spec["shape"]), spec["dtype"], self.book)
                          for name, spec in self.meta["node_fields"].items()}
            self.edata = {name: self._field(h5, fmt.EDGE_PREFIX + name, (self.num_edges, *spec["shape"]),
                                            spec["dtype"], self.edge_book)
                          for name, spec in self.meta.get("edge_fields", {}).items()}
        self._indptr_win.sync()
        self._indices_win.sync()

    def _check_part(self, h5, part_file, n_local, e_local):
        for key, want in (("node_start", self.local_nodes[0]), ("node_end", self.local_nodes[1]),
                          ("edge_start", self.local_edges[0])):
            if int(h5.attrs.get(key, -1)) != want:
                raise InputError(part_file, "part file does not match meta.json", key, h5.attrs.get(key))
        if h5["indptr"].shape != (n_local + 1,) or h5["indices"].shape != (e_local,):
            raise InputError(part_file, "CSC arrays do not match meta.json", "indptr", h5["indptr"].shape)

    def _field(self, h5, key, shape, dtype, book):
        def fill(out):
            if out.size:
                h5[key].read_direct(out)
        return DistTensor(shape, np.dtype(dtype), name=key, comm=self.comm, book=book, local_data=fill)

    # ------------------------------------------------------------ local view
    @property
    def indptr(self) -> np.ndarray:
        return self._indptr_win.local

    @property
    def indices(self) -> np.ndarray:
        return self._indices_win.local

    @property
    def num_parts(self) -> int:
        return self.book.num_parts

    def local_node_ids(self) -> np.ndarray:
        """Local. Global ids owned by this rank."""
        return np.arange(*self.local_nodes, dtype=np.int64)

    # ------------------------------------------------------- any rank's rows
    def in_degrees(self, gids) -> np.ndarray:
        """Local. In-degree of any nodes (remote ones read through the windows)."""
        start, _ = self.degree_offsets(gids)
        return start[1] - start[0]

    def degree_offsets(self, gids):
        """Local. ``((begin, end), owners)``: each node's in-edge range in its owner's CSC."""
        gids = np.asarray(gids, dtype=np.int64)
        owners = self.book.owner(gids)
        lids = gids - self.book.node_starts[owners]
        both = np.empty(2 * gids.shape[0], dtype=np.int64)
        self._indptr_win.read(np.repeat(owners, 2), np.stack([lids, lids + 1], axis=1).reshape(-1), both)
        return (both[0::2].copy(), both[1::2].copy()), owners

    def read_in_edges(self, owners, positions, out=None) -> np.ndarray:
        """Local. Source ids at CSC ``positions`` of each owner's part (one request per owner)."""
        positions = np.asarray(positions, dtype=np.int64)
        if out is None:
            out = np.empty(positions.shape[0], dtype=self._indices_win.dtype)
        if positions.shape[0]:
            self._indices_win.read(owners, positions, out)
        return out

    def in_edges(self, gids):
        """Local. All in-edges of any nodes: ``(offsets, src_gids, eids)`` in CSR form over ``gids``.

        Edges of node ``gids[i]`` are ``offsets[i]:offsets[i+1]``; ``eids`` are global edge ids.
        """
        (begin, end), owners = self.degree_offsets(gids)
        counts = end - begin
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        positions = _csr.expand_ranges(begin, counts)
        edge_owner = np.repeat(owners, counts)
        src = self.read_in_edges(edge_owner, positions).astype(np.int64)
        return offsets, src, self.edge_book.node_starts[edge_owner] + positions

    # -------------------------------------------------------------- lifetime
    def barrier(self):
        """Collective over comm. Wait for every rank (and make DistTensor writes visible)."""
        self.comm.Barrier()

    def close(self):
        """Collective over comm. Free every window of the graph and its fields."""
        for tensor in list(self.ndata.values()) + list(self.edata.values()):
            tensor.close()
        self._indices_win.close()
        self._indptr_win.close()
        self._ncomm.Free()
        self.ndata, self.edata = {}, {}

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()

    def __repr__(self):
        return (f"DistGraph({self.name!r}, nodes={self.num_nodes:,}, edges={self.num_edges:,}, "
                f"parts={self.num_parts}, rank={self.comm.rank}, local_nodes={self.local_nodes})")


def node_split(mask, graph: DistGraph, comm=None, seed=0) -> np.ndarray:
    """Collective over comm. This rank's share of the nodes selected by ``mask``.

    Each rank first takes the selected nodes it owns (locality: their features and first hop
    are local), then the counts are evened out: ranks with more than their share hand a seeded
    random subset of their surplus to the ranks short of it, in rank order. The result:
    disjoint, covering every selected node, lengths differing by at most one (equal when the
    count divides evenly), deterministic for a seed.

    Parameters
    ----------
    mask : str, DistTensor or ndarray
        Name of a boolean node field of ``graph``, a boolean DistTensor, or a boolean array over
        all nodes or over this rank's nodes.
    graph : DistGraph
    seed : int

    Returns
    -------
    ndarray of int64
        Sorted global ids.
    """
    comm = comm if comm is not None else graph.comm
    start, end = graph.local_nodes
    if isinstance(mask, str):
        local_mask = graph.ndata[mask].local
    elif isinstance(mask, DistTensor):
        local_mask = mask.local
    else:
        mask = np.asarray(mask)
        local_mask = mask[start:end] if mask.shape[0] == graph.num_nodes else mask
    if local_mask.shape[0] != end - start:
        raise ValueError(f"mask has {local_mask.shape[0]} rows, expected {graph.num_nodes} or {end - start}")
    mine = start + np.flatnonzero(np.asarray(local_mask).astype(bool))
    counts = allgather_int(mine.shape[0], comm)
    total, size = int(counts.sum()), comm.size
    targets = total // size + (np.arange(size) < total % size)
    surplus = np.maximum(counts - targets, 0)
    deficit = np.maximum(targets - counts, 0)
    rng = np.random.default_rng([seed, comm.rank])
    keep = np.sort(rng.permutation(mine)[: min(mine.shape[0], int(targets[comm.rank]))])
    give = np.setdiff1d(mine, keep, assume_unique=True)
    # the surplus of all ranks, laid end to end in rank order, fills the deficits in rank order
    give_at = np.concatenate([[0], np.cumsum(surplus)])
    take_at = np.concatenate([[0], np.cumsum(deficit)])
    send_counts = np.clip(np.minimum(give_at[comm.rank + 1], take_at[1:]) - np.maximum(give_at[comm.rank],
                                                                                     take_at[:-1]), 0, None)
    recv_counts = np.clip(np.minimum(take_at[comm.rank + 1], give_at[1:]) - np.maximum(take_at[comm.rank],
                                                                                     give_at[:-1]), 0, None)
    received = np.empty(int(recv_counts.sum()), dtype=np.int64)
    if size > 1:
        from hpcgnn.comm import mpi

        MPI = mpi()
        comm.Alltoallv([give, (send_counts, _displs(send_counts)), MPI.INT64_T],
                       [received, (recv_counts, _displs(recv_counts)), MPI.INT64_T])
    return np.sort(np.concatenate([keep, received]))


def _displs(counts):
    return np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
