"""The pipeline of ``hpcgnn partition`` (the command: :mod:`hpcgnn.cli.partition`): read a graph,
split it into parts, write the HDF5 dataset.

Pipeline: read -> clean up (``hpcgnn.prep.transform``) -> for link prediction, hold out
validation/test edges and draw their negatives (``--edge-split``, :mod:`hpcgnn.prep.edge_split`)
-> CSC of in-edges -> part assignment
(multi-constraint METIS or random) -> relabel so each part owns a contiguous id range -> one
HDF5 file per part -> ``meta.json`` last. Under ``mpirun -np P`` rank 0 reads and partitions
once, then every rank writes its own part files in parallel.
"""
from __future__ import annotations

import math
import os
import re
import time

import numpy as np

from hpcgnn import _csr
from hpcgnn._metis import part_graph_kway
from hpcgnn.format import ondisk
from hpcgnn.format.feat_dtype import FEAT_DTYPES, encode, encoding_of
from hpcgnn.format.fields import ORIG_ID
from hpcgnn.format.schema import ETYPE, TypeLayout, typed_field_name
from hpcgnn.prep.edge_digest import graph_digest
from hpcgnn.prep.edge_split import (
    DEFAULT_EVAL_NEGATIVES,
    PartLinks,
    hold_out_edges,
    parse_edge_split,
    parse_negatives_kind,
)
from hpcgnn.prep.graph import Graph
from hpcgnn.prep.kaminpar import part_graph_kaminpar
from hpcgnn.prep.part_files import (
    dataset_meta,
    field_specs,
    part_stats,
    schema_meta,
    type_imbalance,
    typed_field_specs,
    write_part_file,
)
from hpcgnn.prep.read import add_reader_arguments, detect_format, read_graph, reader_options
from hpcgnn.prep.transform import prepare
from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.files import (
    forget,
    make_parent_dir,
    make_temp_dir,
    remove_temp_dir,
    replace_dir,
    track_temporary,
)
from hpcgnn.runtime.flags import COUNT, MAX_PARTS, MAX_REPEATS, MAX_SECONDS, SEED, CommandParser, Domain
from hpcgnn.runtime.lock import FileLock, held_by_rank0
from hpcgnn.runtime.stages import silent
from hpcgnn.runtime.watchdog import DEFAULT_TIMEOUT_S

METHODS = ("metis", "random", "multilevel", "ldg", "kaminpar")
#: the methods run with the graph spread over the ranks (prep/dist)
SPREAD_METHODS = ("multilevel", "ldg")


def build_csc(graph: Graph):
    """Local. In-edge CSC of ``graph``: ``(indptr, src_ids, eids)`` grouped by destination."""
    return _csr.coo_to_csr(graph.dst, graph.src, graph.num_nodes)


#: what ``--balance`` may name: node count, in-degree (the edges a part stores and samples
#: from) and the members of each split (each rank's share of training, validation, test nodes)
BALANCE_CHOICES = ("nodes", "in_degree", "train", "val", "test")
DEFAULT_BALANCE = BALANCE_CHOICES


def parse_balance(text, where=None) -> tuple:
    """Local. ``--balance nodes,in_degree,train`` as a tuple of :data:`BALANCE_CHOICES`."""
    names = tuple(name.strip() for name in str(text).split(",") if name.strip())
    unknown = [name for name in names if name not in BALANCE_CHOICES]
    if unknown or not names:
        raise InputError(where, f"choose one or more of {','.join(BALANCE_CHOICES)}", "--balance", text)
    return tuple(dict.fromkeys(names))


def input_types(graph: Graph) -> np.ndarray | None:
    """Local. The node type id of every input node of a typed graph (its ids are numbered type by
    type: ``graph.type_offsets``), None for a homogeneous graph."""
    if graph.schema is None:
        return None
    counts = np.diff(np.asarray(graph.type_offsets, dtype=np.int64))
    return np.repeat(np.arange(counts.shape[0], dtype=np.int16), counts)


def balance_weights(graph: Graph, indptr, balance=DEFAULT_BALANCE):
    """Local. METIS vertex weights: one column per balanced quantity of ``balance`` (a split's
    column only when its mask selects some node). On a typed graph ``nodes`` is one column per
    node type that has nodes (``nodes@paper``, ...): each type's count is balanced across the parts,
    not only their sum.

    Returns ``(weights [N, ncon] int64, names)``.
    """
    columns, names = [], []
    types = input_types(graph)
    for name in balance:
        if name == "nodes" and types is not None:
            for index, node_type in enumerate(graph.schema.node_types):
                column = (types == index).astype(np.int64)
                if column.any():
                    columns.append(column)
                    names.append(f"nodes@{node_type}")
            continue
        if name == "nodes":
            column = np.ones(graph.num_nodes, dtype=np.int64)
        elif name == "in_degree":
            column = np.diff(indptr)
        else:
            mask = graph.ndata.get(f"{name}_mask")
            if mask is None or not mask.any():
                continue
            column = mask.astype(np.int64)
        columns.append(column)
        names.append(name if name in ("nodes", "in_degree") else f"{name}_mask")
    if not columns:  # only absent splits were named: balance node counts
        return np.ones((graph.num_nodes, 1), dtype=np.int64), ["nodes"]
    return np.stack(columns, axis=1), names


DEFAULT_KEEP_DEGREE = 16


def assign_parts(graph: Graph, csc, num_parts: int, method: str = "metis", seed: int = 0,
                 keep_degree: float = DEFAULT_KEEP_DEGREE, balance=DEFAULT_BALANCE, scratch_parent="."):
    """Local. The part of every node, and a description of how it was chosen.

    ``metis`` minimises the edge cut of the undirected graph under balance constraints on
    the quantities named by ``balance`` (default: node count, in-degree and train/val/test
    membership); ``kaminpar`` minimises it with KaMinPar on every core of the node, balancing
    one quantity (:mod:`hpcgnn.prep.kaminpar`, its scratch file under ``scratch_parent``);
    ``random`` deals nodes out in equal shares from a seeded permutation (the baseline; on a
    typed graph each node type's nodes are dealt out in equal shares).

    Before METIS, edges between two nodes of degree above ``keep_degree`` are thinned
    (``_csr.sparsify_symmetric``; 0 disables it). On power-law graphs this hands METIS a
    fraction of the edges, cutting its time and memory by 2-3x, while the cut measured on the
    full graph stays the same: see the README's partitioning table.
    """
    info = {"method": method, "seed": seed}
    if num_parts == 1:
        return np.zeros(graph.num_nodes, dtype=np.int64), info
    if method == "random":
        order = np.random.default_rng(seed).permutation(graph.num_nodes)
        parts = np.empty(graph.num_nodes, dtype=np.int64)
        types = input_types(graph)
        if types is None:
            parts[order] = np.arange(graph.num_nodes) * num_parts // graph.num_nodes
            return parts, info
        order = order[np.argsort(types[order], kind="stable")]  # each type's nodes, shuffled, type after type
        offsets = np.asarray(graph.type_offsets, dtype=np.int64)
        for first, end in zip(offsets[:-1], offsets[1:]):
            parts[order[first:end]] = np.arange(end - first) * num_parts // max(end - first, 1)
        return parts, info
    if method == "kaminpar" and graph.schema is not None:
        raise InputError(graph.source, "KaMinPar balances one quantity, a typed graph needs each node type's "
                         "count balanced: use --method metis (or random)", "--method", method)
    indptr, indices, _ = csc
    weights, names = balance_weights(graph, indptr, balance)
    if graph.symmetric:  # the in-edge CSC already is the undirected adjacency
        xadj, adjncy = _csr.drop_diagonal(indptr, indices)
    else:
        xadj, adjncy = _csr.symmetric_adjacency(indptr, indices, graph.num_nodes)
    undirected_edges = adjncy.shape[0] // 2
    if method == "kaminpar":
        info.update(constraints=names, undirected_edges=int(undirected_edges))
        return part_graph_kaminpar(xadj, adjncy, num_parts, weights, seed, scratch_parent=scratch_parent), info
    if keep_degree > 0:
        xadj, adjncy = _csr.sparsify_symmetric(xadj, adjncy, keep_degree, seed)
    info.update(constraints=names, keep_degree=keep_degree, undirected_edges=int(undirected_edges),
                metis_edges=int(adjncy.shape[0] // 2))
    parts = part_graph_kway(xadj, adjncy, num_parts, weights, seed)
    del xadj, adjncy
    return parts, info


class Relabeling:
    """Local. New ids that make part ``p`` own ``[node_starts[p], node_starts[p+1])``.

    Nodes keep their input order inside a part, so the mapping is deterministic. With ``link``
    (a graph's held-out edge sets), ``links`` holds them in the new ids, by part
    (:class:`~hpcgnn.prep.edge_split.PartLinks`); else it is None.

    With ``schema`` and ``types`` (a typed graph: each input node's type id) a part's nodes are
    ordered by (type, input id), so each (part, type) block is contiguous and ``layout`` is its
    :class:`~hpcgnn.format.schema.TypeLayout`; else ``layout`` is None.
    """

    def __init__(self, parts: np.ndarray, num_parts: int, link=None, schema=None, types=None):
        counts = np.bincount(parts, minlength=num_parts)
        self.node_starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.layout = None
        if schema is None:
            self.order = np.argsort(parts.astype(np.int16 if num_parts < 2**15 else np.int64),
                                    kind="stable")  # new id -> input id
        else:
            blocks = parts.astype(np.int64) * schema.num_types + types
            self.order = np.argsort(blocks, kind="stable")
            type_counts = np.bincount(blocks, minlength=num_parts * schema.num_types).reshape(num_parts, -1)
            self.layout = TypeLayout(schema, type_counts)
            del blocks
        self.new_id = np.empty(parts.shape[0], dtype=ondisk.id_dtype(parts.shape[0]))
        self.new_id[self.order] = np.arange(parts.shape[0], dtype=self.new_id.dtype)
        self.links = None if link is None else PartLinks(link, self.new_id, self.node_starts)

    def owned(self, part_id):
        return self.order[self.node_starts[part_id]:self.node_starts[part_id + 1]]


def part_arrays(graph: Graph, csc, relabel: Relabeling, part_id: int) -> dict:
    """Local. Every dataset of part ``part_id``'s file (see :mod:`hpcgnn.format.ondisk`).

    ``orig_id`` is each node's id in the input file: node field ``orig_id`` when a step
    numbered the nodes anew (:data:`~hpcgnn.format.fields.ORIG_ID`), else its id in ``graph``.
    """
    indptr, indices, eids = csc
    owned = relabel.owned(part_id)
    input_ids = graph.ndata.get(ORIG_ID)
    degree = indptr[owned + 1] - indptr[owned]
    positions = _csr.expand_ranges(indptr[owned], degree)
    part_eids = eids[positions]
    arrays = {
        "indptr": np.concatenate([[0], np.cumsum(degree)]).astype(np.int64),
        "indices": relabel.new_id[indices[positions]].astype(ondisk.id_dtype(graph.num_nodes), copy=False),
        "eid": part_eids.astype(ondisk.id_dtype(graph.num_edges)),
        "orig_id": (owned if input_ids is None else input_ids[owned]).astype(np.int64),
    }
    del positions
    for name, values in graph.ndata.items():
        if name == ORIG_ID:
            continue
        rows = values[owned]
        arrays[name] = rows.toarray() if hasattr(rows, "toarray") else rows
    for name, values in graph.edata.items():
        arrays[ondisk.EDGE_PREFIX + name] = values[part_eids]
    if relabel.layout is not None:
        arrays.update(_typed_rows(graph, relabel, part_id))
    if relabel.links is not None:
        arrays.update(relabel.links.part_arrays(part_id))
    return arrays


def _typed_rows(graph: Graph, relabel: Relabeling, part_id: int) -> dict:
    """Part ``part_id``'s rows of every per-type node field (``feat@paper``, ...), in new-id order;
    a sparse field densified for this part alone."""
    arrays = {}
    for type_index, node_type in enumerate(graph.schema.node_types):
        fields = graph.typed_fields.get(node_type)
        if not fields:
            continue
        start, end = relabel.layout.block_range(part_id, type_index)
        rows = relabel.order[start:end] - graph.type_offsets[type_index]  # ids among this type's input nodes
        for field, values in fields.items():
            picked = values.tocsr()[rows] if hasattr(values, "tocsr") else np.asarray(values)[rows]
            arrays[typed_field_name(node_type, field)] = picked.toarray() if hasattr(picked, "toarray") else picked
    return arrays


def partition_graph(graph: Graph | None, out_dir, num_parts: int, method="metis", seed=0,
                    comm=None, source=None, release_input=False,
                    keep_degree=DEFAULT_KEEP_DEGREE, checksums=True, log=silent,
                    balance=DEFAULT_BALANCE, feat_dtype="float32") -> dict | None:
    """Collective over comm. Partition ``graph`` and write the dataset to ``out_dir``.

    A typed graph (``graph.schema`` set: :func:`hpcgnn.prep.typed.typed_graph`) is written in the
    typed layout: each part's nodes ordered by type, meta.json's ``schema`` entry, the per-type
    fields as ``field@type`` datasets and the relation of every edge as edge field ``etype``
    (see :mod:`hpcgnn.format.ondisk`); METIS balances each node type's count.

    Parameters
    ----------
    graph : Graph or None
        The input graph; only rank 0's is used (other ranks may pass None). Its held-out edge
        sets (``graph.link``, from :func:`~hpcgnn.prep.edge_split.hold_out_edges`) are written
        too: ``link_*`` datasets per part and meta.json's ``link`` (see :mod:`hpcgnn.format.ondisk`).
    out_dir : path
        Destination directory, replaced atomically (written to a temporary sibling first).
    num_parts : int
        Number of parts. Rank r of comm writes parts r, r + size, ...
    method : {"metis", "random"}
    seed : int
        Seed of METIS or of the random assignment.
    comm : mpi4py communicator or None
        None runs serially in this process.
    source : dict, optional
        Provenance recorded in meta.json (input path, format, clean-up options).
    release_input : bool
        Drop ``graph.src``/``graph.dst`` once the CSC is built, to lower peak memory.
    keep_degree : float
        Hub-edge thinning threshold before METIS (see :func:`assign_parts`); 0 disables it.
    balance : tuple of str
        What METIS keeps balanced across parts (:data:`BALANCE_CHOICES`; recorded in
        meta.json as ``partitioner.constraints``).
    checksums : bool
        Per-chunk fletcher32 checksums on every dataset (default); False writes the contiguous
        layout of datasets made before checksums (``bench/checksum.py`` compares the two).
    log : callable
        ``log(line)`` after each stage on rank 0 (CSC, part assignment, part files); a
        :class:`~hpcgnn.runtime.stages.StageLog` prints it with the stage's time.
    feat_dtype : str
        How ``feat`` is stored (:data:`~hpcgnn.format.feat_dtype.FEAT_DTYPES`): float32, or the
        2-byte bfloat16 or float16 (:mod:`hpcgnn.format.feat_dtype`); on a typed graph every
        type's ``feat`` too.

    Returns
    -------
    dict or None
        The meta.json content on rank 0, None elsewhere.
    """
    rank, size = (comm.rank, comm.size) if comm is not None else (0, 1)
    out_dir = os.path.abspath(os.fspath(out_dir))
    timings = {}
    csc = relabel = info = edge_digest = None  # built on rank 0 only
    if rank == 0:
        t0 = time.perf_counter()
        # what the part files must hold, taken from the edge list before any writer step touches it
        edge_digest = graph_digest(graph.src, graph.dst, graph.ndata.get(ORIG_ID))
        csc = build_csc(graph)
        log(f"in-edge CSC: {graph.num_nodes:,} nodes, {csc[1].shape[0]:,} edges")
        if release_input:
            graph.src = graph.dst = np.empty(0, dtype=np.int64)
        parts, info = assign_parts(graph, csc, num_parts, method, seed, keep_degree, balance,
                                   scratch_parent=os.path.dirname(os.path.abspath(out_dir)))
        log(f"{method} assignment: {num_parts} parts" + (
            f", METIS given {info['metis_edges']:,} of {info['undirected_edges']:,} undirected edges"
            if "metis_edges" in info else ""))
        timings["assign_s"] = time.perf_counter() - t0
        relabel = Relabeling(parts, num_parts, graph.link, graph.schema, input_types(graph))
        del parts
        edge_counts = [int(csc[0][relabel.owned(p) + 1].sum() - csc[0][relabel.owned(p)].sum())
                       for p in range(num_parts)]
        edge_starts = np.concatenate([[0], np.cumsum(edge_counts)]).astype(np.int64)
        tmp_dir = make_temp_dir(out_dir)
        version = ondisk.FORMAT_VERSION if graph.schema is None else ondisk.TYPED_VERSION
        plan = (tmp_dir, relabel.node_starts, edge_starts, version)
    else:
        plan = None
    if comm is not None:
        plan = comm.bcast(plan, root=0)
    tmp_dir, node_starts, edge_starts, version = plan
    track_temporary(tmp_dir)  # whichever rank ends the job (a signal, a failure) removes it
    if comm is not None:  # no part file is written before every rank tracks the directory
        comm.Barrier()

    try:
        meta = _write_dataset(graph, csc, relabel, info, tmp_dir, num_parts, node_starts,
                              edge_starts, comm, source, timings, checksums, log, feat_dtype, edge_digest, version)
    except BaseException:
        remove_temp_dir(tmp_dir)
        raise
    if rank != 0:
        comm.barrier()
        forget(tmp_dir)  # renamed into place by rank 0
        return None
    replace_dir(tmp_dir, out_dir)
    if comm is not None:
        comm.barrier()
    return meta


def _write_dataset(graph, csc, relabel, info, tmp_dir, num_parts, node_starts, edge_starts, comm,
                   source, timings, checksums=True, log=silent, feat_dtype="float32", edge_digest=None,
                   version=ondisk.FORMAT_VERSION):
    """Write the part files (rank r writes parts r, r + size, ...) and, on rank 0, meta.json
    (with ``edge_digest``, rank 0's :class:`~hpcgnn.prep.edge_digest.EdgeDigest` of the edges)."""
    rank, size = (comm.rank, comm.size) if comm is not None else (0, 1)
    t0 = time.perf_counter()
    written, stats, specs, typed_specs = [], [], None, None
    for part_id in range(num_parts):
        writer = part_id % size
        if rank == 0:
            arrays = part_arrays(graph, csc, relabel, part_id)
            for name in feat_names(arrays) if feat_dtype != "float32" else ():
                # per part: never a second copy of all features
                arrays[name] = encode(arrays[name], feat_dtype, (source or {}).get("input"))
            stats.append(part_stats(arrays, node_starts[part_id], node_starts[part_id + 1]))
            if specs is None:
                encodings = {name: encoding_of(feat_dtype) for name in feat_names(arrays)}
                specs = field_specs(arrays, encodings)
                typed_specs = typed_field_specs(arrays, graph.schema, encodings) if graph.schema else None
            if writer != 0:
                _send_arrays(comm, arrays, writer)
                continue
        elif writer == rank:
            arrays = _recv_arrays(comm, 0)
        else:
            continue
        written.append((part_id, write_part_file(tmp_dir, arrays, part_id, num_parts, node_starts,
                                                 edge_starts[part_id], checksums, version)))
        del arrays
    if comm is not None:
        gathered = comm.gather(written, root=0)
        written = [item for chunk in gathered for item in chunk] if rank == 0 else None
    timings["write_s"] = time.perf_counter() - t0
    if rank != 0:
        return None
    log(f"write {num_parts} part files from {size} rank{'s' if size > 1 else ''}")

    meta = dataset_meta(graph.name, graph.num_nodes, node_starts, edge_starts, stats, dict(written), specs,
                        dict(info, writers=size, **{k: round(v, 3) for k, v in timings.items()}), source,
                        edge_digest)
    if graph.link is not None:
        meta["link"] = graph.link.meta()
    if graph.schema is not None:
        relation_counts = np.bincount(graph.edata[ETYPE], minlength=graph.schema.num_relations)
        meta["version"] = version
        meta["schema"] = schema_meta(relation_counts, relabel.layout, typed_specs)
        meta["partitioner"]["imbalance"].update(type_imbalance(relabel.layout))
    ondisk.write_meta(tmp_dir, meta)
    return meta


def feat_names(arrays) -> list:
    """Local. The datasets ``--feat-dtype`` stores compactly: ``feat`` and every type's ``feat@type``."""
    return [name for name in arrays if name == "feat" or name.startswith("feat@")]


def _send_arrays(comm, arrays, dest):
    comm.send([(k, v.dtype.str, v.shape) for k, v in arrays.items()], dest=dest, tag=1)
    for value in arrays.values():
        comm.Send(np.ascontiguousarray(value).reshape(-1).view(np.uint8), dest=dest, tag=2)


def _recv_arrays(comm, source):
    arrays = {}
    for name, dtype, shape in comm.recv(source=source, tag=1):
        value = np.empty(shape, dtype=np.dtype(dtype))
        comm.Recv(value.reshape(-1).view(np.uint8), source=source, tag=2)
        arrays[name] = value
    return arrays


#: ``--split per-class:T,V``
PER_CLASS_SPLIT = re.compile(r"per-class:(\d+),(\d+)")


def parse_node_split(text):
    """Local. ``--split``: ``dataset``, fractions ``T,V,E`` (finite, >= 0, summing to at most 1) or
    ``per-class:T,V``, kept as written (:func:`hpcgnn.prep.transform.apply_split` draws it); a split
    that could train on no node (T = 0) is refused in one line."""
    text = str(text).strip()
    if text == "dataset":
        return text
    per_class = PER_CLASS_SPLIT.fullmatch(text)
    if per_class:
        if int(per_class.group(1)) < 1:
            raise InputError(None, "per-class:T,V needs T >= 1 training nodes per class (T = 0 trains on "
                             "nothing)", "--split", text)
        return text
    try:
        fractions = [float(x) for x in text.split(",")]
    except ValueError:
        fractions = []
    if len(fractions) != 3 or not all(math.isfinite(f) and f >= 0 for f in fractions) or sum(fractions) > 1 + 1e-9:
        raise InputError(None, "expected 'dataset', three fractions T,V,E (each >= 0, summing to at most 1) "
                         "or 'per-class:T,V'", "--split", text)
    if fractions[0] <= 0:
        raise InputError(None, "the training fraction T of T,V,E must be above 0 (0 trains on nothing)",
                         "--split", text)
    return text


def build_parser():
    """Local. The ``hpcgnn partition`` argument parser."""
    parser = CommandParser(
        prog="hpcgnn partition",
        description="Partition a graph into P parts and write meta.json + part-XXXXX.h5 files. "
                    "Run under 'mpirun -np K' to write the part files from K ranks in parallel.")
    parser.add_argument("input", help="graph file or directory (npz, edge list, Planetoid, Shchur npz, OGB raw dir)")
    parser.add_argument("--parts", "-p", type=Domain(int, ge=1, le=MAX_PARTS), required=True,
                        help="number of parts (= ranks of training)")
    parser.add_argument("--out", "-o", required=True, help="output directory")
    parser.add_argument("--method", choices=METHODS, default="metis",
                        help="metis: min edge cut under the --balance constraints, read and partitioned on "
                             "rank 0; random: baseline; multilevel: every rank reads a slice, cleans and "
                             "partitions with the graph spread over the ranks (coarsened until METIS "
                             "fits one rank), for graphs one node cannot hold; ldg: the same pipeline with a "
                             "one-pass streaming greedy instead (fast, higher cut); kaminpar: KaMinPar on every "
                             "core of rank 0's node (pip install kaminpar), one --balance quantity")
    parser.add_argument("--coarse-nodes", type=COUNT, default=None, metavar="N",
                        help="multilevel: coarsen toward N vertices, then run METIS on rank 0 (rank 0's memory "
                             "grows with N, the cut falls; clusters stay light enough for METIS to balance, "
                             "so coarsening may stop above N) (default 100000)")
    parser.add_argument("--balance", type=parse_balance, default=None, metavar="LIST",
                        help=f"what METIS keeps within 3%% across parts, any of {','.join(BALANCE_CHOICES)} "
                             "(on a typed graph nodes balances each node type's count; "
                             "fewer constraints cut fewer edges; in_degree evens the edges each rank "
                             "samples from: see the README's Partitioning section) (default: all; nodes with "
                             "--method kaminpar, which balances one)")
    parser.add_argument("--seed", type=SEED, default=0, help="seed of METIS or of the random method")
    parser.add_argument("--keep-degree", type=Domain(float, gt=0, special={0: "every edge"}),
                        default=DEFAULT_KEEP_DEGREE,
                        help="before METIS, thin edges between nodes both of degree above this "
                             "(hub-to-hub edges; power-law graphs partition 2-3x faster in a third "
                             "of the memory at the same cut); 0 gives METIS every edge")
    parser.add_argument("--feat-dtype", choices=FEAT_DTYPES, default="float32",
                        help="how node features are stored: bfloat16 and float16 take 2 bytes a value, halving "
                             "the part files, each rank's feature memory and the bytes batches gather and RMA moves "
                             "(training reads them as float32, or as bfloat16 under --precision bf16)")
    parser.add_argument("--name", help="graph name recorded in meta.json (default: input file name)")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing output directory (never one another run is writing: the "
                             "output is locked while a run writes it)")
    parser.add_argument("--watchdog-s", type=Domain(float, gt=0, le=MAX_SECONDS, special={0: "never"}),
                        default=DEFAULT_TIMEOUT_S,
                        help="under MPI, end the job naming the rank when a rank stops answering (stopped, "
                             "frozen, or never through MPI_Init) for this many seconds; ranks waiting on rank 0's "
                             "reading and partitioning are not stopped (0: never)")
    clean = parser.add_argument_group("clean-up (applied in this order)")
    clean.add_argument("--remove-self-loops", action="store_true")
    clean.add_argument("--symmetrize", action="store_true",
                       help="add reverse edges; the result is a simple graph (implies dedup)")
    clean.add_argument("--dedup", action="store_true", help="keep one edge per (src, dst)")
    clean.add_argument("--largest-component", action="store_true",
                       help="keep the largest weakly connected component")
    clean.add_argument("--split", type=parse_node_split, default=None,
                       help="'dataset' (default: the input's masks), 'a,b,c' random fractions, "
                            "or 'per-class:T,V' (T train and V validation per class, rest test); "
                            "required for a labelled input without a train_mask")
    clean.add_argument("--split-seed", type=SEED, default=0,
                       help="seed of a random --split, and of --edge-split's held-out edges and negatives")
    clean.add_argument("--normalize-features", action="store_true",
                       help="scale each feature row to sum 1 (Kipf & Welling's Planetoid preprocessing)")
    links = parser.add_argument_group("link prediction (held-out edges, after the clean-up)")
    links.add_argument("--edge-split", type=parse_edge_split, default=None, metavar="T,V,E",
                       help="hold out edges: train,val,test fractions summing to 1 (e.g. 0.85,0.05,0.1; "
                            "an undirected edge is one unit on a --symmetrize'd graph), or 'dataset' for "
                            "the input's own edge split (OGB link datasets); seeded by --split-seed")
    links.add_argument("--eval-negatives", type=Domain(int, ge=1, le=MAX_REPEATS), default=None, metavar="K",
                       help="negatives per validation/test edge, drawn once: uniform destinations that "
                            "are not edges of the graph (default: 100, or the dataset's own)")
    links.add_argument("--eval-negatives-kind", type=parse_negatives_kind, default=None, metavar="KIND",
                       help="corrupt: (u, n) beside each positive (u, v), OGB's protocol (default); uniform: "
                            "random pairs (m, n), the graph auto-encoder's protocol")
    add_reader_arguments(parser)
    return parser


def output_lock(comm, out_dir):
    """Collective over comm (None: this process alone). Hold the lock of the output directory
    ``out_dir`` (``.<name>.lock`` beside it, :class:`~hpcgnn.runtime.lock.FileLock`) on rank 0
    while the body runs: a second run writing the same output is refused in one line naming
    the holder, ``--force`` or not (two runs would each replace the other's dataset)."""
    path = os.path.join(os.path.dirname(out_dir), "." + os.path.basename(out_dir) + ".lock")
    in_use = f"the output {out_dir} is being written by another partition run"
    remedy = "wait for it to end (the lock of a run that died is taken over by the next run)"

    def take():
        make_parent_dir(out_dir)  # an impossible output is refused naming it, not its lock
        return FileLock(path, in_use=in_use, remedy=remedy)

    return held_by_rank0(comm, take, out_dir)


def load_prepared(args, log=silent):
    """Local. Read the input named on the command line and apply the clean-up options
    (``log(line)`` after reading and after each clean-up step)."""
    t0 = time.perf_counter()
    fmt_name = args.format or detect_format(args.input)
    graph = read_graph(args.input, format=fmt_name, **reader_options(args, format=fmt_name))
    if args.name:
        graph.name = args.name
    read_s = time.perf_counter() - t0
    log(f"read {args.input} ({fmt_name}): {graph.num_nodes:,} nodes, {graph.num_edges:,} edges")
    check_trainable(graph, args.input, args.split, link=args.edge_split is not None)
    notes = graph.notes
    t0 = time.perf_counter()
    graph = prepare(graph, symmetrize_edges=args.symmetrize, drop_self_loops=args.remove_self_loops,
                    dedup_edges=args.dedup, largest_cc=args.largest_component, split=args.split,
                    split_seed=args.split_seed, normalize=args.normalize_features, log=log)
    check_drawn_split(graph, args.input, args.split)
    graph = apply_edge_split(graph, args, log)
    source = {"input": os.path.basename(os.path.normpath(args.input)), "format": fmt_name,
              "symmetrize": args.symmetrize, "remove_self_loops": args.remove_self_loops,
              "dedup": args.dedup, "largest_component": args.largest_component,
              "split": args.split or "dataset", "split_seed": args.split_seed,
              "normalize_features": args.normalize_features, "edge_split": _shown_edge_split(args.edge_split),
              "read_s": round(read_s, 3), "prepare_s": round(time.perf_counter() - t0, 3)}
    if notes:
        source["reader"] = notes
    return graph, source


def apply_edge_split(graph: Graph, args, log=silent) -> Graph:
    """Local. ``--edge-split``: hold out validation/test edges with their negatives
    (:func:`~hpcgnn.prep.edge_split.hold_out_edges`). Without it a reader's own edge split is
    dropped, with a note naming the flag that keeps it."""
    if args.edge_split is None:
        if graph.link is not None:
            print(f"hpcgnn partition: note: {args.input} has its own edge split (link prediction); "
                  "pass --edge-split dataset to keep it", flush=True)
            graph.link = None
        return graph
    if graph.schema is not None:
        raise InputError(args.input, "held-out edges of a typed graph are not supported (they would have to be "
                         "drawn per relation)", "--edge-split", _shown_edge_split(args.edge_split))
    k = args.eval_negatives if args.eval_negatives is not None else DEFAULT_EVAL_NEGATIVES
    graph = hold_out_edges(graph, args.edge_split, k, args.split_seed, where=args.input,
                           negatives_kind=args.eval_negatives_kind or "corrupt")
    link = graph.link
    log(f"edge split {_shown_edge_split(args.edge_split)}: {link.num_train:,} train, {len(link.val):,} val, "
        f"{len(link.test):,} test {'undirected ' if link.symmetric else ''}edges, {link.eval_negatives} "
        f"{link.negatives_kind} negatives ({'drawn' if link.negatives == 'uniform' else 'from the dataset'}) each; "
        f"{graph.num_edges:,} edges left")
    return graph


def _shown_edge_split(spec):
    return spec if spec is None or isinstance(spec, str) else ",".join(f"{f:g}" for f in spec)


def check_trainable(graph: Graph, input_path, split, link=False):
    """Local. Refuse a labelled graph that would reach training without a split; note a featureless one.

    Labels without a (non-empty) ``train_mask`` leave training nothing to learn from, and
    ``train`` could only say so after the partitioning: unless ``--split`` was given (``dataset``
    partitions without masks on purpose, e.g. for inference) or the dataset is made for link
    prediction (``link``: ``--edge-split``, which uses no node split), this raises an InputError
    naming the remedy. A graph without ``feat`` is partitioned, with a printed note of the
    training flag it will need; so are the class names a reader found.
    """
    train = graph.ndata.get("train_mask")
    if "label" in graph.ndata and split is None and not link and (train is None or not train.any()):
        raise InputError(input_path, "has labels but no training nodes (no train_mask): draw a split with "
                         "--split 0.6,0.2,0.2 (or per-class:20,30; --split dataset partitions without masks; "
                         "link prediction needs no node split: --edge-split T,V,E)", "train_mask", None)
    if graph.schema is not None:
        bare = [t for t in graph.schema.node_types if "feat" not in graph.typed_fields.get(t, {})]
        if bare:
            print(f"hpcgnn partition: note: node type(s) {', '.join(bare)} of {input_path} have no features "
                  "(feat); the model learns an embedding for their nodes", flush=True)
    elif "feat" not in graph.ndata:
        print(f"hpcgnn partition: note: {input_path} has no node features (feat); train with --embed-dim D "
              "to learn a D-wide embedding per node instead", flush=True)
    names = graph.notes.get("class_names")
    if names:
        shown = ", ".join(f"{index}={name}" for index, name in enumerate(names[:8]))
        shown += ", ..." if len(names) > 8 else ""
        print(f"hpcgnn partition: note: {len(names)} classes, label value = class: {shown} "
              "(all in meta.json source.reader.class_names)", flush=True)


def check_drawn_split(graph: Graph, input_path, split):
    """Local. Refuse a drawn ``--split`` that gave no node to train on (a fraction of a few
    labelled nodes rounds to none; every node may be unlabelled)."""
    if split in (None, "dataset"):
        return
    train = graph.ndata.get("train_mask")
    if train is None or not train.any():
        label = graph.ndata["label"]
        labelled = int((label >= 0).sum() if label.ndim == 1 else (label >= 0).all(axis=1).sum())
        raise InputError(input_path, f"the split selects no training node ({labelled} labelled nodes): give a "
                         "larger training fraction or per-class count", "--split", split)
