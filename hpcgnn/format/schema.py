"""The schema of a typed (heterogeneous) graph and where each node type sits in the global id space.

A typed graph has node types (``paper``, ``author``, ...) and canonical edge types
``(src_type, relation, dst_type)``; every relation name is distinct, so a relation is named by
its middle part alone. One global id space covers every node: inside part ``p``'s range
``[node_starts[p], node_starts[p+1])`` the nodes are ordered by type, so the owned nodes of
type ``t`` are one contiguous block and the blocks of all (part, type) pairs, in part-major
order, tile ``[0, num_nodes)``. One ``searchsorted`` over those ``P * T + 1`` bounds gives both
the owner and the type of any id (:class:`TypeLayout`); a node's id inside its type (its row of
that type's fields) is dense per type and per part.

Edges carry their relation's index in the edge field :data:`ETYPE`, and every node's in-edges
are stored grouped by relation (ascending index), so the in-edges of one relation are one
contiguous run of the node's CSC row.

A homogeneous dataset is the one-type case: :meth:`Schema.homogeneous` (type :data:`NODE`,
relation :data:`EDGE`), with no ``etype`` column stored.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from hpcgnn.runtime.errors import InputError

#: the edge field holding each edge's relation index
ETYPE = "etype"
#: the node type and relation of a homogeneous dataset
NODE = "_N"
EDGE = "_E"
#: what a node type, relation or typed field may be called (they name HDF5 datasets and flags)
NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]{0,63}")
#: at most this many node types and relations (an edge's relation index is stored as int16)
MAX_TYPES = 32767
#: the prefix a reader gives the reverse of relation ``r`` (``--add-reverse``)
REVERSE_PREFIX = "rev_"


def typed_field_name(node_type: str, field: str) -> str:
    """Local. The part-file dataset holding node field ``field`` of type ``node_type``'s owned rows."""
    return f"{field}@{node_type}"


def check_name(where, field, value):
    """Local. Refuse a type, relation or field name that cannot name a dataset or a flag."""
    if not isinstance(value, str) or not NAME_PATTERN.fullmatch(value):
        raise InputError(where, "names are 1-64 letters, digits, '_' or '-', starting with a letter or '_'",
                         field, value)


@dataclass(frozen=True)
class Schema:
    """Local. Node type names (index = type id), canonical relations ``(src_type, relation, dst_type)``
    (index = relation id) and the type whose nodes carry labels (None: none)."""

    node_types: tuple
    relations: tuple
    target: str | None = None

    @classmethod
    def homogeneous(cls) -> Schema:
        return cls((NODE,), ((NODE, EDGE, NODE),), None)

    @property
    def is_homogeneous(self) -> bool:
        return len(self.node_types) == 1 and len(self.relations) == 1

    @property
    def num_types(self) -> int:
        return len(self.node_types)

    @property
    def num_relations(self) -> int:
        return len(self.relations)

    @property
    def relation_names(self) -> tuple:
        return tuple(rel for _, rel, _ in self.relations)

    def type_index(self, name) -> int:
        """Local. The id of node type ``name`` (KeyError naming the choices)."""
        try:
            return self.node_types.index(name)
        except ValueError:
            raise KeyError(f"no node type {name!r}; the types are {', '.join(self.node_types)}") from None

    def relation_index(self, name) -> int:
        """Local. The id of relation ``name`` (KeyError naming the choices)."""
        try:
            return self.relation_names.index(name)
        except ValueError:
            raise KeyError(f"no relation {name!r}; the relations are {', '.join(self.relation_names)}") from None

    def relation_types(self) -> tuple[np.ndarray, np.ndarray]:
        """Local. ``(src_type, dst_type)`` ids of every relation, int64 arrays of length R."""
        src = np.array([self.type_index(s) for s, _, _ in self.relations], dtype=np.int64)
        dst = np.array([self.type_index(d) for _, _, d in self.relations], dtype=np.int64)
        return src, dst

    def validate(self, where, field="schema") -> Schema:
        """Local. Names well formed and distinct, every relation's end types declared, the target
        a declared type; one-line InputError otherwise."""
        if not self.node_types:
            raise InputError(where, "a typed graph needs at least one node type", f"{field}.node_types", "[]")
        if not self.relations:
            raise InputError(where, "a typed graph needs at least one relation", f"{field}.edge_types", "[]")
        if len(self.node_types) > MAX_TYPES or len(self.relations) > MAX_TYPES:
            raise InputError(where, f"at most {MAX_TYPES} node types and relations", f"{field}.edge_types",
                             len(self.relations))
        for name in self.node_types:
            check_name(where, f"{field}.node_types", name)
        if len(set(self.node_types)) != len(self.node_types):
            dup = next(n for n in self.node_types if self.node_types.count(n) > 1)
            raise InputError(where, "node type named twice", f"{field}.node_types", dup)
        seen = set()
        for i, triple in enumerate(self.relations):
            if not (isinstance(triple, tuple) and len(triple) == 3):
                raise InputError(where, "each edge type is [src_type, relation, dst_type]", f"{field}.edge_types[{i}]",
                                 triple)
            src, rel, dst = triple
            check_name(where, f"{field}.edge_types[{i}].relation", rel)
            for end, name in (("src_type", src), ("dst_type", dst)):
                if name not in self.node_types:
                    raise InputError(where, f"relation {rel!r} names an unknown node type (the types are "
                                     f"{', '.join(self.node_types)})", f"{field}.edge_types[{i}].{end}", name)
            if rel in seen:
                raise InputError(where, "relation named twice: relation names must be distinct",
                                 f"{field}.edge_types[{i}].relation", rel)
            seen.add(rel)
        if self.target is not None and self.target not in self.node_types:
            raise InputError(where, f"the labelled type is not a node type (the types are "
                             f"{', '.join(self.node_types)})", f"{field}.target", self.target)
        return self

    def as_meta(self) -> dict:
        """Local. The schema as meta.json stores it."""
        return {"node_types": list(self.node_types), "edge_types": [list(r) for r in self.relations],
                "target": self.target}

    @classmethod
    def from_meta(cls, value, where, field="schema") -> Schema:
        """Local. A schema from meta.json's entry (validated)."""
        if not isinstance(value, dict):
            raise InputError(where, "must be an object", field, type(value).__name__)
        types, edges = value.get("node_types"), value.get("edge_types")
        if not isinstance(types, list) or not isinstance(edges, list):
            raise InputError(where, "needs lists node_types and edge_types", field, sorted(value))
        relations = tuple(tuple(e) if isinstance(e, list) else e for e in edges)
        return cls(tuple(types), relations, value.get("target")).validate(where, field)


class TypeLayout:
    """Local. Where every (part, node type) block sits in the global id space.

    Parameters
    ----------
    schema : Schema
    type_counts : array [P, T]
        Nodes of type ``t`` owned by part ``p``.

    Attributes
    ----------
    bounds : int64 [P * T + 1]
        First global id of block ``(p, t)`` at index ``p * T + t``, ending with ``num_nodes``.
    type_starts : int64 [T, P + 1]
        Row ``t``: the first type-``t`` id of every part (a partition book of type ``t``'s ids).
    """

    def __init__(self, schema: Schema, type_counts):
        self.schema = schema
        self.type_counts = np.asarray(type_counts, dtype=np.int64).reshape(-1, schema.num_types)
        self.num_parts = self.type_counts.shape[0]
        self.bounds = np.concatenate([[0], np.cumsum(self.type_counts.reshape(-1))]).astype(np.int64)
        self.type_starts = np.zeros((schema.num_types, self.num_parts + 1), dtype=np.int64)
        np.cumsum(self.type_counts.T, axis=1, out=self.type_starts[:, 1:])

    @classmethod
    def homogeneous(cls, node_starts) -> TypeLayout:
        return cls(Schema.homogeneous(), np.diff(np.asarray(node_starts, dtype=np.int64)).reshape(-1, 1))

    @property
    def node_starts(self) -> np.ndarray:
        """First global id of every part (``meta.json``'s ``node_starts``)."""
        return self.bounds[::self.schema.num_types]

    def num_nodes_of(self, node_type: int) -> int:
        """Local. Nodes of type ``node_type`` over all parts."""
        return int(self.type_starts[node_type, -1])

    def block_range(self, part: int, node_type: int) -> tuple[int, int]:
        """Local. ``(start, end)``: the global ids of part ``part``'s nodes of type ``node_type``."""
        b = part * self.schema.num_types + node_type
        return int(self.bounds[b]), int(self.bounds[b + 1])

    def _blocks(self, gids) -> np.ndarray:
        return np.searchsorted(self.bounds, gids, side="right") - 1

    def types_of(self, gids) -> np.ndarray:
        """Local. The node type id of every global id."""
        if self.schema.num_types == 1:
            return np.zeros(np.shape(gids), dtype=np.int64)
        return self._blocks(np.asarray(gids, dtype=np.int64)) % self.schema.num_types

    def type_ids(self, gids) -> tuple[np.ndarray, np.ndarray]:
        """Local. ``(types, tids)``: every global id's node type and its id among the nodes of that
        type (dense per type: part ``p``'s type-``t`` nodes are ``type_starts[t, p]`` onwards)."""
        gids = np.asarray(gids, dtype=np.int64)
        blocks = self._blocks(gids)
        parts, types = np.divmod(blocks, self.schema.num_types)
        return types, gids - self.bounds[blocks] + self.type_starts[types, parts]

    def gids_of(self, node_type: int, tids) -> np.ndarray:
        """Local. The global ids of type-``node_type`` ids ``tids`` (inverse of :meth:`type_ids`)."""
        tids = np.asarray(tids, dtype=np.int64)
        starts = self.type_starts[node_type]
        parts = np.searchsorted(starts, tids, side="right") - 1
        return tids - starts[parts] + self.bounds[parts * self.schema.num_types + node_type]
