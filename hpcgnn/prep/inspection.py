"""``hpcgnn inspect DIR [--verify] [--json]``: what a partitioned dataset holds, and whether
it is intact.

Without ``--verify`` only ``meta.json`` is read. ``--verify`` re-reads every part file and
checks checksums and the format's invariants; any mismatch is reported and the exit status is
non-zero.
"""
from __future__ import annotations

import argparse
import json

import h5py
import numpy as np

from hpcgnn.prep import ondisk
from hpcgnn.runtime.abort import entry_point


def verify(directory, meta: dict) -> list[str]:
    """Local. Check every part file against ``meta.json``; return the problems found.

    Checked: file size and SHA-256; the file's attributes; ``indptr`` starts at 0, never
    decreases and ends at the part's edge count; ``indices`` within ``[0, num_nodes)``; node
    and edge field shapes and dtypes; ``orig_id`` is a permutation of ``[0, num_nodes)`` and
    ``eid`` of ``[0, num_edges)`` across all parts.
    """
    problems = []
    seen_nodes = np.zeros(meta["num_nodes"], dtype=bool)
    seen_edges = np.zeros(meta["num_edges"], dtype=bool)
    node_starts, edge_starts = meta["node_starts"], meta["edge_starts"]
    for part_id, info in enumerate(meta["parts"]):
        path = ondisk.part_path(directory, meta, part_id)
        name = info["file"]
        digest = ondisk.sha256_file(path)
        if digest != info["sha256"]:
            problems.append(f"{name}: sha256 {digest[:12]}... differs from meta.json {info['sha256'][:12]}...")
        n_nodes = node_starts[part_id + 1] - node_starts[part_id]
        n_edges = edge_starts[part_id + 1] - edge_starts[part_id]
        with h5py.File(path, "r") as h5:
            for key, want in (("part_id", part_id), ("node_start", node_starts[part_id]),
                              ("node_end", node_starts[part_id + 1]), ("edge_start", edge_starts[part_id])):
                if int(h5.attrs.get(key, -1)) != want:
                    problems.append(f"{name}: attribute {key}={h5.attrs.get(key)} expected {want}")
            missing = [k for k in ondisk.STRUCTURE if k not in h5]
            if missing:
                problems.append(f"{name}: missing datasets {missing}")
                continue
            indptr = h5["indptr"][()]
            if indptr.shape != (n_nodes + 1,) or indptr[0] != 0 or indptr[-1] != n_edges \
                    or (np.diff(indptr) < 0).any():
                problems.append(f"{name}: indptr is not a CSC offset array for {n_nodes} nodes / {n_edges} edges")
            indices = h5["indices"][()]
            if indices.shape != (n_edges,) or (n_edges and (indices.min() < 0 or indices.max() >= meta["num_nodes"])):
                problems.append(f"{name}: indices has wrong length or ids outside [0, {meta['num_nodes']})")
            _mark_permutation(h5["orig_id"][()], n_nodes, seen_nodes, f"{name}: orig_id", problems)
            _mark_permutation(h5["eid"][()], n_edges, seen_edges, f"{name}: eid", problems)
            for fields, prefix, rows in ((meta.get("node_fields", {}), "", n_nodes),
                                         (meta.get("edge_fields", {}), ondisk.EDGE_PREFIX, n_edges)):
                for field, spec in fields.items():
                    key = prefix + field
                    if key not in h5:
                        problems.append(f"{name}: field {key} missing")
                    elif h5[key].shape != (rows, *spec["shape"]) or str(h5[key].dtype) != spec["dtype"]:
                        problems.append(f"{name}: field {key} is {h5[key].dtype}{list(h5[key].shape)}, "
                                        f"meta.json says {spec['dtype']}{[rows, *spec['shape']]}")
    if not seen_nodes.all():
        problems.append(f"orig_id misses {int((~seen_nodes).sum())} of {meta['num_nodes']} nodes")
    if not seen_edges.all():
        problems.append(f"eid misses {int((~seen_edges).sum())} of {meta['num_edges']} edges")
    return problems


def _mark_permutation(ids, expected, seen, label, problems):
    if ids.shape != (expected,):
        problems.append(f"{label} has {ids.shape[0]} entries, expected {expected}")
        return
    if expected == 0:
        return
    if ids.min() < 0 or ids.max() >= seen.shape[0]:
        problems.append(f"{label} has ids outside [0, {seen.shape[0]})")
        return
    if seen[ids].any() or np.unique(ids).shape[0] != ids.shape[0]:
        problems.append(f"{label} repeats ids")
    seen[ids] = True


def describe(meta: dict) -> str:
    """Local. A human-readable table of a dataset's parts and partition quality."""
    p = meta["partitioner"]
    lines = [f"{meta['graph_name']}: {meta['num_nodes']:,} nodes, {meta['num_edges']:,} edges, "
             f"{meta['num_parts']} parts ({p['method']}), edge cut {100 * p['edge_cut_fraction']:.2f}%",
             "fields: " + ", ".join(f"{k} {v['dtype']}{v['shape']}" for k, v in meta["node_fields"].items())
             + "".join(f", edge_{k} {v['dtype']}{v['shape']}" for k, v in meta["edge_fields"].items()),
             f"{'part':>5} {'nodes':>12} {'edges':>13} {'halo':>11} {'cut in-edges':>13} "
             f"{'train':>10} {'val':>9} {'test':>9} {'MiB':>9}"]
    for i, part in enumerate(meta["parts"]):
        lines.append(f"{i:>5} {part['num_nodes']:>12,} {part['num_edges']:>13,} {part['halo_nodes']:>11,} "
                     f"{part['cut_edges']:>13,} {part.get('train', 0):>10,} {part.get('val', 0):>9,} "
                     f"{part.get('test', 0):>9,} {part['size'] / 2**20:>9.1f}")
    imb = ", ".join(f"{k} {v}" for k, v in p["imbalance"].items() if v is not None)
    lines.append(f"imbalance (max/mean): {imb}")
    return "\n".join(lines)


@entry_point("hpcgnn inspect")
def main(argv=None):
    """Local. Command line of ``hpcgnn inspect``."""
    parser = argparse.ArgumentParser(prog="hpcgnn inspect",
                                     description="Summarise a partitioned dataset; --verify checks it.")
    parser.add_argument("directory", help="dataset directory written by 'hpcgnn partition'")
    parser.add_argument("--verify", action="store_true",
                        help="re-read every part: checksums, CSC invariants, id permutations")
    parser.add_argument("--json", action="store_true", help="print meta.json (+ verification) as JSON")
    args = parser.parse_args(argv)
    meta = ondisk.read_meta(args.directory)
    problems = verify(args.directory, meta) if args.verify else None
    if args.json:
        out = dict(meta)
        if problems is not None:
            out["verify"] = {"ok": not problems, "problems": problems}
        print(json.dumps(out, indent=1))
    else:
        print(describe(meta))
        if problems is not None:
            print("verify: OK" if not problems else "verify: FAILED\n  " + "\n  ".join(problems))
    return 1 if problems else 0
