"""A rank's share of a dataset: R ranks on a P-part dataset, each holding one range of global ids.

Part ``p`` owns the global ids ``[node_starts[p], node_starts[p+1])``. With R dividing P, rank
``r`` holds the whole parts ``r*P/R`` to ``(r+1)*P/R - 1``; otherwise the ids are split into R
even ranges (:func:`shard_node_starts`), and a range may begin or end inside a part. Every part
stores its nodes' in-edges in node order, so the in-edges of a range of its nodes are one range
of its edges, and of the global edge ids; each node type's ids are numbered in global id order,
so the nodes of one type in a range of ids are one range of that type's ids. The shards' books
(nodes, edges, each type's ids) are therefore start lists as the parts' are: owner lookup stays
one ``searchsorted``, and global node, edge and type ids stay those of the P-part dataset. A
dataset partitioned once into many parts runs on any rank count. A shard's arrays are its
segments' rows (a segment: the rows of one part in the shard's range) in part order, CSC offsets
shifted by the edges before each segment; held-out edge sets keep the edges whose destination
lies in the range.
"""
from __future__ import annotations

import numpy as np

from hpcgnn.format import ondisk
from hpcgnn.runtime.errors import InputError


def shard_node_starts(meta: dict, ranks: int) -> np.ndarray:
    """Local. The first global id of every rank's shard, ending with the node count (``ranks + 1``
    entries): every ``P/R``-th part start where ``ranks`` divides the parts, else even ranges."""
    starts = np.asarray(meta["node_starts"], dtype=np.int64)
    parts = meta["num_parts"]
    if parts % ranks == 0:
        return starts[::parts // ranks].copy()
    return np.arange(ranks + 1, dtype=np.int64) * int(starts[-1]) // ranks


def type_starts_at(meta: dict, layout, bounds) -> np.ndarray:
    """Local. ``[T, len(bounds)]``: for every node type, how many of its nodes have a global id below
    each of ``bounds`` (the shards' per-type books)."""
    starts = np.asarray(meta["node_starts"], dtype=np.int64)
    bounds = np.asarray(bounds, dtype=np.int64)
    parts = np.minimum(np.searchsorted(starts, bounds, side="right") - 1, meta["num_parts"] - 1)
    inside = bounds - starts[parts]  # each bound's offset in its part, whose nodes are ordered by type
    offsets = np.concatenate([np.zeros((layout.num_parts, 1), np.int64), np.cumsum(layout.type_counts, axis=1)], 1)
    ahead = np.clip(inside[None, :] - offsets[parts, :-1].T, 0, layout.type_counts[parts].T)
    return layout.type_starts[:, parts] + ahead


class _Segment:
    """One part's rows in a shard: part-local nodes ``[lo, hi)``, their edges ``[edge_lo, edge_hi)``."""

    def __init__(self, part, lo, hi):
        self.part, self.lo, self.hi = part, lo, hi
        offsets = [int(part.read("indptr", rows=slice(i, i + 1))[0]) for i in (lo, hi)]
        if not 0 <= offsets[0] <= offsets[1] <= part.num_edges:  # read before the part's values are checked
            raise InputError(part.path, f"offsets of nodes {lo} and {hi} must rise within the part's "
                             f"{part.num_edges} edges", "indptr", offsets)
        self.edge_lo, self.edge_hi = offsets
        counts = (part.meta.get("schema") or {}).get("type_counts")
        self.type_offsets = np.concatenate([[0], np.cumsum(counts[part.part_id])]) if counts else None
        self._links = {}

    def node_range(self):
        """Global ids of the segment's nodes."""
        return self.part.node_range[0] + self.lo, self.part.node_range[0] + self.hi

    def link_rows(self, name) -> np.ndarray:
        """The rows of held-out edge set ``name`` (``link_<split>_<array>``) whose destination is in the segment."""
        split = name[len(ondisk.LINK_PREFIX):].split("_", 1)[0]
        if split not in self._links:
            dst = self.part.read(f"{ondisk.LINK_PREFIX}{split}_dst")
            first, last = self.node_range()
            mine = (dst >= first) & (dst < last)
            if self.lo == 0:  # a destination outside the part is bad data: the part's first segment keeps it, to refuse
                mine |= (dst < self.part.node_range[0]) | (dst >= self.part.node_range[1])
            self._links[split] = np.flatnonzero(mine)
        return self._links[split]

    def rows(self, name):
        """``(start, stop)`` of dataset ``name``'s rows in the part file that the segment holds, or the
        row indices (held-out edge sets)."""
        if name == "indptr":
            return self.lo, self.hi + 1
        if name in ("indices", "eid") or name.startswith(ondisk.EDGE_PREFIX):
            return self.edge_lo, self.edge_hi
        if name.startswith(ondisk.LINK_PREFIX):
            return self.link_rows(name)
        typed = ondisk.typed_datasets(self.part.meta).get(name)
        if typed is not None:  # the part's type-t rows are its nodes offsets[t] .. offsets[t + 1] - 1
            start, end = self.type_offsets[typed[0]], self.type_offsets[typed[0] + 1]
            return int(np.clip(self.lo, start, end) - start), int(np.clip(self.hi, start, end) - start)
        return self.lo, self.hi

    def count(self, name) -> int:
        """Rows of dataset ``name`` in the segment (``indptr``'s closing offset left out)."""
        rows = self.rows(name)
        if isinstance(rows, np.ndarray):
            return int(rows.shape[0])
        return rows[1] - rows[0] - (name == "indptr")

    def read(self, name, out):
        """Dataset ``name``'s rows of the segment into ``out``."""
        rows = self.rows(name)
        if isinstance(rows, np.ndarray):
            out[...] = self.part.read(name)[rows]
        else:
            self.part.read(name, out, rows=slice(*rows))


class PartGroup:
    """Local. The parts holding global ids ``[lo, hi)`` of a dataset, each opened and checked
    (:func:`~hpcgnn.format.ondisk.open_part`), read as one shard: :meth:`read` fills a dataset's
    rows of every segment in part order. Use as a context manager.

    Attributes
    ----------
    parts : list of PartFile
    part_ids : range
        The parts the shard touches.
    path : str
        The first part's file (an error about the shard as a whole names it; an error about one
        part's values names that part's file).
    edge_start : int
        The global id of the shard's first edge.
    """

    def __init__(self, directory, meta: dict, lo: int, hi: int):
        starts = np.asarray(meta["node_starts"], dtype=np.int64)
        first = min(int(np.searchsorted(starts, lo, side="right")) - 1, meta["num_parts"] - 1)
        last = max(first, int(np.searchsorted(starts, hi, side="left")) - 1)
        self.part_ids = range(first, last + 1)
        self.parts, self.segments = [], []
        try:
            for part_id in self.part_ids:
                part = ondisk.open_part(directory, meta, part_id)
                self.parts.append(part)
                begin = int(starts[part_id])
                self.segments.append(_Segment(part, max(lo, begin) - begin, min(hi, int(starts[part_id + 1])) - begin))
        except BaseException:
            self.close()
            raise
        self.path = self.parts[0].path
        self.edge_start = self.parts[0].edge_start + self.segments[0].edge_lo

    def close(self) -> None:
        """Local. Close every part's file."""
        for part in self.parts:
            part.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def rows(self, name) -> int:
        """Local. Rows of dataset ``name`` in the shard."""
        return sum(s.count(name) for s in self.segments) + (name == "indptr")

    def nbytes(self) -> int:
        """Local. Bytes of every dataset of the shard, as held in memory once read."""
        return sum(self.rows(name) * int(np.prod(shape[1:], dtype=np.int64)) * (dtype or self.dtype(name)).itemsize
                   for name, (shape, dtype) in self.parts[0].expected().items())

    def dtype(self, name) -> np.dtype:
        """Local. A dtype holding every part's dataset ``name`` (parts narrow id arrays each alone)."""
        return np.result_type(*(part.dtype(name) for part in self.parts))

    def read(self, name, out) -> np.ndarray:
        """Local. Dataset ``name`` of every segment into ``out`` (C-contiguous, the shard's rows),
        CSC offsets shifted to the shard's edges; InputError naming the part's file if one cannot
        be read."""
        offset, edges = 0, 0
        for segment in self.segments:
            rows = segment.count(name)
            if name == "indptr":
                # each segment's offsets run from its first edge in its part: the next segment's first
                # offset overwrites this one's last with the same value
                view = out[offset:offset + rows + 1]
                segment.read(name, view)
                view += view.dtype.type(edges - segment.edge_lo)
                edges += segment.edge_hi - segment.edge_lo
            else:
                segment.read(name, out[offset:offset + rows])
            offset += rows
        return out

    def value_problems(self, arrays: dict) -> list:
        """Local. :meth:`PartFile.value_problems` of every segment on its rows of ``arrays`` (the
        shard's arrays by dataset name), each error naming that part's file and the node's id."""
        found, offsets = [], {name: 0 for name in arrays}
        edges = 0
        for segment in self.segments:
            mine = {}
            for name, values in arrays.items():
                rows, start = segment.count(name), offsets[name]
                if name == "indptr":
                    mine[name] = values[start:start + rows + 1] - edges
                else:
                    mine[name] = values[start:start + rows]
                offsets[name] = start + rows
            edges += segment.edge_hi - segment.edge_lo
            part, whole = segment.part, segment.part.node_range
            part.node_range = segment.node_range()  # node ids in messages, edge-set destinations checked
            try:
                found.extend(part.value_problems(mine))
            finally:
                part.node_range = whole
        return found
