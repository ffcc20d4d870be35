"""One graph file (:mod:`hpcgnn.prep.read.h5graph`) written by every rank, each its own rows.

HDF5 without MPI-IO has one writer at a time, so the ranks take turns: rank 0 creates the file
under a temporary name with every dataset sized, then rank ``r`` writes its edge rows and its
node block in turn ``r``. Nothing is gathered; a rank holds only its own rows. Any rank's
failure fails every rank (:func:`~hpcgnn.runtime.collectives.fail_together`), and the
temporary file is removed: a reader never sees a half-written graph.
"""
from __future__ import annotations

import contextlib
import os

import numpy as np

from hpcgnn.format.ondisk import id_dtype
from hpcgnn.prep.read.h5graph import create_h5graph, write_rows
from hpcgnn.runtime.collectives import fail_together
from hpcgnn.runtime.comm import mpi
from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.files import atomic_path


def _specs(comm, arrays: dict, where):
    """Every rank's (dtype, row shape) of each array, checked to agree; rank 0's returned."""
    mine = {k: (np.dtype(v.dtype).str, tuple(v.shape[1:])) for k, v in arrays.items()}
    every = comm.allgather(mine)
    for rank, theirs in enumerate(every):
        if theirs != every[0]:
            field = next(iter(set(theirs.items()) ^ set(every[0].items())), ("fields",))[0]
            raise InputError(where, f"rank {rank} holds rows of another type or width than rank 0", field,
                             theirs.get(field))
    return {k: (np.dtype(d), shape) for k, (d, shape) in every[0].items()}


def _write_turns(comm, tmp, num_nodes, name, edge_first, edges, node_first, nodes, compress, where):
    num_edges = int(comm.allreduce(int(edges["src"].shape[0]), op=mpi().SUM))
    edge_specs = _specs(comm, {k[len("edge_"):]: v for k, v in edges.items() if k.startswith("edge_")}, where)
    node_specs = _specs(comm, nodes, where)
    error = None
    if comm.rank == 0:
        try:
            create_h5graph(tmp, num_nodes, num_edges, node_specs, edge_specs, name=name, compress=compress)
        except Exception as exc:  # noqa: BLE001 - every rank must hear of it
            error = exc
    fail_together(comm, error, where)
    ids = id_dtype(num_nodes)
    edges = {k: (v.astype(ids, copy=False) if k in ("src", "dst") else v) for k, v in edges.items()}
    for turn in range(comm.size):
        error = None
        if comm.rank == turn:
            try:
                write_rows(tmp, edge_first, edges, node_first, nodes)
            except Exception as exc:  # noqa: BLE001 - every rank must hear of it
                error = exc
        fail_together(comm, error, where)


def write_graph_file(comm, path, num_nodes, name, edge_first, edges: dict, node_first, nodes: dict,
                     compress=False):
    """Collective over comm. Write a graph file from rows spread over the ranks.

    Parameters
    ----------
    comm : MPI communicator
    path : str
        The ``.h5`` to write (atomically: a temporary name, renamed by rank 0 at the end).
    num_nodes : int
        Nodes of the whole graph.
    name : str
        The graph's name, stored in the file.
    edge_first, edges
        This rank's first edge row and its rows: ``src``, ``dst`` and ``edge_<field>`` arrays.
        The ranks' rows must tile ``[0, E)``.
    node_first, nodes
        This rank's first node row and its node field rows; the ranks' blocks tile ``[0, N)``.
    compress : bool
        gzip (level 1, byte shuffling) every dataset.
    """
    where = os.fspath(path)
    stack, tmp, error = contextlib.ExitStack(), None, None
    if comm.rank == 0:
        try:
            tmp = stack.enter_context(atomic_path(where, suffix=".h5"))
        except Exception as exc:  # noqa: BLE001 - every rank must hear of it
            error = exc
    fail_together(comm, error, where)
    tmp = comm.bcast(tmp, root=0)
    with stack:  # rank 0: renamed into place on success, removed on any failure
        _write_turns(comm, tmp, num_nodes, name, edge_first, edges, node_first, nodes, compress, where)
    comm.Barrier()  # the rename is done: every rank may read the file
