"""Edge-list text files (``src dst [weight]`` per line, optionally a header or a count line),
read in byte blocks by :mod:`hpcgnn.prep.read.text`."""
from __future__ import annotations

import io
import os
import zlib

import numpy as np

from hpcgnn.format.fields import ORIG_ID
from hpcgnn.prep.graph import Graph
from hpcgnn.prep.read.text import (
    DEFAULT_CHUNK_BYTES,
    TEXT_ENCODING,
    TextTable,
    is_number,
    open_binary,
    parse_block,
    split_tokens,
)
from hpcgnn.runtime.errors import InputError

_EDGE_COLUMNS = ("src", "dst", "weight")


def guess_delimiter(line):
    """Local. The column separator of a data line: comma, else tab, else None (whitespace)."""
    if "," in line:
        return ","
    if "\t" in line:
        return "\t"
    return None


def check_delimiter(path, delimiter):
    """Local. A ``--delimiter`` as the parser takes it (None: runs of whitespace)."""
    if delimiter is None or (isinstance(delimiter, str) and delimiter.isspace() and delimiter != "\t"):
        return None  # a space means "whitespace": runs of blanks must not create empty fields
    if not isinstance(delimiter, str) or len(delimiter) != 1:
        raise InputError(path, "must be a single character", "delimiter", repr(delimiter))
    return delimiter


def edge_columns(table, text, line_number, delimiter):
    """Local. ``(column names, width)`` of the first data line of ``text``, or None if it has none."""
    # The first data line fixes the column count: 2 = unweighted, 3 or more = weighted.
    # Returns (column names, the line's width), or None for a block of comments.
    for offset, line in enumerate(io.BytesIO(text)):
        content = table.strip_comment(line.decode(TEXT_ENCODING))
        if content:
            width = len(split_tokens(content, delimiter))
            if width < 2:
                raise InputError(table.path, f"line {line_number + offset} has 1 column; an edge needs "
                                 "src and dst", "dst", content)
            return _EDGE_COLUMNS[: min(width, 3)], width
    return None


def edge_arrays(path, rows, names, id_base):
    """Local. ``(src, dst, weight or None)`` of parsed rows, ids checked against ``id_base``."""
    ends = []
    for column in ("src", "dst"):
        ids = rows[column].copy()
        if ids.min() < id_base:
            problem = "negative node id" if id_base == 0 else "node id below id_base 1 (ids are 1-based)"
            raise InputError(path, problem, column, int(ids.min()))
        ends.append(ids)
    return ends[0], ends[1], rows["weight"].copy() if "weight" in names else None


def check_id_options(path, id_base, num_nodes):
    """Local. ``id_base`` is 0 or 1 and ``num_nodes``, if given, a positive integer."""
    if id_base not in (0, 1):
        raise InputError(path, "must be 0 or 1", "id_base", id_base)
    if num_nodes is not None and (isinstance(num_nodes, bool) or not isinstance(num_nodes, (int, np.integer))
                                  or num_nodes <= 0):
        raise InputError(path, "must be a positive integer", "num_nodes", num_nodes)


def leading_counts(tokens):
    """Local. ``(n, m)`` from a header line's tokens if the first two are integers and n >= 1."""
    if len(tokens) < 2 or not all(is_number(token, integer=True) for token in tokens[:2]) or int(tokens[0]) < 1:
        return None
    return int(tokens[0]), int(tokens[1])


def count_header(tokens, width, rows, largest, id_base, relabel):
    """Local. ``(n, m)`` if a numeric first line is a ``n m [...]`` count header, else None (an edge).

    Edge lines all have one width, so a first line of another width is a header. One of the
    same width is a header only if it counts the lines after it (``m`` of them) and ``n`` is
    enough nodes for their largest id: for an edge, both would be a coincidence.
    """
    counts = leading_counts(tokens)
    if width is None or counts is None:
        return None
    nodes, edges = counts
    if len(tokens) != width:
        return counts
    enough = relabel or nodes >= largest + 1 - id_base  # relabelled ids say nothing about the count
    return (nodes, edges) if edges == rows and enough else None


def refuse_one_based_counts(path, header_line, tokens, width, rows, smallest, largest, id_base, relabel):
    """Local. Refuse, naming ``--id-base 1``, a count header over 1-based ids read as 0-based.

    The file's ids run from 1 (``smallest`` >= 1) up to exactly the header's ``n``, and the
    header counts the lines after it (or is known to be one): the ids are 1-based. Read as
    0-based, the header either looks too small for the largest id or, when it is taken for an
    edge, adds an edge and a node that the file does not have. ``header_line`` is
    ``(line number, text)``.
    """
    counts = leading_counts(tokens)
    if id_base != 0 or relabel or counts is None or smallest < 1 or largest != counts[0]:
        return
    if width is not None and len(tokens) == width and counts[1] != rows:
        return  # an edge line after all: it does not count the lines after it
    nodes, edges = counts
    raise InputError(path, f"line {header_line[0]} reads as a count header ({nodes} nodes, {edges} edges) and the ids "
                     f"run from {smallest} to {largest}: they are 1-based; pass --id-base 1 (--no-header reads "
                     "the line as an edge)", "header", header_line[1])


def first_line_edge(table, columns, delimiter, id_base):
    """Local. The first line parsed as an edge: ``((src, dst, weight), columns)``."""
    line = (table.first_line + "\n").encode(TEXT_ENCODING)
    if columns is None:  # no line after it
        columns = edge_columns(table, line, table.first_line_number, delimiter)
    dtype = np.dtype([(n, np.float32 if n == "weight" else np.int64) for n in columns[0]])
    rows = parse_block(table, line, table.first_line_number, dtype, delimiter, columns[0], {0, 1}, exact=False)
    return edge_arrays(table.path, rows, columns[0], id_base), columns


_SNIFF_LINES = 50


def _is_edge_line(tokens):
    return (len(tokens) in (2, 3) and all(is_number(token, integer=True) and int(token) >= 0 for token in tokens[:2])
            and (len(tokens) == 2 or is_number(tokens[2])))


def sniff_edgelist(path, sample_bytes=1 << 16) -> bool:
    """Local. True if the start of ``path`` reads as a text edge list.

    For files whose name says nothing (``graph.dat``, ``graph``): the first lines (up to 50,
    within ``sample_bytes``, ``#`` comments skipped, gzip opened) after the first must all be
    ``src dst [weight]`` with non-negative integer ids and one width; the first line may also
    be a header, of column names (same width) or of numbers (a count header).

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    sample_bytes : int
        How much of the file to look at.

    Returns
    -------
    bool
        False for binary files, other text and files that cannot be read.
    """
    try:
        with open_binary(path, keep=True) as fh:  # a pipe's bytes stay for the reader
            sample = fh.read(sample_bytes)
    except (InputError, OSError, EOFError, zlib.error):
        return False
    if not sample or b"\0" in sample:
        return False
    lines = sample.decode(TEXT_ENCODING).splitlines()
    if len(sample) == sample_bytes:
        lines = lines[:-1]  # cut short by the sample
    content = [line.split("#", 1)[0].strip() for line in lines[:_SNIFF_LINES]]
    content = [line for line in content if line]
    if not content:
        return False
    data = content[1:] or content
    delimiter = guess_delimiter(data[0])
    rows = [split_tokens(line, delimiter) for line in data]
    if len({len(tokens) for tokens in rows}) != 1 or not all(_is_edge_line(tokens) for tokens in rows):
        return False
    first = split_tokens(content[0], delimiter)
    return len(first) == len(rows[0]) or (2 <= len(first) <= 4 and all(is_number(token) for token in first))


def graph_name(path):
    """Local. A dataset name from a file path: basename without ``.gz`` and one extension."""
    base = os.path.basename(os.fspath(path).rstrip("/"))
    if base.endswith(".gz"):
        base = base[:-3]
    return os.path.splitext(base)[0] or base


def read_edgelist(path, delimiter=None, header=None, id_base=0, num_nodes=None, comment="#",
                  chunk_bytes=DEFAULT_CHUNK_BYTES, name=None, relabel=False) -> Graph:
    """Local. Read a text edge list (``src dst [weight]`` per line, optionally gzipped).

    Parameters
    ----------
    path : str or os.PathLike
        Plain or ``.gz`` text file.
    delimiter : str, optional
        Column separator. None detects it from the first data line: comma, else tab, else runs
        of whitespace. A single space also means runs of whitespace.
    header : bool, optional
        Whether the first non-comment line is a header. None treats it as a header when one of
        its first two tokens is not a number, and a numeric one as a count header ``n m [...]``
        (``1000,5000,0``) when its width differs from the edge lines' or when it counts the
        lines after it (``m``) and ``n`` covers their largest id; otherwise it is an edge. A
        count header's ``n`` is the node count (``num_nodes`` overrides it; with ``relabel``
        it is not used).
    id_base : {0, 1}
        Smallest node id in the file; 1-based ids are shifted down to 0-based, and the file's
        id kept as node field ``orig_id``.
    num_nodes : int, optional
        Node count (so trailing isolated nodes exist); default is a count header's ``n``, else
        the largest id + 1.
    comment : str or None
        Lines starting with this marker are skipped and trailing comments ignored.
    chunk_bytes : int
        Bytes parsed per block; small values are only useful in tests.
    name : str, optional
        Graph name; default is the file name without extensions.
    relabel : bool
        Number the ids that occur 0..n-1 in ascending order and keep each node's id as written
        in the file as node field ``orig_id`` (int64). For sparse ids (raw user or page ids),
        which would otherwise imply a node per possible id; excludes ``num_nodes``.

    Returns
    -------
    Graph
        Validated graph with int64 ``src``/``dst`` and, if the first data line has a third
        column, ``edata['weight']`` (float32). Columns after the third are ignored.
        ``notes['header_nodes']`` records a node count taken from a count header.
    """
    path = os.fspath(path)
    check_id_options(path, id_base, num_nodes)
    if relabel and num_nodes is not None:
        raise InputError(path, "cannot be combined with relabel (the count is then the number of distinct ids)",
                         "num_nodes", num_nodes)
    detect = delimiter is None
    delimiter = check_delimiter(path, delimiter)
    with TextTable(path, comment, chunk_bytes) as table:
        if table.first_line is None:
            raise InputError(path, "no edge lines (file is empty or only comments)", "src", "<none>")
        if detect:
            delimiter = guess_delimiter(table.first_line)
        first_tokens = split_tokens(table.first_line, delimiter)
        if header is None and not all(is_number(token) for token in first_tokens[:2]):
            header = True
        # Still None: a numeric first line, an edge or an "n m [directed]" count header, told
        # apart once the lines after it are read (see count_header).
        columns = dtype = None
        src_parts, dst_parts, weight_parts = [], [], []
        for text, line_number in table.blocks(skip_first=header is not False):
            if columns is None:
                columns = edge_columns(table, text, line_number, delimiter)
                if columns is None:
                    continue  # only comments so far
                dtype = np.dtype([(n, np.float32 if n == "weight" else np.int64) for n in columns[0]])
            rows = parse_block(table, text, line_number, dtype, delimiter, columns[0], {0, 1}, exact=False)
            if rows.shape[0]:
                for parts, values in zip((src_parts, dst_parts, weight_parts),
                                         edge_arrays(path, rows, columns[0], id_base)):
                    parts.append(values)
        counts = None
        if header:
            counts = leading_counts(first_tokens)  # a header said to be one: if numeric, n is the node count
        elif header is None:
            largest = max((int(max(a.max(), b.max())) for a, b in zip(src_parts, dst_parts)), default=-1)
            smallest = min((int(min(a.min(), b.min())) for a, b in zip(src_parts, dst_parts)), default=-1)
            rows = sum(p.shape[0] for p in src_parts)
            counts = count_header(first_tokens, columns and columns[1], rows, largest, id_base, relabel)
            if counts is None:  # the first line is an edge after all, unless it counts 1-based ids
                refuse_one_based_counts(path, (table.first_line_number, table.first_line), first_tokens,
                                        columns and columns[1], rows, smallest, largest, id_base, relabel)
                first_edge, columns = first_line_edge(table, columns, delimiter, id_base)
                for parts, values in zip((src_parts, dst_parts, weight_parts), first_edge):
                    parts.insert(0, values)
        header_line = (table.first_line_number, table.first_line) if counts is not None else None
    weight_parts = [part for part in weight_parts if part is not None]
    if not src_parts:
        raise InputError(path, "no edge lines after the header", "src", "<none>")
    src, dst = np.concatenate(src_parts), np.concatenate(dst_parts)
    del src_parts, dst_parts
    edata = {"weight": np.concatenate(weight_parts)} if weight_parts else {}
    if relabel:
        raw_ids, dense = np.unique(np.concatenate([src, dst]), return_inverse=True)
        dense = dense.astype(np.int64, copy=False).reshape(-1)
        graph = Graph(int(raw_ids.shape[0]), dense[:src.shape[0]], dense[src.shape[0]:], {ORIG_ID: raw_ids},
                      edata, name=name or graph_name(path), source=path)
        return graph.validate()
    largest = max(int(src.max()), int(dst.max()))
    notes = {}
    if header_line is not None and num_nodes is None:
        num_nodes = counts[0]
        notes["header_nodes"] = num_nodes
        if largest - id_base >= num_nodes:
            smallest = min(int(src.min()), int(dst.min()))
            refuse_one_based_counts(path, header_line, first_tokens, None, None, smallest, largest, id_base, False)
            raise InputError(path, f"header line {header_line[0]} gives {num_nodes} nodes but node id {largest} "
                             "occurs (--num-nodes N overrides the count, --no-header reads the line as an edge)",
                             "header", header_line[1])
    if num_nodes is None:
        num_nodes = largest + 1 - id_base
    elif largest - id_base >= num_nodes:
        column = "src" if int(src.max()) == largest else "dst"
        raise InputError(path, f"node id out of range [{id_base}, {num_nodes - 1 + id_base}] "
                         f"for num_nodes {num_nodes}", column, largest)
    ndata = {}
    if id_base:
        src -= id_base
        dst -= id_base
        ndata[ORIG_ID] = np.arange(id_base, num_nodes + id_base, dtype=np.int64)
    graph = Graph(int(num_nodes), src, dst, ndata, edata, name=name or graph_name(path), source=path, notes=notes)
    return graph.validate()
