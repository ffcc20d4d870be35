"""Who owns which id: part ``p`` owns the contiguous global ids ``[starts[p], starts[p+1])``.

One book describes nodes (``meta.json``'s ``node_starts``), another the edges each part stores
(``edge_starts``); both are the same O(P) structure.
"""
from __future__ import annotations

import numpy as np


class PartitionBook:
    """Local. Owner and local-id lookups in O(P) memory (P = number of parts).

    Parameters
    ----------
    starts : sequence of int, length P + 1
        First global id of every part, ending with the total number of ids.
    """

    def __init__(self, starts):
        self.starts = np.asarray(starts, dtype=np.int64)
        if self.starts.ndim != 1 or self.starts.shape[0] < 2 or (np.diff(self.starts) < 0).any():
            raise ValueError(f"starts must be a rising sequence, got {starts!r}")

    @classmethod
    def from_meta(cls, meta: dict, kind="node") -> PartitionBook:
        """Local. The node (``kind="node"``) or edge (``kind="edge"``) book of a dataset's ``meta.json``."""
        return cls(meta[f"{kind}_starts"])

    @property
    def num_parts(self) -> int:
        return self.starts.shape[0] - 1

    @property
    def num_ids(self) -> int:
        """Ids over all parts."""
        return int(self.starts[-1])

    def part_sizes(self) -> np.ndarray:
        """Local. Ids owned by each part."""
        return np.diff(self.starts)

    def part_range(self, part: int) -> tuple[int, int]:
        """Local. ``(start, end)``: the global ids of part ``part``."""
        return int(self.starts[part]), int(self.starts[part + 1])

    def owner(self, gids) -> np.ndarray:
        """Local. The part owning each global id."""
        return np.searchsorted(self.starts, np.asarray(gids), side="right") - 1

    def to_local(self, gids, owner=None) -> np.ndarray:
        """Local. Each id's row in its owner's shard (``gid - starts[owner]``)."""
        gids = np.asarray(gids)
        owner = self.owner(gids) if owner is None else owner
        return gids - self.starts[owner]

    def check(self, gids, what="id"):
        """Local. Raise IndexError if any id is outside ``[0, num_ids)``."""
        gids = np.asarray(gids)
        if gids.size and (gids.min() < 0 or gids.max() >= self.num_ids):
            bad = gids[(gids < 0) | (gids >= self.num_ids)][0]
            raise IndexError(f"{what} {int(bad)} outside [0, {self.num_ids})")

    def __repr__(self):
        return f"PartitionBook(parts={self.num_parts}, ids={self.num_ids})"
