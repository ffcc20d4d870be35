"""Who owns which node: part ``p`` owns global ids ``[node_starts[p], node_starts[p+1])``."""
from __future__ import annotations

import numpy as np


class PartitionBook:
    """Local. Owner and local-id lookups in O(P) memory (P = number of parts).

    Parameters
    ----------
    node_starts : sequence of int, length P + 1
        Range starts of every part, ending with the number of nodes.
    edge_starts : sequence of int, length P + 1, optional
        The same for the edges stored by each part (CSC order).
    """

    def __init__(self, node_starts, edge_starts=None):
        self.node_starts = np.asarray(node_starts, dtype=np.int64)
        self.edge_starts = None if edge_starts is None else np.asarray(edge_starts, dtype=np.int64)
        if self.node_starts.ndim != 1 or self.node_starts.shape[0] < 2 or (np.diff(self.node_starts) < 0).any():
            raise ValueError(f"node_starts must be a rising sequence, got {node_starts!r}")

    @classmethod
    def from_meta(cls, meta: dict) -> PartitionBook:
        """Local. The book of a dataset's ``meta.json``."""
        return cls(meta["node_starts"], meta["edge_starts"])

    @property
    def num_parts(self) -> int:
        return self.node_starts.shape[0] - 1

    @property
    def num_nodes(self) -> int:
        return int(self.node_starts[-1])

    def part_sizes(self) -> np.ndarray:
        """Local. Nodes owned by each part."""
        return np.diff(self.node_starts)

    def node_range(self, part: int) -> tuple[int, int]:
        """Local. ``(start, end)`` global ids of part ``part``."""
        return int(self.node_starts[part]), int(self.node_starts[part + 1])

    def owner(self, gids) -> np.ndarray:
        """Local. The part owning each global id."""
        return np.searchsorted(self.node_starts, np.asarray(gids), side="right") - 1

    def to_local(self, gids, owner=None) -> np.ndarray:
        """Local. Each id's row in its owner's shard (``gid - node_starts[owner]``)."""
        gids = np.asarray(gids)
        owner = self.owner(gids) if owner is None else owner
        return gids - self.node_starts[owner]

    def check(self, gids, what="node id"):
        """Local. Raise IndexError if any id is outside ``[0, num_nodes)``."""
        gids = np.asarray(gids)
        if gids.size and (gids.min() < 0 or gids.max() >= self.num_nodes):
            bad = gids[(gids < 0) | (gids >= self.num_nodes)][0]
            raise IndexError(f"{what} {int(bad)} outside [0, {self.num_nodes})")
