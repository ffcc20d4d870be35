"""The checks of ``hpcgnn inspect DIR [--verify] [--json]`` (the command: :mod:`hpcgnn.cli.inspect`): what a
partitioned dataset holds, and whether it is intact.

Without ``--verify`` only ``meta.json`` is read. ``--verify`` re-reads every part file and
checks checksums and the format's invariants (with held-out edge sets for link prediction, theirs
too), then that the stored edges are the ones partitioned (meta.json's ``edge_digest``), and
with ``--against INPUT`` that they are the input's, read and cleaned again; any mismatch is
reported and the exit status is non-zero.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os

import numpy as np

from hpcgnn.format import ondisk
from hpcgnn.format.fields import MASKS, ORIG_ID
from hpcgnn.format.schema import ETYPE, TypeLayout
from hpcgnn.prep.edge_digest import EdgeDigest, csc_digest, graph_digest
from hpcgnn.prep.read import add_reader_arguments
from hpcgnn.runtime.errors import InputError


def verify(directory, meta: dict, notes=None) -> list[str]:
    """Local. Check every part file against ``meta.json``; return the problems found (and
    append to ``notes``, when given, the checks that could not run, with why).

    Checked: file size and SHA-256; what loading checks (the file's objects, types, layouts and
    filters when it is opened, :meth:`ondisk.PartFile.problems`: attributes, every dataset's shape
    and dtype; :meth:`ondisk.PartFile.value_problems`: ``indptr`` a CSC offset array, ``indices``
    within ``[0, num_nodes)``, labels in range and set on every masked node); every dataset's
    bytes read back, so each chunk's fletcher32 checksum is verified and a damaged one named;
    ``orig_id`` (each node's id in the input file) never repeats across all parts, and ``eid`` is
    a permutation of ``[0, num_edges)``: these two are checked (and arrays of ``num_nodes`` and
    ``num_edges`` entries allocated) only when every part file agrees with ``meta.json``, so that
    the counts are the files' own.
    With edge sets (``meta["link"]``): every id of ``link_*`` in ``[0, num_nodes)``, each
    evaluation edge's destination owned by its part, and no evaluation edge in any part's CSC
    (in either direction when ``link.symmetric``).
    A typed dataset (``meta["schema"]``): every edge's relation index in range, its source and
    destination of the types its relation names (through the
    :class:`~hpcgnn.format.schema.TypeLayout`), every node's in-edges grouped by relation in
    ascending order, the per-type fields one row per node of their type in the part (the shapes
    :meth:`ondisk.PartFile.problems` checks) and the edges of each relation as many as
    ``schema.relation_counts`` says.
    A part that cannot be opened or read (truncated, corrupt) is one problem, and the others
    are still checked. Last, once all of that passed, the stored edges themselves
    (:func:`_check_stored_edges`).
    """
    problems = []
    held_out = _held_out_keys(directory, meta, problems)
    complete = _parts_agree_with_meta(directory, meta)
    seen_nodes = np.zeros(meta["num_nodes"], dtype=bool) if complete else None
    seen_edges = np.zeros(meta["num_edges"], dtype=bool) if complete else None
    beyond = []  # orig_id values >= num_nodes: input ids left by --largest-component or --relabel
    typed = _TypedCheck(meta) if meta.get("schema") is not None else None
    for part_id, info in enumerate(meta["parts"]):
        try:
            complete &= _verify_part(directory, meta, part_id, info, seen_nodes, seen_edges, beyond, problems,
                                     held_out, typed)
        except InputError as exc:
            problems.append(str(exc))
            complete = False
    if typed is not None and complete:
        typed.check_relation_counts(problems)
    beyond = np.concatenate(beyond) if beyond else np.empty(0, dtype=np.int64)
    if np.unique(beyond).shape[0] != beyond.shape[0]:
        problems.append("orig_id repeats ids across parts")
    missing = meta["num_nodes"] - int(seen_nodes.sum()) - beyond.shape[0] if complete else 0
    if missing:
        problems.append(f"orig_id misses {missing} of {meta['num_nodes']} nodes")
    if complete and not seen_edges.all():
        problems.append(f"eid misses {int((~seen_edges).sum())} of {meta['num_edges']} edges")
    if problems and notes is not None:
        notes.append("edge check not run: the part files fail the checks above")
    elif not problems:
        _check_stored_edges(directory, meta, problems, notes)
    return problems


EDGE_CHECK_SKIPPED = ("edge check skipped: meta.json has no edge_digest (the dataset was written before hpcgnn "
                      "recorded one; partition it again to have its stored edges checked)")


def _check_stored_edges(directory, meta, problems, notes=None) -> None:
    """Local. Whether the part files hold the edges that were partitioned, appending a mismatch
    to ``problems`` as one line.

    Each stored edge ``indices[k] -> node i`` is named by its endpoints' ``orig_id`` (every
    part's ``orig_id`` loaded into one array of ``num_nodes`` ids, so any source resolves) and
    hashed (:func:`~hpcgnn.prep.edge_digest.csc_digest`); the sum and count must equal
    meta.json's ``edge_digest``, which the writer took from the cleaned edge list. This catches
    what structure checks cannot: an edge given a wrong source or destination, edges swapped,
    lost or repeated. The part files must already have passed :func:`verify`'s structural
    checks. A dataset without ``edge_digest`` (written before it existed) is not checked, and
    ``notes`` says so.
    """
    notes = notes if notes is not None else []
    meta_path = os.path.join(os.fspath(directory), "meta.json")
    entry = meta.get("edge_digest")
    if entry is None:
        notes.append(EDGE_CHECK_SKIPPED)
        return
    try:
        recorded = EdgeDigest.from_meta(entry)
    except ValueError as exc:
        problems.append(str(InputError(meta_path, str(exc), "edge_digest", entry)))
        return
    try:
        stored = _stored_digest(directory, meta)
    except InputError as exc:  # a read that failed now, after the structural pass read it fine
        problems.append(str(exc))
        return
    if stored != recorded:
        problems.append(str(InputError(
            meta_path, f"the part files do not hold the edges that were partitioned: theirs (in orig ids) are "
            f"{stored.count} edges summing to {stored.to_meta()['sum']}; partition the input again", "edge_digest",
            f"{recorded.count} edges summing to {entry['sum']}")))


def _stored_digest(directory, meta) -> EdgeDigest:
    """Local. The :class:`~hpcgnn.prep.edge_digest.EdgeDigest` of the edges the part files hold,
    in orig ids (the files must have passed :func:`verify`'s structural checks)."""
    orig_of = np.empty(meta["num_nodes"], dtype=np.int64)
    for part_id in range(meta["num_parts"]):
        with ondisk.PartFile(directory, meta, part_id) as part:
            start, end = part.node_range
            orig_of[start:end] = part.read("orig_id")
    stored = EdgeDigest()
    for part_id in range(meta["num_parts"]):
        with ondisk.PartFile(directory, meta, part_id) as part:
            start, end = part.node_range
            stored += csc_digest(part.read("indptr"), part.read("indices"), orig_of[start:end], orig_of)
    return stored


#: meta.json ``source`` keys of the clean-up steps that change the edges, and their partition flags
_EDGE_CLEANUP_FLAGS = (("remove_self_loops", "--remove-self-loops"), ("symmetrize", "--symmetrize"),
                      ("dedup", "--dedup"), ("largest_component", "--largest-component"))


def _input_digest(input_path, meta, reader_args=None) -> EdgeDigest:
    """Local. The edge digest ``hpcgnn partition`` records for ``input_path``, computed anew: the
    input read with the reader flags of ``reader_args`` (a namespace with
    :func:`~hpcgnn.prep.read.add_reader_arguments`' attributes; meta.json's ``source.format``
    when it names none) and cleaned as meta.json's ``source`` records (self loops, symmetrize,
    dedup, largest component, and for link prediction the seeded held-out edge sets of ``link``),
    by the partition command's own :func:`~hpcgnn.prep.partition.load_prepared`."""
    from hpcgnn.prep.partition import build_parser, load_prepared  # deferred: the whole partitioning pipeline

    source, link = _entry(meta, "source"), meta.get("link")
    input_path = os.fspath(input_path)
    argv = [input_path, "--out", input_path, "--parts", "1", "--split", "dataset"]  # node splits leave edges be
    argv += [flag for key, flag in _EDGE_CLEANUP_FLAGS if source.get(key) is True]
    if link:
        argv += ["--edge-split", str(source.get("edge_split")), "--split-seed", str(source.get("split_seed", 0)),
                 "--eval-negatives", str(link["eval_negatives"]),
                 "--eval-negatives-kind", str(link.get("negatives_kind", "corrupt"))]
    args = build_parser().parse_args(argv)
    readers = argparse.ArgumentParser(add_help=False)
    add_reader_arguments(readers)
    reader_dests = set(vars(readers.parse_args([])))
    for dest in reader_dests & set(vars(reader_args or argparse.Namespace())):
        setattr(args, dest, getattr(reader_args, dest))
    if args.format is None and isinstance(source.get("format"), str):
        args.format = source["format"]
    with contextlib.redirect_stdout(io.StringIO()):  # partition's notes on the input are not this command's
        graph, _ = load_prepared(args)
    return graph_digest(graph.src, graph.dst, graph.ndata.get(ORIG_ID))


def check_against_input(directory, meta, input_path, problems, reader_args=None) -> None:
    """Local. Whether the dataset's edges are ``input_path``'s, read and cleaned again
    (:func:`_input_digest`), appending a difference to ``problems`` as one line. Compared with
    meta.json's ``edge_digest``, or, in a dataset written before it, with the part files' own
    edges (:func:`_stored_digest`); the part files must have passed :func:`verify`."""
    entry = meta.get("edge_digest")
    have = EdgeDigest.from_meta(entry) if entry is not None else _stored_digest(directory, meta)
    want = _input_digest(input_path, meta, reader_args)
    if want != have:
        problems.append(str(InputError(
            input_path, f"its edges, read and cleaned as meta.json's source says, are {want.count} edges summing to "
            f"{want.to_meta()['sum']}, not the dataset's: pass the reader flags (--format, --delimiter, --id-base, "
            "--relabel, ...) the partition was given, or partition this input again", "edges",
            f"{have.count} edges summing to {have.to_meta()['sum']}")))


def _parts_agree_with_meta(directory, meta) -> bool:
    """Whether every part file opens and agrees with ``meta.json`` (:meth:`ondisk.PartFile.problems`),
    so that its counts are backed by the files' datasets (each part's own pass reports what differs)."""
    for part_id in range(meta["num_parts"]):
        try:
            with ondisk.PartFile(directory, meta, part_id) as part:
                if part.problems():
                    return False
        except InputError:
            return False
    return True


def _held_out_keys(directory, meta, problems):
    """Sorted keys ``src * num_nodes + dst`` of every evaluation edge of the dataset (and of its
    reverse when the sets are symmetric), after checking each part's link ids; None without edge
    sets. A part whose link datasets cannot be read is a problem here and again in its own pass."""
    if not ondisk.link_datasets(meta):
        return None
    n, keys = meta["num_nodes"], []
    for part_id, info in enumerate(meta["parts"]):
        try:
            with ondisk.PartFile(directory, meta, part_id) as part:
                if part.problems():
                    continue
                start, end = part.node_range
                for split in ondisk.LINK_SPLITS:
                    arrays = [part.read(f"{ondisk.LINK_PREFIX}{split}_{a}") for a in ondisk.link_arrays(meta)]
                    src, dst = arrays[:2]
                    label = f"{info['file']}: {ondisk.LINK_PREFIX}{split}"
                    if any(ids.size and (ids.min() < 0 or ids.max() >= n) for ids in arrays):
                        problems.append(f"{label} has ids outside [0, {n})")
                        continue
                    if dst.size and (dst.min() < start or dst.max() >= end):
                        problems.append(f"{label}_dst has destinations outside the part's nodes [{start}, {end})")
                    keys.append(src * n + dst)
                    if meta["link"]["symmetric"]:
                        keys.append(dst * n + src)
        except InputError:
            continue  # reported by the part's own pass
    return np.unique(np.concatenate(keys)) if keys else np.empty(0, dtype=np.int64)


def _check_no_held_out_edge(name, part, indptr, indices, n, held_out, problems):
    if held_out is None or held_out.shape[0] == 0 or indices.shape[0] == 0:
        return
    start = part.node_range[0]
    dst = start + np.repeat(np.arange(part.num_nodes, dtype=np.int64), np.diff(indptr))
    keys = indices.astype(np.int64) * n + dst
    slot = np.minimum(np.searchsorted(held_out, keys), held_out.shape[0] - 1)
    found = int((held_out[slot] == keys).sum())
    if found:
        problems.append(f"{name}: {found} edge(s) of the CSC are held-out evaluation edges")


class _TypedCheck:
    """The typed invariants of ``inspect --verify``, part by part (:func:`verify`)."""

    def __init__(self, meta):
        self.meta = meta
        self.schema = ondisk.dataset_schema(meta)
        self.layout = TypeLayout(self.schema, meta["schema"]["type_counts"])
        self.src_types, self.dst_types = self.schema.relation_types()
        self.edges_seen = np.zeros(self.schema.num_relations, dtype=np.int64)

    def check_part(self, name, part, indptr, indices, etype, problems) -> None:
        """Append to ``problems`` each typed invariant part ``part`` breaks (its relation indices
        already known to be in range)."""
        etype = etype.astype(np.int64)
        self.edges_seen += np.bincount(etype, minlength=self.schema.num_relations)
        relations = self.schema.relations
        degree = np.diff(indptr)
        dst = part.node_range[0] + np.repeat(np.arange(part.num_nodes, dtype=np.int64), degree)
        for end, ids, want in (("source", indices, self.src_types), ("destination", dst, self.dst_types)):
            wrong = np.flatnonzero(self.layout.types_of(ids) != want[etype])
            if wrong.size:
                k = int(wrong[0])
                got = self.schema.node_types[int(self.layout.types_of(ids[k:k + 1])[0])]
                src_type, rel, dst_type = relations[etype[k]]
                problems.append(f"{name}: {wrong.size} edge(s) whose {end} is not of their relation's type, e.g. "
                                f"stored edge {k} of relation {rel} ({src_type} -> {dst_type}) has a {end} of "
                                f"type {got} (node {int(ids[k])})")
        falls = np.flatnonzero(etype[1:] < etype[:-1]) + 1  # positions where the relation index drops
        falls = falls[indptr[np.searchsorted(indptr, falls, side="right") - 1] != falls]  # not at a row start
        if falls.size:
            node = part.node_range[0] + int(np.searchsorted(indptr, falls[0], side="right")) - 1
            problems.append(f"{name}: in-edges not grouped by relation in ascending order at {falls.size} place(s), "
                            f"e.g. node {node}")

    def check_relation_counts(self, problems) -> None:
        want = self.meta["schema"]["relation_counts"]
        if self.edges_seen.tolist() != want:
            problems.append(f"the parts hold {self.edges_seen.tolist()} edges per relation, meta.json's "
                            f"schema.relation_counts says {want}")


def _verify_part(directory, meta, part_id, info, seen_nodes, seen_edges, beyond, problems, held_out=None,
                 typed=None) -> bool:
    """Append the problems of one part to ``problems``; True if its ids were checked too (the
    file matched meta.json), InputError when it cannot be opened or read to the end."""
    name = info["file"]
    path = ondisk.part_path(directory, meta, part_id)
    digest, want = ondisk.sha256_file(path), info.get("sha256")
    if digest != want:
        problems.append(f"{name}: sha256 {digest[:12]}... differs from meta.json {str(want)[:12]}...")
    if info.get("size") is not None and os.path.getsize(path) != info["size"]:
        problems.append(f"{name}: {os.path.getsize(path)} bytes, meta.json says {info['size']}")
    with ondisk.PartFile(directory, meta, part_id) as part:
        found = part.problems()
        if found:
            problems.extend(str(exc) for exc in found)
            return False
        _read_back(part)
        n_edges = part.num_edges
        indptr, indices = part.read("indptr"), part.read("indices")
        values = {"indptr": indptr, "indices": indices}
        values.update({key: part.read(key) for key in ("label", *MASKS) if key in meta["node_fields"]})
        etype_name = ondisk.EDGE_PREFIX + ETYPE
        if typed is not None:
            values[etype_name] = part.read(etype_name)
        bad_values = part.value_problems(values)
        problems.extend(str(exc) for exc in bad_values)
        if not any(exc.field in ("indptr", "indices") for exc in bad_values):
            _check_no_held_out_edge(name, part, indptr, indices, meta["num_nodes"], held_out, problems)
            relations = values.get(etype_name)
            # relations out of order are reported above and still let the end types be checked; out of range not
            if typed is not None and (not relations.size or (relations.min() >= 0
                                                             and relations.max() < typed.schema.num_relations)):
                typed.check_part(name, part, indptr, indices, values[etype_name], problems)
        orig_id = part.read("orig_id")
        inside = orig_id < meta["num_nodes"]
        beyond.append(orig_id[~inside])
        _mark_permutation(orig_id[inside], int(inside.sum()), seen_nodes, f"{name}: orig_id", problems)
        _mark_permutation(part.read("eid"), n_edges, seen_edges, f"{name}: eid", problems)
    return True


def _read_back(part, block_bytes=1 << 26):
    """Read every node and edge field of ``part`` (the structure arrays are read whole anyway) in
    blocks of rows, so HDF5 verifies every chunk's checksum in bounded memory; InputError names
    the first dataset that fails."""
    for key, (shape, dtype) in part.expected().items():
        if key in ondisk.STRUCTURE or 0 in shape:
            continue
        row_bytes = dtype.itemsize * int(np.prod(shape[1:], dtype=np.int64))
        step = max(1, block_bytes // max(row_bytes, 1))
        for start in range(0, shape[0], step):
            part.read(key, rows=slice(start, start + step))


def _mark_permutation(ids, expected, seen, label, problems):
    if ids.shape != (expected,):
        problems.append(f"{label} has {ids.shape[0]} entries, expected {expected}")
        return
    if expected == 0 or seen is None:  # None: another part disagrees with meta.json, so no count is known
        return
    if ids.min() < 0 or ids.max() >= seen.shape[0]:
        problems.append(f"{label} has ids outside [0, {seen.shape[0]})")
        return
    if seen[ids].any() or np.unique(ids).shape[0] != ids.shape[0]:
        problems.append(f"{label} repeats ids")
    seen[ids] = True


def describe(meta: dict) -> str:
    """Local. A human-readable table of a dataset's parts and partition quality.

    The descriptive entries (partitioner, per-part statistics) are not validated by
    :func:`ondisk.read_meta`; one that is missing or odd prints as ``?``.
    """
    p = _entry(meta, "partitioner")
    cut = _fmt(p.get("edge_cut_fraction"), ".2%")
    lines = [f"{meta.get('graph_name', '?')}: {meta['num_nodes']:,} nodes, {meta['num_edges']:,} edges, "
             f"{meta['num_parts']} parts ({p.get('method', '?')}), edge cut {cut}",
             "fields: " + ", ".join(f"{k} {v.get('encoding') or v['dtype']}{v['shape']}"  # bfloat16, not uint16
                                    for k, v in meta["node_fields"].items())
             + "".join(f", edge_{k} {v['dtype']}{v['shape']}" for k, v in meta.get("edge_fields", {}).items()),
             f"{'part':>5} {'nodes':>12} {'edges':>13} {'halo':>11} {'cut in-edges':>13} "
             f"{'train':>10} {'val':>9} {'test':>9} {'MiB':>9}"]
    for i, part in enumerate(meta["parts"]):
        size = part.get("size")
        mib = _fmt(size / 2**20 if isinstance(size, (int, float)) else None, ">9.1f")
        lines.append(f"{i:>5} {_fmt(part.get('num_nodes'), '>12,')} {_fmt(part.get('num_edges'), '>13,')} "
                     f"{_fmt(part.get('halo_nodes'), '>11,')} {_fmt(part.get('cut_edges'), '>13,')} "
                     f"{_fmt(part.get('train', 0), '>10,')} {_fmt(part.get('val', 0), '>9,')} "
                     f"{_fmt(part.get('test', 0), '>9,')} {mib:>9}")
    imb = ", ".join(f"{k} {v}" for k, v in _entry(p, "imbalance").items() if v is not None)
    lines.append(f"imbalance (max/mean): {imb}")
    if meta.get("schema") is not None:
        lines.extend(_describe_schema(meta["schema"]))
    link = meta.get("link")
    if link:
        split = link["split"] if isinstance(link["split"], str) else ",".join(f"{f:g}" for f in link["split"])
        per_part = " ".join(f"{part.get('link_val', '?')}/{part.get('link_test', '?')}" for part in meta["parts"][:16])
        per_part += " ..." if len(meta["parts"]) > 16 else ""
        lines.append(f"edge sets ({'undirected' if link['symmetric'] else 'directed'} edges, split {split}, "
                     f"seed {link['seed']}): {link['num_train']:,} train, {link['num_val']:,} val, "
                     f"{link['num_test']:,} test; {link['eval_negatives']} "
                     f"{link.get('negatives_kind', 'corrupt')} negatives "
                     f"({'drawn' if link['negatives'] == 'uniform' else 'from the dataset'}) per "
                     f"val/test edge; val/test per part: {per_part}")
    return "\n".join(lines)


def _describe_schema(entry) -> list[str]:
    """The lines of a typed dataset's schema: node types with their counts and fields, the
    labelled type, relations with their edge counts (``meta.json`` already validated)."""
    counts = np.asarray(entry["type_counts"], dtype=np.int64).sum(axis=0)
    types = []
    for node_type, count in zip(entry["node_types"], counts):
        fields = entry.get("typed_fields", {}).get(node_type, {})
        shown = ", ".join(f"{f} {v.get('encoding') or v['dtype']}{v['shape']}" for f, v in fields.items())
        types.append(f"{node_type} {int(count):,}" + (f" ({shown})" if shown else " (no features)"))
    lines = [f"node types ({len(types)}): " + "; ".join(types)
             + (f"; labelled type: {entry['target']}" if entry.get("target") else "")]
    relations = [f"{rel} ({src} -> {dst}) {count:,}"
                 for (src, rel, dst), count in zip(entry["edge_types"], entry["relation_counts"])]
    shown = relations if len(relations) <= _RELATIONS_SHOWN else relations[:_RELATIONS_SHOWN] + [
        f"... {len(relations) - _RELATIONS_SHOWN} more in meta.json's schema"]
    lines.append(f"relations ({len(relations)}): " + "; ".join(shown))
    return lines


#: relations a description lists (a knowledge graph has hundreds)
_RELATIONS_SHOWN = 16


def _entry(mapping, key) -> dict:
    value = mapping.get(key)
    return value if isinstance(value, dict) else {}


def _fmt(value, spec) -> str:
    try:
        return format(value, spec)
    except (TypeError, ValueError):
        return "?"
