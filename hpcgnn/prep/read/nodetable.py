"""Node tables beside an edge list: ``id,<label>[,feature...]`` rows under a header naming the columns.

The first column is the node id, written as in the edge list (so ``--id-base 1`` and
``--relabel`` apply to it the same way). The label column is chosen by name (or 0-based
position); an empty cell or ``nan`` is unlabelled (-1). Integer labels are kept as written;
anything else is a class name, numbered 0..C-1 in sorted order (the names are kept as
``notes['class_names']``). Every other column must be numeric and becomes a column of ``feat``
(float32) unless ``table_features`` is False. Nodes without a row are unlabelled and get zero
features; a row whose id is not a node of the graph is an error. Delimiter (comma, tab or
whitespace) is detected from the header; ``"`` quotes a field; ``#`` starts a comment; gzip
is recognised by its magic bytes. Parsed in blocks by numpy's C reader, like edge lists.
"""
from __future__ import annotations

import csv
import io
import os
import warnings
from dataclasses import dataclass

import numpy as np

from hpcgnn.format.fields import ORIG_ID
from hpcgnn.prep.graph import Graph
from hpcgnn.prep.read.text import DEFAULT_CHUNK_BYTES, TextTable, is_number
from hpcgnn.runtime.errors import InputError

_MISSING_LABELS = ("", "nan")


@dataclass
class NodeTable:
    """Local. The parsed table: ids as written, labels, class names and feature rows."""

    ids: np.ndarray
    labels: np.ndarray
    class_names: list | None
    features: np.ndarray | None
    label_column: str
    feature_columns: list


def _guess_delimiter(header):
    return "," if "," in header else "\t" if "\t" in header else None


def _split(line, delimiter):
    if delimiter is None:
        return line.split()
    return [token.strip() for token in next(csv.reader([line], delimiter=delimiter, quotechar='"'))]


def _label_position(path, names, label_column):
    if label_column is None:
        lowered = [name.lower() for name in names]
        if "label" in lowered[1:]:
            return lowered.index("label", 1)
        raise InputError(path, f"no column named 'label' (columns: {', '.join(names)}); choose the label "
                         "column with --label-column NAME", "--label-column", None)
    if str(label_column) in names[1:]:
        return names.index(str(label_column), 1)
    if str(label_column).isdigit() and 1 <= int(label_column) < len(names):
        return int(label_column)
    raise InputError(path, f"no such column (columns: {', '.join(names)}; the first is the node id)",
                     "--label-column", label_column)


def _parse(table, text, line_number, delimiter, names, columns, dtype):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="loadtxt: input contained no data")
        warnings.filterwarnings("ignore", message="Input line .* contained no data")  # a comment line
        try:
            return np.loadtxt(io.BytesIO(text), dtype=dtype, delimiter=delimiter, usecols=columns, ndmin=2,
                              comments=table.comment, quotechar='"', encoding="utf-8")
        except ValueError:
            _raise_for_bad_line(table, text, line_number, delimiter, names, columns, dtype)
            raise


def _raise_for_bad_line(table, text, line_number, delimiter, names, columns, dtype):
    # Error path only: find the first line and field numpy refused, to name them.
    integer = np.issubdtype(np.dtype(dtype), np.integer)
    for offset, line in enumerate(text.decode("utf-8", "replace").split("\n")):
        content = table.strip_comment(line)
        if not content:
            continue
        tokens = _split(content, delimiter)
        where = line_number + offset
        if len(tokens) <= max(columns):
            raise InputError(table.path, f"line {where} has {len(tokens)} columns, the header {len(names)}",
                             names[min(len(tokens), len(names) - 1)], content)
        for column in columns:
            if dtype is not str and not is_number(tokens[column], integer):
                kind = "an integer node id" if integer else "a number (drop the column or pass --no-table-features)"
                raise InputError(table.path, f"not {kind} on line {where}", names[column], tokens[column])


def _labels_from_text(path, name, text):
    text = np.char.strip(text)
    missing = np.isin(np.char.lower(text), _MISSING_LABELS)
    labels = np.full(text.shape[0], -1, dtype=np.int64)
    given = text[~missing]
    try:
        numbers = given.astype(np.float64)
    except ValueError:
        numbers = None  # some label is not a number: they are all class names
    if numbers is not None:
        whole = np.isfinite(numbers) & (numbers == np.round(numbers))
        if not whole.all():
            raise InputError(path, "numeric labels must be whole numbers", name, str(given[~whole][0]))
        labels[~missing] = numbers.astype(np.int64)
        return labels, None
    classes, inverse = np.unique(given, return_inverse=True)
    labels[~missing] = inverse.reshape(-1)
    return labels, [str(value) for value in classes]


def read_node_table(path, label_column=None, table_features=True, chunk_bytes=DEFAULT_CHUNK_BYTES) -> NodeTable:
    """Local. Parse a node table (layout in the module docstring).

    Parameters
    ----------
    path : str or os.PathLike
        The table (plain or gzip text).
    label_column : str or int, optional
        Name of the label column, or its 0-based position (> 0); default: the column named
        ``label``.
    table_features : bool
        Read the other columns as features.
    chunk_bytes : int
        Bytes parsed per block.

    Returns
    -------
    NodeTable
        Ids as written (int64), labels (int64, -1 = unlabelled), class names (None for integer
        labels) and features (float32 [rows, F], None without feature columns).
    """
    with TextTable(path, "#", chunk_bytes) as table:
        if table.first_line is None:
            raise InputError(table.path, "node table is empty (expected a header line naming the columns)")
        delimiter = _guess_delimiter(table.first_line)
        names = [token.strip('"') for token in _split(table.first_line, delimiter)]
        if is_number(names[0], integer=True):
            raise InputError(table.path, "the first line must be a header naming the columns (id, label, ...)",
                             "header", table.first_line)
        label_at = _label_position(table.path, names, label_column)
        feature_at = [j for j in range(1, len(names)) if j != label_at] if table_features else []
        ids, labels, features = [], [], []
        for text, line_number in table.blocks(skip_first=True):
            ids.append(_parse(table, text, line_number, delimiter, names, (0,), np.int64)[:, 0])
            labels.append(_parse(table, text, line_number, delimiter, names, (label_at,), str)[:, 0])
            if feature_at:
                features.append(_parse(table, text, line_number, delimiter, names, tuple(feature_at), np.float32))
    if not ids or not sum(part.shape[0] for part in ids):
        raise InputError(table.path, "node table has a header but no rows", names[0], "<none>")
    label_values, class_names = _labels_from_text(table.path, names[label_at], np.concatenate(labels))
    return NodeTable(np.concatenate(ids), label_values, class_names,
                     np.concatenate(features) if features else None, names[label_at], [names[j] for j in feature_at])


def _node_positions(path, graph, ids, relabel):
    """The graph node of each table row; the table names nodes by their ids in the edge list."""
    file_ids = graph.ndata.get(ORIG_ID)
    if file_ids is None:
        nodes, absent = ids, (ids < 0) | (ids >= graph.num_nodes)
    else:  # the reader numbered the file's ids anew (--id-base 1, --relabel)
        order = np.argsort(file_ids, kind="stable")
        at = np.minimum(np.searchsorted(file_ids, ids, sorter=order), file_ids.shape[0] - 1)
        nodes = order[at]
        absent = file_ids[nodes] != ids
    if absent.any():
        reason = ("node id not in the edge list (--relabel numbers only the ids its edges use)" if relabel else
                  "node id is not a node of the edge list's graph (--num-nodes N adds nodes without edges)")
        raise InputError(path, reason, "id", int(ids[np.flatnonzero(absent)[0]]))
    counts = np.bincount(nodes, minlength=graph.num_nodes)
    if counts.max(initial=0) > 1:
        first = np.flatnonzero(counts[nodes] > 1)[0]
        raise InputError(path, "node id has more than one row", "id", int(ids[first]))
    return nodes


def join_node_table(graph: Graph, path, label_column=None, relabel=False, table_features=True,
                    chunk_bytes=DEFAULT_CHUNK_BYTES) -> Graph:
    """Local. ``graph`` with ``label`` (and ``feat``) from the node table at ``path``.

    Parameters
    ----------
    graph : Graph
        The edge list's graph. When the reader numbered the file's ids anew (``--id-base 1``,
        ``--relabel``), node field ``orig_id`` holds them and the table's ids are matched to it.
    path : str or os.PathLike
        The node table (see module docstring).
    label_column : str or int, optional
        See :func:`read_node_table`.
    relabel : bool
        The edge list was relabelled (only changes the message for an id it does not have).
    table_features : bool
        Take the other columns as ``feat``.
    chunk_bytes : int
        Bytes parsed per block.

    Returns
    -------
    Graph
        A validated copy with ``label`` int64 (-1 for nodes without a row or label) and, if the
        table has feature columns, ``feat`` float32 (zero rows for nodes without a row);
        ``notes`` gains ``node_table``, ``label_column`` and ``class_names`` (class-name labels).
    """
    path = os.fspath(path)
    table = read_node_table(path, label_column, table_features, chunk_bytes)
    nodes = _node_positions(path, graph, table.ids, relabel)
    ndata, notes = dict(graph.ndata), dict(graph.notes)
    ndata["label"] = np.full(graph.num_nodes, -1, dtype=np.int64)
    ndata["label"][nodes] = table.labels
    if table.features is not None:
        ndata["feat"] = np.zeros((graph.num_nodes, table.features.shape[1]), dtype=np.float32)
        ndata["feat"][nodes] = table.features
    notes.update(node_table=os.path.basename(path), label_column=table.label_column,
                 table_rows=int(nodes.shape[0]))
    if table.class_names is not None:
        notes["class_names"] = table.class_names
    return Graph(graph.num_nodes, graph.src, graph.dst, ndata, graph.edata, graph.name, graph.source,
                 graph.symmetric, notes).validate()
