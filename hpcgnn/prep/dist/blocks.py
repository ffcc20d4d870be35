"""Arrays spread over the ranks in contiguous blocks of global ids, and the exchanges on them.

Rank ``r`` owns ids ``[starts[r], starts[r+1])`` of every block-distributed array (nodes of
the input, clusters, coarse vertices). :func:`fetch` reads the owners' values of any ids,
:func:`add_to_owners` sums contributions into them, and :class:`Ghosts` repeats one fixed
read pattern cheaply (a vertex's neighbours' labels, round after round).
"""
from __future__ import annotations

import numpy as np

from hpcgnn.runtime.collectives import exchange
from hpcgnn.runtime.comm import mpi


def block_starts(total: int, size: int) -> np.ndarray:
    """Local. ``[size + 1]`` starts of ``size`` near-equal blocks of ``total`` ids."""
    return (np.arange(size + 1, dtype=np.int64) * int(total)) // size


def weighted_starts(weights, size: int) -> np.ndarray:
    """Local. ``[size + 1]`` starts of ``size`` contiguous blocks of ``len(weights)`` ids whose
    summed ``weights`` (non-negative) are near-equal: block ``r`` ends at the first id where the
    running sum reaches ``(r + 1) / size`` of the total."""
    total = np.cumsum(np.asarray(weights, dtype=np.int64))
    targets = (np.arange(1, size, dtype=np.int64) * int(total[-1] if total.shape[0] else 0)) // size
    cuts = np.searchsorted(total, targets, side="left") + 1
    return np.concatenate([[0], np.minimum(cuts, total.shape[0]), [total.shape[0]]]).astype(np.int64)


def owner_of(ids, starts) -> np.ndarray:
    """Local. The rank whose block holds each id."""
    return np.searchsorted(starts, ids, side="right").astype(np.int64) - 1


def starts_from_counts(counts) -> np.ndarray:
    """Local. Block starts from each rank's count (``[0, c0, c0 + c1, ...]``)."""
    return np.concatenate([[0], np.cumsum(np.asarray(counts, dtype=np.int64))]).astype(np.int64)


def gathered_starts(comm, count: int) -> np.ndarray:
    """Collective over comm. Block starts when this rank holds ``count`` consecutive ids."""
    counts = np.zeros(comm.size, dtype=np.int64)
    comm.Allgather(np.array([count], dtype=np.int64), counts)
    return starts_from_counts(counts)


def _route(comm, owners):
    """Sort order, send counts and receive counts of rows going to ``owners``."""
    order = np.argsort(owners, kind="stable")
    send = np.bincount(owners, minlength=comm.size).astype(np.int64)
    recv = np.empty_like(send)
    comm.Alltoall(send, recv)
    return order, send, recv


def fetch(comm, ids, starts, local_values) -> np.ndarray:
    """Collective over comm. ``values[ids]`` of a block-distributed array.

    ``local_values`` holds this rank's block (row ``i`` is id ``starts[rank] + i``); rows may
    have any trailing shape. Two all-to-all exchanges: ids to their owners, values back.
    """
    local_values = np.asarray(local_values)
    return ask_owners(comm, ids, starts, local_values.__getitem__)


def fetch_in_steps(comm, ids, starts, local_values, step=1 << 22) -> np.ndarray:
    """Collective over comm. :func:`fetch`, ``step`` ids at a time: an exchange holds about
    50 bytes per id in flight, so a rank's edges' worth at once would be the largest
    allocation of a step that otherwise holds a few bytes per edge. Every rank takes as many
    steps as the rank with the most ids (its last ones empty)."""
    ids = np.asarray(ids)
    local_values = np.asarray(local_values)
    steps = int(comm.allreduce(-(-ids.shape[0] // step), op=mpi().MAX))
    out = np.empty((ids.shape[0], *local_values.shape[1:]), dtype=local_values.dtype)
    for lo in range(0, steps * step, step):
        out[lo:lo + step] = fetch(comm, ids[lo:lo + step], starts, local_values)
    return out


def ask_owners(comm, ids, starts, answer, *payloads) -> np.ndarray:
    """Collective over comm. Send requests about ``ids`` (with a row of every payload each) to
    the ids' owners; each owner calls ``answer(local_ids, *payload_rows)`` once on all it
    received (grouped by sender) and returns one answer per request; the answers come back in
    the order of ``ids``."""
    ids = np.asarray(ids, dtype=np.int64)
    order, send, recv = _route(comm, owner_of(ids, starts))
    asked = exchange(comm, ids[order], send, recv) - starts[comm.rank]
    rows = [exchange(comm, np.asarray(p)[order], send, recv) for p in payloads]
    answers = np.asarray(answer(asked, *rows))
    back = exchange(comm, answers, recv, send)
    out = np.empty((ids.shape[0], *answers.shape[1:]), dtype=answers.dtype)
    out[order] = back
    return out


def add_to_owners(comm, ids, values, starts) -> np.ndarray:
    """Collective over comm. This rank's block of the sum of ``values`` scattered to ``ids``
    from every rank (an unbuffered ``np.add.at`` across ranks)."""
    ids = np.asarray(ids, dtype=np.int64)
    values = np.asarray(values)
    order, send, recv = _route(comm, owner_of(ids, starts))
    got_ids = exchange(comm, ids[order], send, recv)
    got = exchange(comm, values[order], send, recv)
    total = np.zeros((int(starts[comm.rank + 1] - starts[comm.rank]), *values.shape[1:]), dtype=values.dtype)
    np.add.at(total, got_ids - starts[comm.rank], got)
    return total


def send_to_owners(comm, owners, *arrays):
    """Collective over comm. Row ``i`` of every array to rank ``owners[i]``; returns the rows
    received, grouped by sender in rank order, each sender's rows in their original order."""
    order, send, recv = _route(comm, np.asarray(owners, dtype=np.int64))
    return tuple(exchange(comm, np.asarray(a)[order], send, recv) for a in arrays)


class Ghosts:
    """Collective over comm. A fixed read pattern of a block-distributed array: the values of
    ``ids`` (with repeats), pulled again and again as the owners' values change.

    ``pull(local_values)`` returns one value per entry of ``ids``. The ids are deduplicated
    once, so each round moves every distinct id's value once, in one exchange.
    """

    def __init__(self, comm, ids, starts):
        self.comm = comm
        self.starts = starts
        unique, index = np.unique(np.asarray(ids, dtype=np.int64), return_inverse=True)
        # one entry per edge, kept for every round: half the bytes while the ids allow
        self.index = index.astype(np.int32) if unique.shape[0] < 2**31 else index
        del index
        self.order, self.send, self.recv = _route(comm, owner_of(unique, starts))
        self.asked = exchange(comm, unique[self.order], self.send, self.recv) - starts[comm.rank]
        self.num_unique = unique.shape[0]

    def pull(self, local_values) -> np.ndarray:
        """Collective over comm. The current value of every id, from ``local_values`` (this
        rank's block) on each owner."""
        local_values = np.asarray(local_values)
        answers = exchange(self.comm, local_values[self.asked], self.recv, self.send)
        values = np.empty((self.num_unique, *local_values.shape[1:]), dtype=local_values.dtype)
        values[self.order] = answers
        return values[self.index]
