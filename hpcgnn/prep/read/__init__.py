"""Graph readers: one entry point (``read_graph``) over every supported input format.

``detect_format`` picks the reader from the path (directory layout, ``.npz`` keys, file
extension, else the first lines of a text file); ``add_reader_arguments`` / ``reader_options``
give every command the same flags. An edge list may come with a node table
(``--node-table``), joined here after the edge list is read. Format ``ogb`` covers both OGB
layouts: node-property datasets (``read_ogb``) and link-property ones, whose split is
``split/<scheme>/*.pt`` and becomes the graph's held-out edge sets (``read_ogb_link``).

The formats of ``TYPED_FORMATS`` return a typed graph (:func:`hpcgnn.prep.typed.typed_graph`):
``rdf`` (N-Triples and R-GCN's label files, :mod:`~hpcgnn.prep.read.rdf`), ``magnn`` (MAGNN's
npz layout and HGB's split, :mod:`~hpcgnn.prep.read.magnn`), ``ogb_hetero`` (ogbn-mag's raw
layout, :mod:`~hpcgnn.prep.read.ogb_hetero`), ``typed_npz`` (hpcgnn's own,
:mod:`~hpcgnn.prep.read.typed_npz`) and ``typed_mat`` (HAN's per-relation ``.mat``,
:mod:`~hpcgnn.prep.read.typed_mat`).
"""
from __future__ import annotations

import argparse
import inspect
import os
import pickle
import zipfile
import zlib

from hpcgnn.prep.read.edgelist import read_edgelist, sniff_edgelist
from hpcgnn.prep.read.h5graph import is_h5graph, read_h5graph, write_h5graph
from hpcgnn.prep.read.heterophily import read_heterophily
from hpcgnn.prep.read.magnn import is_magnn_dir, read_magnn
from hpcgnn.prep.read.mat import read_mat
from hpcgnn.prep.read.nodetable import join_node_table
from hpcgnn.prep.read.npz import read_npz, write_npz
from hpcgnn.prep.read.ogb import read_ogb
from hpcgnn.prep.read.ogb_hetero import hetero_root, read_ogb_hetero
from hpcgnn.prep.read.ogb_link import read_ogb_any, read_ogb_link
from hpcgnn.prep.read.planetoid import PARTS as PLANETOID_PARTS
from hpcgnn.prep.read.planetoid import locate_planetoid, read_planetoid
from hpcgnn.prep.read.rdf import is_ntriples_name, read_rdf
from hpcgnn.prep.read.shchur import ADJACENCY_PREFIXES, read_shchur
from hpcgnn.prep.read.text import require_regular
from hpcgnn.prep.read.typed_common import DEFAULT_VAL_FRACTION
from hpcgnn.prep.read.typed_mat import is_typed_mat, read_typed_mat
from hpcgnn.prep.read.typed_npz import is_typed_npz_keys, read_typed_npz
from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.flags import MAX_COUNT, MAX_NODES, Domain

FORMATS = ("npz", "h5graph", "edgelist", "planetoid", "shchur", "ogb", "mat", "heterophily", "rdf", "magnn",
           "ogb_hetero", "typed_npz", "typed_mat")
#: the formats whose reader returns a typed graph (:mod:`hpcgnn.prep.typed`)
TYPED_FORMATS = ("rdf", "magnn", "ogb_hetero", "typed_npz", "typed_mat")
EDGELIST_EXTENSIONS = (".csv", ".tsv", ".txt", ".edges", ".el")
#: formats read by seeking in the file (zip members, HDF5 and MATLAB structures): never a pipe
SEEKING_EXTENSIONS = (".npz", ".mat", ".h5", ".hdf5")
_READERS = {"npz": read_npz, "h5graph": read_h5graph, "edgelist": read_edgelist, "planetoid": read_planetoid,
            "shchur": read_shchur, "ogb": read_ogb_any, "mat": read_mat, "heterophily": read_heterophily,
            "rdf": read_rdf, "magnn": read_magnn, "ogb_hetero": read_ogb_hetero,
            "typed_npz": read_typed_npz, "typed_mat": read_typed_mat}
# Reader keyword -> (command-line flag, default, attribute on the argparse namespace).
_FLAGS = {"delimiter": ("--delimiter", None, "delimiter"), "header": ("--header", None, "header"),
          "id_base": ("--id-base", 0, "id_base"), "num_nodes": ("--num-nodes", None, "num_nodes"),
          "relabel": ("--relabel", False, "relabel"), "split": ("--ogb-split", None, "ogb_split"),
          "node_table": ("--node-table", None, "node_table"),
          "label_column": ("--label-column", None, "label_column"),
          "table_features": ("--no-table-features", True, "table_features"),
          "adjacency_var": ("--mat-adjacency", None, "mat_adjacency"),
          "attributes_var": ("--mat-attributes", None, "mat_attributes"),
          "labels_var": ("--mat-labels", None, "mat_labels"),
          "features_var": ("--mat-features", None, "mat_features"),
          "split_index": ("--split-index", None, "split_index"),
          "labels": ("--labels", None, "labels"), "test_labels": ("--test-labels", None, "test_labels"),
          "entity_column": ("--entity-column", None, "entity_column"),
          "val_fraction": ("--val-fraction", DEFAULT_VAL_FRACTION, "val_fraction"),
          "hgb_split": ("--hgb-split", False, "hgb_split"), "type_names": ("--type-names", None, "type_names"),
          "target_type": ("--target-type", None, "target_type"),
          "add_reverse": ("--add-reverse", False, "add_reverse")}
# Reader keyword -> attribute of a flag another part of the command owns: passed to the readers
# that take it, never refused for the others (``--split-seed`` also seeds partition's --split).
_SHARED_FLAGS = {"split_seed": "split_seed"}
# Options of an edge list's node table, which read_graph joins after read_edgelist.
_NODE_TABLE_OPTIONS = ("node_table", "label_column", "table_features")
# What parsers (numpy, zipfile, gzip, pickle, csv) raise on a truncated, empty or foreign file.
_PARSE_ERRORS = (EOFError, OSError, ValueError, KeyError, IndexError, TypeError, AttributeError,
                 zipfile.BadZipFile, zlib.error, pickle.UnpicklingError)
_FORMAT_OPTIONS = {"npz": (), "h5graph": (), "planetoid": (), "shchur": (), "ogb": ("split",),
                   "edgelist": ("delimiter", "header", "id_base", "num_nodes", "relabel") + _NODE_TABLE_OPTIONS,
                   "mat": ("adjacency_var", "attributes_var", "labels_var", "features_var", "label_column",
                           "table_features"),
                   "heterophily": ("split_index",),
                   "rdf": ("labels", "test_labels", "entity_column", "label_column", "val_fraction", "split_seed"),
                   "magnn": ("hgb_split", "val_fraction", "split_seed", "type_names", "target_type"),
                   "ogb_hetero": ("split", "target_type", "add_reverse"), "typed_npz": ("add_reverse",),
                   "typed_mat": ("labels_var", "features_var", "target_type", "add_reverse")}

__all__ = ["FORMATS", "TYPED_FORMATS", "add_reader_arguments", "detect_format", "join_node_table", "read_edgelist",
           "read_graph", "read_h5graph", "read_heterophily", "read_magnn", "read_mat", "read_npz", "read_ogb",
           "read_ogb_hetero", "read_ogb_link", "read_planetoid", "read_rdf", "read_shchur", "read_typed_mat",
           "read_typed_npz", "reader_options", "write_h5graph", "write_npz"]


def _formats_hint():
    return f"pass --format (one of {', '.join(FORMATS)})"


def _is_planetoid_prefix(path):
    directory, name = locate_planetoid(path)
    return os.path.isfile(os.path.join(directory, f"ind.{name}.graph"))


def detect_format(path) -> str:
    """Local. Guess the input format of ``path`` from its layout, keys or extension.

    Parameters
    ----------
    path : str or os.PathLike
        A file, a dataset directory, or a Planetoid prefix such as ``data/ind.cora``.

    Returns
    -------
    str
        One of ``FORMATS``: a directory with ``raw/edge.csv.gz`` is ``ogb`` (a node-property
        dataset, or a link-property one when some ``split/<scheme>/train.pt`` exists: the
        ``ogb`` reader tells them apart, ``read_ogb_link``); a directory or
        prefix with ``ind.<name>.graph`` is ``planetoid``; a ``.npz`` with ``src``/``dst`` is
        ``npz``, one with ``adj_*`` or ``adj_matrix.*`` arrays or an ``adj_matrix`` is
        ``shchur`` and one with ``edges`` and ``node_features``/``node_labels`` is
        ``heterophily``; a ``.h5``/``.hdf5`` graph file is ``h5graph``; a ``.mat`` is ``mat``;
        ``.csv``, ``.tsv``, ``.txt``, ``.edges``, ``.el`` (optionally ``.gz``) are
        ``edgelist``, and so is any other file whose first lines read as one
        (``sniff_edgelist``: ``graph.dat``, ``graph``, a gzipped file without ``.gz``, a pipe
        such as ``/dev/stdin``, whose first lines are kept for the reader).
        Typed graphs (``TYPED_FORMATS``): a directory with ``adjM.npz`` and
        ``node_types.npy`` (or that ``adjM.npz``) is ``magnn``; one with
        ``raw/num-node-dict.csv.gz`` is ``ogb_hetero``; an N-Triples file (``.nt``,
        ``.nt.gz``, ...) or a directory holding one is ``rdf``; a ``.npz`` with
        ``edges/<src>/<rel>/<dst>`` and ``num_nodes/<type>`` arrays is ``typed_npz``; a
        ``.mat`` with ``XvsY`` variables (``PvsA``) is ``typed_mat``.

    Raises
    ------
    InputError
        If the path is missing or matches no format; for a ``.npz`` the message lists its keys;
        a pipe named as a format that is read by seeking (``.npz``, ``.mat``, ``.h5``).
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        if is_magnn_dir(path):
            return "magnn"
        if hetero_root(path) is not None:
            return "ogb_hetero"
        raw = os.path.join(path, "raw")
        if any(os.path.isfile(os.path.join(raw, "edge" + ext)) for ext in (".csv.gz", ".csv")):
            return "ogb"
        if any(e.startswith("ind.") and e.endswith(".graph") for e in os.listdir(path)):
            return "planetoid"
        if any(is_ntriples_name(e) for e in os.listdir(path)):
            return "rdf"
        raise InputError(path, "directory holds neither an OGB dataset (raw/edge.csv.gz or, heterogeneous, "
                         "raw/num-node-dict.csv.gz), Planetoid files (ind.<name>.graph), a MAGNN dataset (adjM.npz "
                         f"and node_types.npy) nor an N-Triples file (.nt); {_formats_hint()}", "format",
                         "<directory>")
    if not os.path.exists(path):
        if _is_planetoid_prefix(path):
            return "planetoid"
        raise InputError(path, "file not found")
    base = os.path.basename(path).lower()
    if base.startswith("ind.") and base.endswith(tuple("." + part for part in PLANETOID_PARTS)):
        return "planetoid"
    if base.endswith(SEEKING_EXTENSIONS):  # never opened to look inside: the look would use a pipe up
        require_regular(path, "is read by seeking in it (npz, .mat, HDF5)")
    if base == "adjm.npz" and is_magnn_dir(os.path.dirname(path) or "."):
        return "magnn"
    if base.endswith(".npz"):
        try:
            with zipfile.ZipFile(path) as archive:
                keys = {entry[:-4] for entry in archive.namelist() if entry.endswith(".npy")}
        except (OSError, zipfile.BadZipFile) as exc:
            raise InputError(path, f"not a readable .npz archive ({exc})", "format", "npz") from None
        return _npz_format(path, keys)
    if base.endswith(".mat"):
        return "typed_mat" if is_typed_mat(path) else "mat"
    if base.endswith((".h5", ".hdf5")):
        if is_h5graph(path):
            return "h5graph"
        raise InputError(path, "is not a hpcgnn graph file (an HDF5 graph is written by hpcgnn convert or "
                         f"hpcgnn generate); {_formats_hint()}", "format", "h5graph")
    if is_ntriples_name(base):
        return "rdf"
    stem = base[:-3] if base.endswith(".gz") else base
    extension = os.path.splitext(stem)[1]
    if extension in EDGELIST_EXTENSIONS or sniff_edgelist(path):
        return "edgelist"
    raise InputError(path, "cannot tell the graph format from the file name or its first lines (an edge list "
                     f"has 'src dst [weight]' lines); {_formats_hint()}", "format", extension or base)


def _npz_format(path, keys):
    if {"src", "dst"} <= keys:
        return "npz"
    if is_typed_npz_keys(keys):
        return "typed_npz"
    if "adj_matrix" in keys or any(key.startswith(ADJACENCY_PREFIXES) for key in keys):
        return "shchur"
    if "edges" in keys and keys & {"node_features", "node_labels"}:
        return "heterophily"
    raise InputError(path, "npz has neither src/dst (npz), adj_* or adj_matrix.* (shchur), edges with "
                     "node_features/node_labels (heterophily) nor edges/<src>/<rel>/<dst> with num_nodes/<type> "
                     f"(typed_npz) arrays; {_formats_hint()}", "keys", sorted(keys))


def read_graph(path, format=None, **options):
    """Local. Read any supported graph input and return the validated Graph.

    Parameters
    ----------
    path : str or os.PathLike
        File, directory or prefix (see ``detect_format``).
    format : str, optional
        One of ``FORMATS``; detected from ``path`` when None.
    **options
        Keyword options of the chosen reader (``read_edgelist``: ``delimiter``, ``header``,
        ``id_base``, ``num_nodes``, ``relabel``, ...; ``read_ogb``: ``split``; ``read_planetoid``:
        ``name``; ``read_mat``: ``adjacency_var``, ``label_column``, ...; ``read_heterophily``:
        ``split_index``; ``read_rdf``: ``labels``, ``test_labels``, ``entity_column``,
        ``label_column``, ``val_fraction``, ``split_seed``; ``read_magnn``: ``hgb_split``,
        ``val_fraction``, ``split_seed``, ``type_names``, ``target_type``;
        ``read_ogb_hetero``: ``split``, ``target_type``, ``add_reverse``; ``read_typed_npz``:
        ``add_reverse``; ``read_typed_mat``: ``labels_var``, ``features_var``,
        ``target_type``, ``add_reverse``). An edge list also takes ``node_table`` (a path),
        ``label_column`` and ``table_features``: the table is joined by ``join_node_table``.

    Returns
    -------
    Graph
        The graph, already checked by ``Graph.validate`` and ``Graph.check_memory``.

    Raises
    ------
    InputError
        For an unknown format, an option the reader does not take, or bad input. Any error a
        parser raises on a file it cannot read (EOFError, zipfile.BadZipFile, ValueError,
        OSError, KeyError, ...) becomes an InputError naming the file and the format.
    """
    path = os.fspath(path)
    if format is None:
        format = detect_format(path)
    elif format not in FORMATS:
        raise InputError(path, f"unknown format (choose from {', '.join(FORMATS)})", "format", format)
    if format != "edgelist":  # the text readers read a pipe in one pass; the others seek
        require_regular(path, f"is read as {format}, by seeking in it")
    reader = _READERS[format]
    table = {key: options.pop(key) for key in _NODE_TABLE_OPTIONS if key in options} if format == "edgelist" else {}
    if table and table.get("node_table") is None:
        key = next(iter(table))
        raise InputError(path, "applies to a node table: pass --node-table FILE", key, _shown(table[key]))
    accepted = inspect.signature(reader).parameters
    for key, value in options.items():
        if key not in accepted or key == "path":
            raise InputError(path, f"option does not apply to format {format}", key, _shown(value))
    reading = path
    try:
        graph = reader(path, **options)
        if table:
            reading = os.fspath(table.pop("node_table"))
            graph = join_node_table(graph, reading, relabel=options.get("relabel", False), **table)
    except InputError:
        raise
    except MemoryError:
        raise InputError(reading, f"too large to read as {format} in the available memory", "format",
                         format) from None
    except _PARSE_ERRORS as exc:
        # Readers name the field for the faults they know; anything else a parser raises on a
        # truncated, empty or foreign file still ends as one line naming the file and format.
        detail = " ".join(f"{type(exc).__name__}: {exc}".split())
        what = format if reading == path else "a node table"
        raise InputError(reading, f"cannot be read as {what} ({detail})", "format", format) from None
    return graph.check_memory()


def _shown(value):
    # repr keeps a tab or space delimiter visible in the one-line message.
    return repr(value) if isinstance(value, str) else value


def _delimiter_argument(text):
    named = {"tab": "\t", "\\t": "\t", "comma": ",", "space": " ", "whitespace": " ", "semicolon": ";"}
    value = named.get(text.lower(), text)
    if len(value) != 1:
        raise argparse.ArgumentTypeError(f"expected one character or tab/comma/space, got {text!r}")
    return value


def add_reader_arguments(parser):
    """Local. Add the input-format flags shared by every command that reads a graph.

    Parameters
    ----------
    parser : argparse.ArgumentParser
        Gains ``--format``, ``--delimiter``, ``--header``/``--no-header``, ``--id-base``,
        ``--num-nodes``, ``--relabel``, ``--ogb-split`` and ``--split-index`` in an "input
        format" group, and ``--node-table``, ``--label-column``, ``--no-table-features`` and
        ``--mat-adjacency``/``-attributes``/``-labels``/``-features`` in a "node labels and
        features" group, and ``--labels``, ``--test-labels``, ``--entity-column``,
        ``--val-fraction``, ``--hgb-split``, ``--type-names``, ``--add-reverse`` and
        ``--target-type`` in a "typed graphs" group. A typed reader that draws a validation
        part (``--val-fraction``) takes its seed from the command's ``--split-seed`` where it
        has one.

    Returns
    -------
    argparse._ArgumentGroup
        The group, should the caller want to add more.
    """
    group = parser.add_argument_group("input format")
    group.add_argument("--format", choices=FORMATS, default=None,
                       help="input format (default: detected from the path)")
    group.add_argument("--delimiter", type=_delimiter_argument, default=None,
                       help="edge-list column separator: a character, 'tab', 'comma' or 'space' "
                            "(default: detected)")
    header = group.add_mutually_exclusive_group()
    header.add_argument("--header", dest="header", action="store_true", default=None,
                        help="the edge list's first line is a header: column names, or a count line "
                             "'n m ...' whose n is the node count (default: detected)")
    header.add_argument("--no-header", dest="header", action="store_false", default=None,
                        help="the edge list has no header line")
    group.add_argument("--id-base", type=int, choices=(0, 1), default=0,
                       help="smallest node id in the edge list; 1-based ids are shifted down (default 0)")
    group.add_argument("--num-nodes", type=Domain(int, ge=1, le=MAX_NODES), default=None,
                       help="edge-list node count (default: a count header's n, else largest id + 1)")
    group.add_argument("--relabel", action="store_true",
                       help="number the edge list's ids 0..n-1 in sorted order (for sparse ids such as "
                            "raw user ids); the part files' orig_id keeps the file's id")
    group.add_argument("--ogb-split", default=None, metavar="SCHEME",
                       help="OGB split scheme under split/ (default: the only or first one)")
    group.add_argument("--split-index", type=Domain(int, ge=0, le=MAX_COUNT), default=None, metavar="I",
                       help="heterophily npz holding k predefined splits (train_masks [k, N]): use split I "
                            "(required when k > 1)")
    nodes = parser.add_argument_group("node labels and features (node table, .mat)")
    nodes.add_argument("--node-table", default=None, metavar="FILE",
                       help="table beside an edge list: a header line, then 'id,<label>[,feature...]' rows "
                            "with the edge list's ids; label -1 for nodes without a row")
    nodes.add_argument("--label-column", default=None, metavar="COL",
                       help="the label column: a node table's column name (default: 'label'), or the "
                            "0-based column of a .mat attribute table (0 there = unlabelled)")
    nodes.add_argument("--no-table-features", dest="table_features", action="store_false",
                       help="keep the table's other columns out of feat (otherwise: a node table's numeric "
                            "columns as they are, a .mat table's integer codes one-hot)")
    typed = parser.add_argument_group("typed graphs (RDF, MAGNN, OGB heterogeneous, typed npz, typed .mat)")
    typed.add_argument("--labels", default=None, metavar="FILE",
                       help="RDF: the training entities' label file, tab-separated with a header "
                            "(default: trainingSet.tsv beside the triples)")
    typed.add_argument("--test-labels", default=None, metavar="FILE",
                       help="RDF: the test entities' label file (default: testSet.tsv beside the triples)")
    typed.add_argument("--entity-column", default=None, metavar="COL",
                       help="RDF: the label files' entity column (default: the column whose values are all "
                            "nodes of the graph); --label-column names the label column (default: label...)")
    typed.add_argument("--val-fraction", type=Domain(float, ge=0, lt=1), default=DEFAULT_VAL_FRACTION,
                       metavar="F",
                       help="RDF, MAGNN with --hgb-split: the files give train and test only, so a stratified "
                            "fraction F of the training nodes is held out for validation, seeded by "
                            f"--split-seed (default {DEFAULT_VAL_FRACTION}; 0: no validation set)")
    typed.add_argument("--hgb-split", action="store_true",
                       help="MAGNN: HGB's split under hgb_split/ (label.dat: train+val, label.dat.test_full: "
                            "test) instead of MAGNN's train_val_test_idx.npz")
    typed.add_argument("--type-names", default=None, metavar="A,B,...",
                       help="MAGNN: the node type names in type-id order (default: hgb_split/info.dat's, "
                            "MAGNN's for DBLP, IMDB and LastFM, else type0, type1, ...)")
    typed.add_argument("--add-reverse", action="store_true",
                       help="typed layouts that store each relation in one direction (OGB heterogeneous, typed "
                            "npz, typed .mat): add relation rev_<r> (dst_type -> src_type) for every relation r")
    typed.add_argument("--target-type", default=None, metavar="TYPE",
                       help="the labelled node type, where the files do not tell")
    for role, what in (("adjacency", "the adjacency"), ("attributes", "the attribute table of --label-column"),
                       ("labels", "the labels"), ("features", "the features")):
        nodes.add_argument(f"--mat-{role}", default=None, metavar="NAME",
                           help=f".mat variable holding {what} (default: found by shape and name)")
    return group


def reader_options(args, path=None, format=None):
    """Local. Turn parsed reader flags into keyword options for ``read_graph``.

    Parameters
    ----------
    args : argparse.Namespace
        Result of a parser prepared by ``add_reader_arguments``.
    path : str or os.PathLike, optional
        The input, used to detect the format when neither ``format`` nor ``--format`` was given.
    format : str, optional
        The input's format when the caller has already detected it.

    Returns
    -------
    dict
        Options that apply to the chosen format and differ from their defaults, and for a
        format that takes it the command's ``split_seed`` (``--split-seed``, which also seeds
        partition's ``--split``: never refused for a format without it). Without a known
        format, every non-default option is returned and ``read_graph`` rejects those the
        detected reader does not take.

    Raises
    ------
    InputError
        If a flag was given that the chosen format does not use (e.g. ``--delimiter`` for npz).
    """
    format = format or getattr(args, "format", None)
    if format is None and path is not None:
        format = detect_format(path)
    given = {}
    for key, (flag, default, attribute) in _FLAGS.items():
        value = getattr(args, attribute, default)
        if value != default:
            given[key] = (flag, value)
    if format is None:
        return {key: value for key, (_, value) in given.items()}
    for key, (flag, value) in given.items():
        if key not in _FORMAT_OPTIONS[format]:
            raise InputError(path if path is not None else "<command line>",
                             f"option does not apply to format {format}", flag, _shown(value))
    options = {key: value for key, (_, value) in given.items()}
    for key, attribute in _SHARED_FLAGS.items():
        if key in _FORMAT_OPTIONS[format] and getattr(args, attribute, None) is not None:
            options[key] = getattr(args, attribute)
    return options
