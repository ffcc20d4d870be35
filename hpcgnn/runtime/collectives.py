"""The collectives every distributed piece shares: reductions, broadcasts, the all-to-all
exchange of rows by owning rank, and failing together.

Each takes ``comm`` explicitly and works on numpy arrays (torch tensors are passed as
``tensor.numpy()`` views by the caller), so this layer knows nothing of graphs or models.
"""
from __future__ import annotations

import numpy as np

from hpcgnn.runtime.comm import mpi
from hpcgnn.runtime.errors import InputError


def allreduce_(array: np.ndarray, comm, average=False) -> np.ndarray:
    """Collective over comm. In-place sum (or mean) of a C-contiguous numpy array over the ranks."""
    if not array.flags.c_contiguous:
        raise ValueError("allreduce_ needs a contiguous buffer")
    if comm.size > 1:
        comm.Allreduce(mpi().IN_PLACE, array, op=mpi().SUM)
        if average:
            array /= comm.size
    return array


def broadcast_(arrays, comm, root=0):
    """Collective over comm. Overwrite every rank's arrays with ``root``'s, in order."""
    if comm.size > 1:
        for array in arrays:
            comm.Bcast(array, root=root)


def allgather_int(value, comm) -> np.ndarray:
    """Collective over comm. Every rank's integer ``value``, as an int64 array indexed by rank."""
    out = np.zeros(comm.size, dtype=np.int64)
    comm.Allgather(np.array([value], dtype=np.int64), out)
    return out


def offsets(counts) -> np.ndarray:
    """Local. Exclusive prefix sum: where each of ``counts`` consecutive runs starts."""
    counts = np.asarray(counts, dtype=np.int64)
    out = np.zeros(counts.shape[0], dtype=np.int64)
    np.cumsum(counts[:-1], out=out[1:])
    return out


def exchange(comm, rows: np.ndarray, send_counts, recv_counts=None) -> np.ndarray:
    """Collective over comm. All-to-all of rows: the first ``send_counts[0]`` rows go to rank 0,
    the next ``send_counts[1]`` to rank 1, ...; returns the rows received, in rank order.

    Unless ``recv_counts`` is known, the counts travel first (one ``Alltoall``); the rows then
    go in one ``Alltoallv`` whose datatype is a whole row, so the element count of a large
    exchange never overflows MPI's int.
    """
    MPI = mpi()
    rows = np.ascontiguousarray(rows)
    send_counts = np.asarray(send_counts, dtype=np.int64)
    if recv_counts is None:
        recv_counts = np.empty_like(send_counts)
        comm.Alltoall(send_counts, recv_counts)
    received = np.empty((int(recv_counts.sum()), *rows.shape[1:]), dtype=rows.dtype)
    row_bytes = rows.dtype.itemsize * int(np.prod(rows.shape[1:], dtype=np.int64))
    if comm.size == 1:
        received[...] = rows
        return received
    rowtype = MPI.BYTE.Create_contiguous(max(row_bytes, 1)).Commit()
    try:
        comm.Alltoallv([rows.reshape(-1).view(np.uint8), (send_counts, offsets(send_counts)), rowtype],
                       [received.reshape(-1).view(np.uint8), (recv_counts, offsets(recv_counts)), rowtype])
    finally:
        rowtype.Free()
    return received


def exchange_by_owner(comm, owners: np.ndarray, *arrays):
    """Collective over comm. Send row ``i`` of every array to rank ``owners[i]``.

    Returns the arrays this rank received (rows grouped by sending rank, in rank order, each
    sender's rows in their original order).
    """
    owners = np.asarray(owners, dtype=np.int64)
    order = np.argsort(owners, kind="stable")
    send_counts = np.bincount(owners, minlength=comm.size).astype(np.int64)
    recv_counts = np.empty_like(send_counts)
    comm.Alltoall(send_counts, recv_counts)
    return tuple(exchange(comm, np.asarray(a)[order], send_counts, recv_counts) for a in arrays)


def fail_together(comm, error: Exception | None, where=None):
    """Collective over comm. Raise on every rank if any rank has an ``error``.

    The rank that failed re-raises its own error; the others raise an InputError naming the
    first failed rank and its message, so no rank is left waiting in a later collective.
    """
    messages = comm.allgather(None if error is None else str(error))
    if error is not None:
        raise error
    failed = [(r, m) for r, m in enumerate(messages) if m is not None]
    if failed:
        rank, message = failed[0]
        raise InputError(where, f"rank {rank} failed: {message}")
