"""A rank's share of a dataset: R ranks on a P-part dataset, each holding P / R consecutive parts.

Part ``p`` owns the global ids ``[node_starts[p], node_starts[p+1])``, so parts ``g*k`` to
``g*k + g - 1`` together own ``[node_starts[g*k], node_starts[g*k + g])``, and the same holds for
their stored edges and for each node type's ids (every type's ids are numbered part by part).
Keeping every ``g``-th entry of each start list therefore gives the books of R shards, while the
global node ids, edge ids and type ids stay those of the P-part dataset: a dataset partitioned
once into many parts runs on any divisor of its part count. A shard's arrays are its parts'
arrays concatenated in part order, each part's CSC offsets shifted by the edges of the parts
before it.
"""
from __future__ import annotations

import os

import numpy as np

from hpcgnn.format import ondisk
from hpcgnn.runtime.errors import InputError


def parts_per_rank(meta: dict, ranks: int, directory) -> int:
    """Local. How many consecutive parts each of ``ranks`` ranks holds; an InputError naming
    ``meta.json``'s part count when the ranks cannot share the parts evenly."""
    parts = meta["num_parts"]
    if ranks < 1 or parts % ranks:
        divisors = [d for d in range(1, parts + 1) if parts % d == 0]
        shown = ", ".join(map(str, divisors if len(divisors) <= 8 else divisors[:4] + ["..."] + divisors[-2:]))
        raise InputError(os.path.join(os.fspath(directory), "meta.json"),
                         f"dataset has {parts} parts, which a job of {ranks} ranks cannot share evenly "
                         f"(run it with mpirun -np N, N one of {shown}, or partition it again)",
                         "num_parts", parts)
    return parts // ranks


def shard_starts(starts, group: int) -> np.ndarray:
    """Local. The start list (of nodes, edges or one type's ids; P + 1 entries) of the shards of
    ``group`` consecutive parts each."""
    return np.asarray(starts, dtype=np.int64)[::group].copy()


class PartGroup:
    """Local. Parts ``first`` to ``first + count - 1`` of a dataset, each opened and checked
    (:func:`~hpcgnn.format.ondisk.open_part`), read as one shard: :meth:`read` fills a dataset's
    rows of every part in part order. Use as a context manager.

    Attributes
    ----------
    parts : list of PartFile
    path : str
        The first part's file (an error about the shard as a whole names it; an error about one
        part's values names that part's file).
    """

    def __init__(self, directory, meta: dict, first: int, count: int):
        self.parts = []
        try:
            for part_id in range(first, first + count):
                self.parts.append(ondisk.open_part(directory, meta, part_id))
        except BaseException:
            self.close()
            raise
        self.path = self.parts[0].path

    def close(self) -> None:
        """Local. Close every part's file."""
        for part in self.parts:
            part.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _row_counts(self, name) -> list:
        """Rows of dataset ``name`` in every part (its first dimension as ``meta.json`` implies;
        ``indptr``'s one closing offset left out of all but the last part)."""
        rows = [part.expected()[name][0][0] for part in self.parts]
        return [r - 1 for r in rows[:-1]] + rows[-1:] if name == "indptr" else rows

    def rows(self, name) -> int:
        """Local. Rows of dataset ``name`` in the shard."""
        return sum(self._row_counts(name))

    def nbytes(self) -> int:
        """Local. Bytes of every dataset of the shard, as held in memory once read."""
        return sum(int(np.prod(shape)) * (dtype or part.dtype(name)).itemsize
                   for part in self.parts for name, (shape, dtype) in part.expected().items())

    def dtype(self, name) -> np.dtype:
        """Local. A dtype holding every part's dataset ``name`` (parts narrow id arrays each alone)."""
        return np.result_type(*(part.dtype(name) for part in self.parts))

    def read(self, name, out) -> np.ndarray:
        """Local. Dataset ``name`` of every part into ``out`` (C-contiguous, the shard's rows), CSC
        offsets shifted to the shard's edges; InputError naming the part's file if one cannot be
        read."""
        offset = 0
        for part, rows in zip(self.parts, self._row_counts(name), strict=True):
            if name == "indptr":
                # each part's offsets run from 0 to its edge count: the next part's first offset
                # overwrites this part's last with the same value
                view = out[offset:offset + rows + 1]
                part.read(name, view)
                view += view.dtype.type(self._edges_before(part))
            else:
                part.read(name, out[offset:offset + rows])
            offset += rows
        return out

    def _edges_before(self, part) -> int:
        """Edges the shard stores before ``part``'s."""
        return part.edge_start - self.parts[0].edge_start

    def value_problems(self, arrays: dict) -> list:
        """Local. :meth:`PartFile.value_problems` of every part on its rows of ``arrays`` (the
        shard's arrays by dataset name), each error naming that part's file."""
        found, offsets = [], {name: 0 for name in arrays}
        for index, part in enumerate(self.parts):
            mine = {}
            for name, values in arrays.items():
                rows = self._row_counts(name)[index]
                start = offsets[name]
                if name == "indptr":
                    mine[name] = values[start:start + rows + 1] - self._edges_before(part)
                else:
                    mine[name] = values[start:start + rows]
                offsets[name] = start + rows
            found.extend(part.value_problems(mine))
        return found


def open_group(directory, meta: dict, rank: int, group: int) -> PartGroup:
    """Local. Rank ``rank``'s parts (``group`` of them, from part ``rank * group``), opened and checked."""
    return PartGroup(directory, meta, rank * group, group)
