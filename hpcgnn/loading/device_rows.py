"""Feature rows resident on the device: a GPU rank gathers most of a batch's input rows there.

On the GPU path the feature rows are most of what a batch moves from host to GPU: 1000 seeds
with fanouts 10,25 on an RMAT graph read about 150k rows, 60 MB of a 100-wide float32 field,
per step and per rank, and the ranks that share a GPU share its host link too. So at the start
of a run, :class:`ResidentRows` copies once, into one device tensor, the rows this rank reads
without the network: its own part's first, then the other parts on its node (ranks in node
order), whole parts while they fit in the budget and a leading slice of the first one that does
not. A batch then carries the positions of its rows in that tensor (8 bytes a row) and the
device stage gathers them there; rows outside it (other nodes', or past the budget) are
gathered on the CPU as before and copied beside them.

The tensor holds exactly what a gather returns (the same read and decode, after the run's
feature scaling), so a batch's rows are the same bits either way: training with and without
resident rows gives the same losses.

Only a homogeneous field read by :class:`~hpcgnn.loading.fetch.FieldFetch` is kept; typed
graphs' per-type rows are gathered on the CPU.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from hpcgnn.store import float_rows

#: rows copied to the device per chunk at start-up (bounds the host memory it takes)
_CHUNK_BYTES = 64 * 2**20


def resident_ranges(book, rank, node_ranks, row_bytes, budget_bytes) -> list:
    """Local. The global id ranges ``(lo, hi)`` a rank keeps on its device, sorted and merged:
    its own part, then the other ``node_ranks`` in order, whole while they fit in
    ``budget_bytes`` and the first that does not cut to what fits."""
    left = int(budget_bytes) // max(int(row_bytes), 1)
    chosen = []
    for owner in [rank] + [int(r) for r in node_ranks if int(r) != rank]:
        if left <= 0:
            break
        lo, hi = int(book.starts[owner]), int(book.starts[owner + 1])
        hi = min(hi, lo + left)
        if hi > lo:
            chosen.append((lo, hi))
            left -= hi - lo
    merged = []
    for lo, hi in sorted(chosen):
        if merged and merged[-1][1] == lo:
            merged[-1] = (merged[-1][0], hi)
        else:
            merged.append((lo, hi))
    return merged


@dataclass
class BatchRows:
    """Local. A batch's feature rows as :class:`ResidentRows` splits them: ``slots``, the positions
    in the device table of the rows it holds; ``hit_at``, where those rows go in the batch (None:
    every row, in order); ``miss_at`` and ``miss_rows``, where the others go and their rows,
    gathered on the host (None when there are none)."""

    count: int
    slots: torch.Tensor
    hit_at: torch.Tensor | None = None
    miss_at: torch.Tensor | None = None
    miss_rows: torch.Tensor | None = None

    def arrays(self) -> list:
        """Local. The host tensors the stage copies to the device."""
        return [t for t in (self.slots, self.hit_at, self.miss_at, self.miss_rows) if t is not None]


class ResidentRows:
    """Local. One field's rows kept on ``device`` (see the module docstring).

    Parameters
    ----------
    field : DistTensor
        The feature field, read through its own ``gather`` (its encoding decoded as in a batch).
    ranges : list of (lo, hi)
        Sorted, disjoint global id ranges to keep (:func:`resident_ranges`).
    device : torch.device

    Attributes
    ----------
    table : torch.Tensor
        ``(rows, width)`` float32 on ``device``, the ranges' rows back to back.
    """

    def __init__(self, field, ranges, device):
        self.ranges = [(int(lo), int(hi)) for lo, hi in ranges]
        self.starts = np.array([lo for lo, _ in self.ranges], dtype=np.int64)
        self.ends = np.array([hi for _, hi in self.ranges], dtype=np.int64)
        self.bases = np.concatenate([[0], np.cumsum(self.ends - self.starts)]).astype(np.int64)
        width = int(np.prod(field.shape[1:], dtype=np.int64))
        self.table = torch.empty((int(self.bases[-1]), width), dtype=torch.float32, device=device)
        chunk = max(_CHUNK_BYTES // max(4 * width, 1), 1)
        for (lo, hi), base in zip(self.ranges, self.bases):
            for start in range(lo, hi, chunk):
                stop = min(start + chunk, hi)
                rows = float_rows(field.gather(np.arange(start, stop, dtype=np.int64)), field.encoding)
                self.table[base + start - lo:base + stop - lo].copy_(rows.reshape(stop - start, width))

    @property
    def rows(self) -> int:
        return int(self.bases[-1])

    @property
    def nbytes(self) -> int:
        return self.table.numel() * self.table.element_size()

    def split(self, gids, gather_rows) -> BatchRows:
        """Local. Rows ``gids`` of a batch: the slots of those kept here, and the others' rows
        gathered by ``gather_rows(gids) -> float32 tensor``."""
        gids = np.asarray(gids, dtype=np.int64)
        if len(self.ranges) == 1:
            lo, hi = self.ranges[0]
            held = (gids >= lo) & (gids < hi)
            slots = gids - lo
        else:
            which = np.searchsorted(self.starts, gids, side="right") - 1
            safe = np.maximum(which, 0)
            held = (which >= 0) & (gids < self.ends[safe])
            slots = gids - self.starts[safe] + self.bases[safe]
        if held.all():
            return BatchRows(int(gids.shape[0]), torch.from_numpy(slots))
        hit_at, miss_at = np.flatnonzero(held), np.flatnonzero(~held)
        return BatchRows(int(gids.shape[0]), torch.from_numpy(slots[hit_at]), torch.from_numpy(hit_at),
                         torch.from_numpy(miss_at), gather_rows(gids[miss_at]))

    def assemble(self, rows: BatchRows, moved) -> torch.Tensor:
        """Local. The batch's ``(count, width)`` rows on the device; ``moved`` gives the device copy
        of each host tensor of ``rows``."""
        taken = self.table.index_select(0, moved(rows.slots))
        if rows.hit_at is None:
            return taken
        out = torch.empty((rows.count, self.table.shape[1]), dtype=self.table.dtype, device=self.table.device)
        out[moved(rows.hit_at)] = taken
        out[moved(rows.miss_at)] = moved(rows.miss_rows).reshape(-1, self.table.shape[1])
        return out
