"""``DistGraph``: rank r of an MPI job holds part r of a partitioned dataset in memory.

The part's CSC (in-edges of the owned nodes), its node fields and its edge fields live in MPI
windows, so every rank can read any node's features and any node's in-edges by global id. It
owns the one-hop primitives every sampler is built from: :meth:`DistGraph.sample_neighbors`
(uniform or weighted, with or without replacement, local and remote rows alike) and
:meth:`DistGraph.in_edges`. With one part, a plain ``python script.py`` works: MPI starts as
a world of one.
"""
from __future__ import annotations

import hashlib
import os
import socket
from typing import NamedTuple

import numpy as np

from hpcgnn import _csr, _sample
from hpcgnn.format import ondisk
from hpcgnn.format.fields import MASKS
from hpcgnn.format.part_group import PartGroup, shard_node_starts, type_starts_at
from hpcgnn.format.schema import ETYPE, TypeLayout
from hpcgnn.runtime.collectives import fail_together
from hpcgnn.runtime.comm import node_comm, world
from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.memory import available_memory
from hpcgnn.runtime.progress import DEFAULT_INTERVAL_S, ProgressThread, spans_nodes
from hpcgnn.runtime.resources import CollectiveResource
from hpcgnn.store.dist_tensor import DistTensor
from hpcgnn.store.partition_book import PartitionBook
from hpcgnn.store.window import RowWindow, sync_windows


class Neighbors(NamedTuple):
    """Local. One hop of sampled in-edges, grouped by destination node (a CSR by ``counts``)."""

    #: picks per destination node
    counts: np.ndarray
    #: global id of each picked edge's source
    src: np.ndarray
    #: global id of each picked edge
    eids: np.ndarray
    #: each destination's in-degree in the whole graph
    degree: np.ndarray


class DistGraph(CollectiveResource):
    """Collective over comm. Load this rank's shard of the dataset at ``path``: with R ranks on a
    P-part dataset, rank r holds parts ``r * P/R`` to ``(r + 1) * P/R - 1`` where R divides P (with
    R = P, part r), else the r-th of R even ranges of the node ids, which may begin or end inside
    a part (:mod:`~hpcgnn.format.part_group`).

    Parameters
    ----------
    path : str
        Dataset directory written by ``hpcgnn partition``.
    comm : MPI communicator, optional
        Any number of ranks; default ``MPI.COMM_WORLD``.
    progress_interval : float, optional
        Seconds between the polls of a :class:`~hpcgnn.runtime.progress.ProgressThread`, which
        serves other ranks' reads of this rank's rows while it computes; 0 runs none. Default:
        0.5 ms when the job spans several nodes, none inside one node (shared memory needs none).

    Attributes
    ----------
    num_nodes, num_edges : int
    book : PartitionBook
        Node ownership by rank (``book.owner(gids)``, ``book.to_local(gids)``): the shards' starts.
    parts : range
        The parts this rank's shard touches (whole parts where the ranks divide them).
    edge_book : PartitionBook
        Edge ownership: rank r stores global edge ids ``[edge_book.starts[r], edge_book.starts[r+1])``.
    local_nodes : tuple of int
        ``(start, end)``: the global ids this rank owns.
    ndata, edata : dict of DistTensor
        Node fields (``feat``, ``label``, masks, ...) and edge fields, readable by global id.
    indptr, indices : ndarray
        This rank's CSC: in-edges of owned node ``i`` (local) are sources
        ``indices[indptr[i]:indptr[i+1]]`` (global ids), global edge ids
        ``edge_book.starts[rank] + position``.
    link : dict or None
        Link prediction (a dataset partitioned with ``--edge-split``): this rank's held-out edges,
        ``{"val": (src, dst, neg), "test": (src, dst, neg)}``, int64 numpy arrays of global ids:
        positives ``src[i] -> dst[i]`` (every ``dst`` owned by this rank) and ``neg`` [n, K], the
        destinations of positive i's K negatives (their source ``src[i]``); a dataset of uniform
        negative pairs adds a fourth array, ``neg_src`` [n, K], their sources. None for a dataset
        without edge sets.
    simple : bool
        True when preparation removed parallel edges (``partition --dedup`` or ``--symmetrize``,
        as ``meta.json``'s ``source`` records), so no node has the same in-neighbour twice:
        samplers may skip their duplicate-edge checks. False when unknown.
    link_meta : dict or None
        ``meta.json``'s ``link`` entry (split, seed, K, counts; see :mod:`hpcgnn.format.ondisk`), or None.
    schema : Schema
        Node types and canonical relations (:class:`~hpcgnn.format.schema.Schema`);
        ``Schema.homogeneous()`` for a dataset without types.
    layout : TypeLayout
        Where every (part, node type) block sits in the global ids: ``layout.type_ids(gids)``
        gives each node's type and id within its type, ``layout.gids_of(t, tids)`` the inverse.
        A homogeneous dataset's is ``TypeLayout.homogeneous(book.starts)``.
    typed_ndata : dict
        ``{type: {field: DistTensor}}``: the per-type node fields of a typed dataset (``feat`` of
        each type's own width), indexed by type id (``tids`` of :meth:`TypeLayout.type_ids`) and
        sharded as the shards hold each type (book: :func:`~hpcgnn.format.part_group.type_starts_at`); empty for a
        homogeneous dataset. ``label`` and the masks stay in ``ndata`` (global ids), and each
        edge's relation index is ``edata["etype"]``.
    """

    def __init__(self, path, comm=None, progress_interval=None):
        self.comm = comm if comm is not None else world()
        self.path = os.fspath(path)
        self.meta = ondisk.read_meta(self.path)
        # each rank holds one range of global ids: whole parts where the ranks divide them
        self.book = PartitionBook(shard_node_starts(self.meta, self.comm.size))
        self.schema = ondisk.dataset_schema(self.meta)
        typed = self.meta.get("schema")
        self.layout = (TypeLayout.homogeneous(self.meta["node_starts"]) if typed is None
                       else TypeLayout(self.schema, typed["type_counts"]))
        self.num_nodes = int(self.meta["num_nodes"])
        self.num_edges = int(self.meta["num_edges"])
        self.name = self.meta.get("graph_name", "graph")
        source = self.meta.get("source") or {}
        self.simple = bool(source.get("dedup") or source.get("symmetrize"))
        self.local_nodes = self.book.part_range(self.comm.rank)
        self._ncomm = node_comm(self.comm)
        part = self._open_shard()
        self.parts = part.part_ids
        # a shard's edges are one range of the global edge ids, beginning where its first node's do
        self.edge_book = PartitionBook(self.comm.allgather(part.edge_start) + [self.num_edges])
        self.local_edges = self.edge_book.part_range(self.comm.rank)
        self._load_part(part, self.local_nodes[1] - self.local_nodes[0], self.local_edges[1] - self.local_edges[0])
        across_nodes = spans_nodes(self.comm, self._ncomm)
        self._halo = self._halo_offsets() if across_nodes else None
        if progress_interval is None:
            progress_interval = DEFAULT_INTERVAL_S if across_nodes else 0.0
        self.progress = ProgressThread(self.comm, progress_interval) if progress_interval > 0 else None

    def _open_shard(self):
        """Collective over comm. This rank's parts, opened and checked (``ondisk.PartFile``: their
        objects checked before any read, shapes against meta.json); a part that cannot be opened
        fails every rank together, as does a shard larger than its machine's memory."""
        part = error = None
        try:
            part = PartGroup(self.path, self.meta, *self.local_nodes)
        except InputError as exc:
            error = exc
        fail_together(self.comm, error, self.path)
        try:
            self._check_memory(part)
        except InputError:
            part.close()
            raise
        return part

    def _load_part(self, part, n_local, e_local):
        """Collective over comm. Read this rank's shard (``part``, a
        :class:`~hpcgnn.format.part_group.PartGroup`) into the windows: checksums verified, then the
        values read (:meth:`~hpcgnn.format.ondisk.PartFile.value_problems`). A bad part fails every
        rank together, never one rank alone while the others wait in the next collective."""
        read_errors = []

        def read(name, out):
            # after a failed read the windows are still built, so every rank meets the same collectives
            if not read_errors:
                try:
                    part.read(name, out)
                except InputError as exc:
                    read_errors.append(exc)

        with part:
            # indptr rows: n_local + 1 per rank, so reading rows lid and lid + 1 gives a degree
            self._indptr_win = RowWindow(self.comm, n_local + 1, (), np.int64, ncomm=self._ncomm)
            read("indptr", self._indptr_win.local)
            self._indices_win = RowWindow(self.comm, e_local, (), part.dtype("indices"), ncomm=self._ncomm)
            read("indices", self._indices_win.local)
            self.orig_id = np.empty(n_local, dtype=np.int64)
            read("orig_id", self.orig_id)
            self.ndata = {name: self._field(read, name, (self.num_nodes, *spec["shape"]), spec, self.book)
                          for name, spec in self.meta["node_fields"].items()}
            self.edata = {name: self._field(read, ondisk.EDGE_PREFIX + name, (self.num_edges, *spec["shape"]),
                                            spec, self.edge_book)
                          for name, spec in self.meta.get("edge_fields", {}).items()}
            self.typed_ndata = self._typed_fields(read)
            self.link_meta = self.meta.get("link")
            self.link = self._read_links(read, part)
        if not read_errors:
            read_errors.extend(part.value_problems(self._loaded_arrays()))
        fail_together(self.comm, read_errors[0] if read_errors else None, self.path)
        sync_windows(self.comm, [self._indptr_win, self._indices_win])

    def _check_memory(self, part):
        """Collective over comm. Stop every rank, with one line naming this rank's parts and bytes,
        when the ranks on some machine would together hold more than that machine has available
        (before any window is allocated: a shard too large would otherwise end in the kernel's
        out-of-memory kill)."""
        need = part.nbytes()
        on_machine = self._ncomm.allreduce(need)
        have = self._ncomm.bcast(available_memory() if self._ncomm.rank == 0 else None, root=0)
        error = None
        if on_machine > have:
            first, last = part.part_ids[0], part.part_ids[-1]
            error = InputError(os.path.join(self.path, "meta.json"),
                               f"rank {self.comm.rank} would hold parts {first}-{last} ({need / 2**30:.2f} GiB) and "
                               f"the {self._ncomm.size} ranks on {socket.gethostname()} {on_machine / 2**30:.2f} GiB, "
                               f"more than its {have / 2**30:.2f} GiB available: run on more machines (more ranks, "
                               "fewer nodes each)", "num_parts", self.meta["num_parts"])
        fail_together(self.comm, error, self.path)

    def _typed_fields(self, read) -> dict:
        """``{type: {field: DistTensor}}`` of the per-type node fields (see the class docstring), each
        shard read from this rank's ``field@type`` dataset through ``read``."""
        typed = {}
        for name, (type_index, field, spec) in ondisk.typed_datasets(self.meta).items():
            book = PartitionBook(type_starts_at(self.meta, self.layout, self.book.starts)[type_index])
            shape = (self.layout.num_nodes_of(type_index), *spec["shape"])
            typed.setdefault(self.schema.node_types[type_index], {})[field] = self._field(read, name, shape, spec, book)
        return typed

    def _read_links(self, read, part):
        """This rank's held-out edge sets ``{"val": (src, dst, neg), ...}`` (see the class docstring),
        read from ``part`` (its :class:`~hpcgnn.format.part_group.PartGroup`) through ``read`` so a
        failed read fails every rank together; None without edge sets."""
        if not ondisk.link_datasets(self.meta):
            return None
        k, sets = self.link_meta["eval_negatives"], {}
        for split in ondisk.LINK_SPLITS:
            count = part.rows(f"{ondisk.LINK_PREFIX}{split}_src")
            arrays = tuple(np.empty((count, k) if name.startswith("neg") else count, np.int64)
                           for name in ondisk.link_arrays(self.meta))
            for name, out in zip(ondisk.link_arrays(self.meta), arrays, strict=True):
                read(f"{ondisk.LINK_PREFIX}{split}_{name}", out)
            sets[split] = arrays
        return sets

    def _loaded_arrays(self) -> dict:
        """This rank's arrays whose values the format constrains, by dataset name
        (:meth:`~hpcgnn.format.ondisk.PartFile.value_problems`)."""
        arrays = {"indptr": self._indptr_win.local, "indices": self._indices_win.local}
        arrays.update({name: tensor.local for name, tensor in self.ndata.items()
                       if name == "label" or name in MASKS})
        if ETYPE in self.edata:
            arrays[ondisk.EDGE_PREFIX + ETYPE] = self.edata[ETYPE].local
        for split, sets in (self.link or {}).items():
            for name, ids in zip(ondisk.link_arrays(self.meta), sets, strict=True):
                arrays[f"{ondisk.LINK_PREFIX}{split}_{name}"] = ids
        return arrays

    def _halo_offsets(self):
        """CSC offsets ``(gids, begin, degree)`` of every node on another machine with an edge into
        this part: the frontier a hop from local seeds reaches, whose offsets would otherwise
        cost one network round trip per hop (16 bytes per node, read once here)."""
        remote = self.indices[self._indptr_win.node_slot[self.book.owner(self.indices)] < 0]
        gids = np.unique(remote).astype(np.int64)
        owners = self.book.owner(gids)
        lids = gids - self.book.starts[owners]
        both = np.empty(2 * gids.shape[0], dtype=np.int64)
        self._indptr_win.read(np.repeat(owners, 2), np.stack([lids, lids + 1], axis=1).reshape(-1), both)
        return gids, both[0::2].copy(), both[1::2] - both[0::2]

    def _field(self, read, key, shape, spec, book):
        return DistTensor(shape, np.dtype(spec["dtype"]), name=key, comm=self.comm, book=book,
                          local_data=lambda out: read(key, out), encoding=spec.get("encoding"))

    # ------------------------------------------------------------ local view
    @property
    def indptr(self) -> np.ndarray:
        """This rank's CSC offsets (``num_local_nodes + 1``), read-only by convention."""
        return self._indptr_win.local

    @property
    def indices(self) -> np.ndarray:
        """This rank's CSC sources (global ids), read-only by convention."""
        return self._indices_win.local

    @property
    def num_parts(self) -> int:
        return self.book.num_parts

    @property
    def is_typed(self) -> bool:
        """Local. Whether the dataset has several node types or relations, or per-type node fields:
        its first-layer inputs are then read per type (``typed_ndata``), not from ``ndata``."""
        return not self.schema.is_homogeneous or bool(self.typed_ndata)

    def part_digests(self) -> list:
        """Collective over comm. SHA-256 of every part's original node ids in new-id order, part by
        part (the same at any rank count): the rank holding a part's first node hashes the part,
        reading the rest of it from its file where the part runs past this rank's range."""
        starts, (lo, hi) = self.meta["node_starts"], self.local_nodes
        mine = []
        for part in self.parts:
            if not lo <= starts[part] < hi or starts[part] == starts[part + 1]:
                continue  # an earlier rank holds its first node (or it has none)
            if starts[part + 1] <= hi:
                ids = self.orig_id[starts[part] - lo:starts[part + 1] - lo]
            else:
                ids = ondisk.read_part(self.path, self.meta, part, ["orig_id"])["orig_id"]
            mine.append((part, hashlib.sha256(np.ascontiguousarray(ids, dtype="<i8").tobytes()).hexdigest()))
        empty = hashlib.sha256(b"").hexdigest()
        held = dict(pair for pairs in self.comm.allgather(mine) for pair in pairs)
        return [held.get(part, empty) for part in range(self.meta["num_parts"])]

    def local_node_ids(self) -> np.ndarray:
        """Local. Global ids owned by this rank."""
        return np.arange(*self.local_nodes, dtype=np.int64)

    # ------------------------------------------------------- any rank's rows
    def in_degrees(self, gids) -> np.ndarray:
        """Local. In-degree of any nodes (remote ones read through the windows)."""
        return self.in_edge_ranges(np.asarray(gids, dtype=np.int64))[1]

    def in_edge_ranges(self, gids):
        """Local. Where each node's in-edges sit in its owner's CSC: ``(begin, degree, owners)``.

        Node ``gids[i]``'s in-edges are positions ``begin[i]:begin[i] + degree[i]`` of rank
        ``owners[i]``'s CSC; ``owners`` is None when every node is this rank's own (then no
        window is read). Offsets of remote nodes come through the windows, two per node.
        """
        gids = np.asarray(gids, dtype=np.int64)
        start, end = self.local_nodes
        if gids.shape[0] == 0 or (int(gids.min()) >= start and int(gids.max()) < end):
            lids = gids - start if start else gids
            begin = self.indptr[lids]
            return begin, self.indptr[lids + 1] - begin, None
        owners = self.book.owner(gids)
        local = owners == self.comm.rank
        begin = np.empty(gids.shape[0], dtype=np.int64)
        degree = np.empty(gids.shape[0], dtype=np.int64)
        lids = gids[local] - start
        begin[local] = self.indptr[lids]
        degree[local] = self.indptr[lids + 1] - begin[local]
        remote = np.flatnonzero(~local)
        if self._halo is not None:
            remote = self._fill_from_halo(gids, remote, begin, degree)
        remote_owners = owners[remote]
        remote_lids = gids[remote] - self.book.starts[remote_owners]
        both = np.empty(2 * remote.shape[0], dtype=np.int64)
        self._indptr_win.read(np.repeat(remote_owners, 2),
                              np.stack([remote_lids, remote_lids + 1], axis=1).reshape(-1), both)
        begin[remote] = both[0::2]
        degree[remote] = both[1::2] - both[0::2]
        return begin, degree, owners

    def _fill_from_halo(self, gids, remote, begin, degree):
        """Offsets of the ``remote`` positions of ``gids`` known from the halo; returns the rest.
        (Node-local peers are in ``remote`` too: their offsets are read from shared memory.)"""
        halo_gids, halo_begin, halo_degree = self._halo
        if not halo_gids.shape[0]:
            return remote
        slot = np.minimum(np.searchsorted(halo_gids, gids[remote]), halo_gids.shape[0] - 1)
        hit = halo_gids[slot] == gids[remote]
        begin[remote[hit]] = halo_begin[slot[hit]]
        degree[remote[hit]] = halo_degree[slot[hit]]
        return remote[~hit]

    def edges_at(self, owners, counts, positions):
        """Local. ``(src_gids, eids)`` of CSC ``positions``, grouped by node as ``counts`` says.

        ``owners`` (per node, or None for all local) comes from :meth:`in_edge_ranges`; sources
        of remote nodes are read through the windows, one request per owner.
        """
        if owners is None:
            return self.indices[positions].astype(np.int64, copy=False), positions + self.local_edges[0]
        edge_owner = np.repeat(owners, counts)
        src = np.empty(positions.shape[0], dtype=np.int64)
        mine = edge_owner == self.comm.rank
        src[mine] = self.indices[positions[mine]]
        if not mine.all():
            theirs = np.flatnonzero(~mine)
            remote = np.empty(theirs.shape[0], dtype=self._indices_win.dtype)
            src[theirs] = self._indices_win.read(edge_owner[theirs], positions[theirs], remote)
        return src, self.edge_book.starts[edge_owner] + positions

    def node_csc(self):
        """Local. Every rank's CSC read in place, when this machine's memory holds them all (one
        node): ``(indptr, indptr_row, indices, indices_row)``, rank ``r``'s offsets starting at
        ``indptr[indptr_row[r]]`` and its sources at ``indices[indices_row[r]]``; else None."""
        ranks = np.arange(self.num_parts, dtype=np.int64)
        indptr_row = self._indptr_win.node_table_rows(ranks, np.zeros_like(ranks))
        indices_row = self._indices_win.node_table_rows(ranks, np.zeros_like(ranks))
        if indptr_row is None or indices_row is None:
            return None
        return self._indptr_win.node_table, indptr_row, self._indices_win.node_table, indices_row

    def sample_neighbors(self, seeds, fanout, replace=False, prob=None, seed=0) -> Neighbors:
        """Local. Pick ``fanout`` in-neighbours of every node in ``seeds`` (any owner).

        Parameters
        ----------
        seeds : array of int64
            Global ids (repeats allowed).
        fanout : int
            Picks per node; -1 takes every in-edge (every positive-weight one when weighted).
        replace : bool
            Pick with replacement.
        prob : str, optional
            Name of an edge field holding non-negative sampling weights.
        seed : int
            Seed of the counter-based streams (see :mod:`hpcgnn._sample`): the same seed and
            seeds give the same picks on any number of ranks.
        """
        begin, degree, owners = self.in_edge_ranges(seeds)
        if prob is None:
            counts, positions = _sample.sample_positions(begin, degree, fanout, replace, seed)
        else:
            counts, positions = _sample.sample_positions_weighted(
                begin, degree, self._candidate_weights(prob, begin, degree, owners), fanout, replace, seed)
        src, eids = self.edges_at(owners, counts, positions)
        return Neighbors(counts, src, eids, degree)

    def _candidate_weights(self, prob, begin, degree, owners):
        """Every candidate in-edge's weight, node after node (remote rows through the window)."""
        positions = _csr.expand_ranges(begin, degree)
        owners = np.full(begin.shape[0], self.comm.rank, dtype=np.int64) if owners is None else owners
        eids = self.edge_book.starts[np.repeat(owners, degree)] + positions
        return self.edata[prob].gather(eids).astype(np.float64, copy=False).reshape(-1)

    def in_edges(self, gids):
        """Local. All in-edges of any nodes: ``(offsets, src_gids, eids)`` in CSR form over ``gids``.

        Edges of node ``gids[i]`` are ``offsets[i]:offsets[i+1]``; ``eids`` are global edge ids.
        """
        begin, degree, owners = self.in_edge_ranges(gids)
        if owners is None:
            src = _csr.gather_ranges(self.indices, begin, degree)
            eids = _csr.expand_ranges(begin + self.local_edges[0], degree)
        else:
            rows = self._indices_win.node_table_rows(owners, begin)
            if rows is None:  # some rows on other nodes: one read per owner through the window
                src, eids = self.edges_at(owners, degree, _csr.expand_ranges(begin, degree))
            else:  # every row in this node's memory: one contiguous copy per row
                src = _csr.gather_ranges(self._indices_win.node_table, rows, degree)
                eids = _csr.expand_ranges(self.edge_book.starts[owners] + begin, degree)
        offsets = np.zeros(degree.shape[0] + 1, dtype=np.int64)
        np.cumsum(degree, out=offsets[1:])
        return offsets, src, eids

    def network_bytes(self) -> int:
        """Local. Bytes this rank has read from (or written to) other nodes through the graph's
        windows: adjacency and every field."""
        tensors = self._tensors()
        return sum(w.network_bytes for w in [t.window for t in tensors] + [self._indptr_win, self._indices_win])

    # -------------------------------------------------------------- lifetime
    def barrier(self):
        """Collective over comm. Complete every rank's writes to the graph's fields (``ndata``,
        ``edata``, ``typed_ndata``) and make them visible to every rank, as :meth:`DistTensor.barrier` does for one."""
        tensors = self._tensors()
        sync_windows(self.comm, [t.window for t in tensors] + [self._indptr_win, self._indices_win])

    def close(self):
        """Collective over comm. Stop the progress thread, free every window of the graph and its fields."""
        if self.progress is not None:
            self.progress.close()
            self.progress = None
        for tensor in self._tensors():
            tensor.close()
        self._indices_win.close()
        self._indptr_win.close()
        if self._ncomm is not None:
            self._ncomm.Free()
            self._ncomm = None
        self.ndata, self.edata, self.typed_ndata = {}, {}, {}

    def _tensors(self) -> list:
        """Every field of the graph: node, edge and per-type node fields."""
        typed = [tensor for fields in self.typed_ndata.values() for tensor in fields.values()]
        return list(self.ndata.values()) + list(self.edata.values()) + typed


    def __repr__(self):
        return (f"DistGraph({self.name!r}, nodes={self.num_nodes:,}, edges={self.num_edges:,}, "
                f"parts={self.num_parts}, rank={self.comm.rank}, local_nodes={self.local_nodes})")
