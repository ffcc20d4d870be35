"""RDF N-Triples with entity labels: the R-GCN entity-classification layout (AIFB, MUTAG, BGS, AM).

The input is an N-Triples file (``.nt``, plain or gzip/bzip2/xz-compressed whatever its name),
or a directory holding exactly one (``*.nt``, ``*.nt.gz``, ``*.ntriples``...). Every subject
and object is a node of the one node type ``entity``: IRIs, blank nodes (by label) and
literals, a literal being its whole term (``"1999"^^<...#gYear>`` and ``"1999"`` are two
nodes), numbered in order of first appearance. Every predicate is a relation, named from its
IRI's last segment made a schema name (unique: ``_2``, ``_3`` after a repeat; the IRI behind
each name is kept in ``notes['relations']``), and its inverse ``rev_<name>`` is added as R-GCN
does. Self-loops are the model's (R-GCN's self-connection weight), not relations here. Nodes
have no features: the model learns an embedding for the type.

Labels come from two tab-separated files with a header line (CRLF line ends are fine): the
training file (``--labels FILE``; default ``trainingSet.tsv`` beside the triples) and the test
file (``--test-labels FILE``; default ``testSet.tsv``). The entity column is the one whose
values are all nodes of the graph (``--entity-column NAME`` to choose), the label column is
the one named ``label...`` (``--label-column NAME``); label values (affiliation IRIs, ...)
are classes numbered in ascending order (``notes['class_names']``). R-GCN's files have no
validation set: a seeded stratified ``--val-fraction`` (default 0.2) of the training entities
is held out for model selection (seed: ``--split-seed``; 0 keeps every training entity in
training), see :mod:`hpcgnn.prep.read.typed_common`.
"""
from __future__ import annotations

import io
import os
import re
from array import array

import numpy as np

from hpcgnn.prep.graph import Graph
from hpcgnn.prep.read.text import open_binary
from hpcgnn.prep.read.typed_common import (
    DEFAULT_VAL_FRACTION,
    check_fraction,
    class_ids,
    hold_out_validation,
    masks_from_ids,
    sanitized_name,
)
from hpcgnn.prep.typed import typed_graph
from hpcgnn.runtime.errors import InputError

NODE_TYPE = "entity"
#: names of N-Triples files (a directory input holds exactly one)
NT_SUFFIXES = (".nt", ".nt.gz", ".nt.bz2", ".nt.xz", ".ntriples", ".ntriples.gz")
TRAIN_FILES = ("trainingSet.tsv", "training_set.tsv", "train.tsv")
TEST_FILES = ("testSet.tsv", "test_set.tsv", "test.tsv")

_IRI = r"<[^<>\"{}|^`\\\x00-\x20]*>"
_BLANK = r"_:[A-Za-z0-9_][A-Za-z0-9_\-.]*(?<!\.)"
_LITERAL = r"\"(?:[^\"\\\n\r]|\\.)*\"(?:@[A-Za-z]+(?:-[A-Za-z0-9]+)*|\^\^" + _IRI + ")?"
_TRIPLE = re.compile(rf"\s*({_IRI}|{_BLANK})\s*({_IRI})\s*({_IRI}|{_BLANK}|{_LITERAL})\s*\.\s*(?:#.*)?")


def find_triples(path) -> str:
    """Local. The N-Triples file of ``path``: the file itself, or the one such file in a directory."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        return path
    found = sorted(entry for entry in os.listdir(path) if entry.lower().endswith(NT_SUFFIXES))
    if len(found) != 1:
        raise InputError(path, f"directory holds {len(found)} N-Triples files ({', '.join(found) or 'none'}); "
                         "pass the file itself as the input", "input", "<directory>")
    return os.path.join(path, found[0])


def is_ntriples_name(path) -> bool:
    """Local. Whether ``path`` is named as an N-Triples file."""
    return os.path.basename(os.fspath(path)).lower().endswith(NT_SUFFIXES)


def _read_triples(path):
    """``(terms, predicates, edges)``: node id by term text, predicate IRIs in order of first
    appearance, and per predicate ``(src, dst)`` int64 arrays."""
    nodes, predicates, edges = {}, {}, []
    with open_binary(path) as raw, io.TextIOWrapper(raw, encoding="utf-8", errors="surrogateescape") as text:
        for number, line in enumerate(text, 1):
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                continue
            match = _TRIPLE.fullmatch(stripped)
            if match is None:
                raise InputError(path, "not an N-Triples line '<subject> <predicate> <object> .' (is the input "
                                 "N-Triples? else pass --format)", f"line {number}", stripped)
            subject, predicate, obj = match.groups()
            r = predicates.get(predicate)
            if r is None:
                r = predicates[predicate] = len(predicates)
                edges.append((array("q"), array("q")))
            s = nodes.get(subject)
            if s is None:
                s = nodes[subject] = len(nodes)
            o = nodes.get(obj)
            if o is None:
                o = nodes[obj] = len(nodes)
            edges[r][0].append(s)
            edges[r][1].append(o)
    if not predicates:
        raise InputError(path, "holds no triples", "triples", 0)
    arrays = [(np.frombuffer(s, dtype=np.int64), np.frombuffer(d, dtype=np.int64)) for s, d in edges]
    return nodes, list(predicates), arrays


def _label_file(path, given, candidates, flag):
    if given is not None:
        if not os.path.isfile(given):
            raise InputError(given, "label file not found", flag, given)
        return os.fspath(given)
    directory = os.path.dirname(path) or "."
    for name in candidates:
        candidate = os.path.join(directory, name)
        if os.path.isfile(candidate):
            return candidate
    raise InputError(path, f"no label file beside the triples ({' or '.join(candidates)}); name it with {flag} FILE",
                     flag, None)


def _read_label_rows(path):
    """``(header, rows)`` of a tab-separated file with a header line."""
    with open_binary(path) as raw, io.TextIOWrapper(raw, encoding="utf-8", errors="surrogateescape") as text:
        lines = [line.rstrip("\r\n") for line in text]
    lines = [(number, line) for number, line in enumerate(lines, 1) if line.strip()]
    if not lines:
        raise InputError(path, "label file is empty (a header line, then one entity per line)", "header", None)
    header = [name.strip() for name in lines[0][1].split("\t")]
    rows = []
    for number, line in lines[1:]:
        cells = [cell.strip() for cell in line.split("\t")]
        if len(cells) != len(header):
            raise InputError(path, f"line has {len(cells)} tab-separated columns, the header {len(header)}",
                             f"line {number}", line)
        rows.append((number, cells))
    if not rows:
        raise InputError(path, "label file has a header but no rows", "rows", 0)
    return header, rows


def _column(path, header, given, flag, pick, what):
    if given is not None:
        if given not in header:
            raise InputError(path, f"no such column (the header has {', '.join(header)})", flag, given)
        return header.index(given)
    chosen = [i for i, name in enumerate(header) if pick(i, name)]
    if len(chosen) != 1:
        found = ", ".join(header[i] for i in chosen) or "none"
        raise InputError(path, f"cannot tell the {what} column (candidates: {found}; the header has "
                         f"{', '.join(header)}); name it with {flag} NAME", flag, None)
    return chosen[0]


def _labelled_entities(path, nodes, entity_column, label_column):
    """``(node ids, label values)`` of a label file."""
    header, rows = _read_label_rows(path)
    label_at = _column(path, header, label_column, "--label-column",
                       lambda i, name: name.lower().startswith("label"), "label")

    def all_nodes(i, _):
        return i != label_at and all(f"<{cells[i]}>" in nodes for _, cells in rows)

    entity_at = _column(path, header, entity_column, "--entity-column", all_nodes, "entity")
    ids = np.empty(len(rows), dtype=np.int64)
    for k, (number, cells) in enumerate(rows):
        node = nodes.get(f"<{cells[entity_at]}>")
        if node is None:
            raise InputError(path, f"entity is not a node of the graph (column {header[entity_at]}; "
                             "--entity-column chooses another)", f"line {number}", cells[entity_at])
        ids[k] = node
    values = [cells[label_at] for _, cells in rows]
    unique, first = np.unique(ids, return_index=True)
    if unique.shape[0] != ids.shape[0]:
        again = np.setdiff1d(np.arange(ids.shape[0]), first)[0]
        raise InputError(path, "entity listed twice", f"line {rows[again][0]}", rows[again][1][entity_at])
    return ids, values


def read_rdf(path, labels=None, test_labels=None, entity_column=None, label_column=None,
             val_fraction=DEFAULT_VAL_FRACTION, split_seed=0, name=None) -> Graph:
    """Local. Read an N-Triples graph and its label files (layout: module docstring).

    Parameters
    ----------
    path : str or os.PathLike
        The ``.nt`` file (compressed or not) or a directory holding one.
    labels, test_labels : str, optional
        The training and test label files (``--labels``, ``--test-labels``); default
        ``trainingSet.tsv`` and ``testSet.tsv`` beside the triples.
    entity_column, label_column : str, optional
        Header names of the entity and label columns (detected when None).
    val_fraction : float
        Stratified fraction of the training entities held out for validation (0: none).
    split_seed : int
        Seed of that hold-out.

    Returns
    -------
    Graph
        A typed graph (:func:`~hpcgnn.prep.typed.typed_graph`): one node type ``entity`` without
        features, one relation per predicate plus its inverse ``rev_<name>``, labels and masks.
    """
    triples = find_triples(path)
    val_fraction = check_fraction(triples, val_fraction)
    train_path = _label_file(triples, labels, TRAIN_FILES, "--labels")
    test_path = _label_file(triples, test_labels, TEST_FILES, "--test-labels")
    nodes, predicates, edges = _read_triples(triples)
    train_ids, train_values = _labelled_entities(train_path, nodes, entity_column, label_column)
    test_ids, test_values = _labelled_entities(test_path, nodes, entity_column, label_column)
    both = np.intersect1d(train_ids, test_ids)
    if both.size:
        term = next(t for t, i in nodes.items() if i == both[0])
        raise InputError(test_path, f"entity also in the training file {train_path}", "entity", term)
    classes, class_names = class_ids(train_values + test_values)
    num_nodes = len(nodes)
    label = np.full(num_nodes, -1, dtype=np.int64)
    label[train_ids] = classes[:train_ids.shape[0]]
    label[test_ids] = classes[train_ids.shape[0]:]
    train, val = hold_out_validation(train_path, train_ids, label[train_ids], val_fraction, split_seed)
    masks = masks_from_ids(triples, num_nodes, {"train_mask": train, "val_mask": val, "test_mask": test_ids})
    del nodes
    taken, relations, named = set(), [], {}
    for iri, (src, dst) in zip(predicates, edges):
        local = re.split(r"[#/:]", iri[1:-1].rstrip("/#"))[-1]
        rel = sanitized_name(local, taken)
        named[rel] = iri[1:-1]
        relations.append((NODE_TYPE, rel, NODE_TYPE, src, dst))
    notes = {"relations": named, "class_names": class_names, "val_fraction": val_fraction,
             "split_seed": int(split_seed), "labels": os.path.basename(train_path),
             "test_labels": os.path.basename(test_path)}
    stem = os.path.basename(triples)
    for suffix in NT_SUFFIXES:
        if stem.lower().endswith(suffix):
            stem = stem[:-len(suffix)]
            break
    return typed_graph({NODE_TYPE: num_nodes}, relations, target=NODE_TYPE, label=label, masks=masks,
                       name=name or stem, source=triples, add_reverse=True, notes=notes)
