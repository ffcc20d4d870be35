"""The files of a partitioned dataset, as both writers (serial and spread over the ranks) make them:
one part's statistics and HDF5 file, and meta.json's content (format: :mod:`hpcgnn.format.ondisk`)."""
from __future__ import annotations

import os

import numpy as np

from hpcgnn.format import ondisk
from hpcgnn.format.fields import MASKS


def part_stats(arrays: dict, node_start: int, node_end: int) -> dict:
    """Local. Counts of one part: nodes, edges, cut in-edges, halo nodes, split sizes."""
    src = arrays["indices"]
    remote = src[(src < node_start) | (src >= node_end)]
    stats = {"num_nodes": int(node_end - node_start), "num_edges": int(src.shape[0]),
             "cut_edges": int(remote.shape[0]), "halo_nodes": int(np.unique(remote).shape[0])}
    for mask in MASKS:
        if mask in arrays:
            stats[mask.replace("_mask", "")] = int(arrays[mask].sum())
    for split in ondisk.LINK_SPLITS:
        name = f"{ondisk.LINK_PREFIX}{split}"
        if name + "_src" in arrays:
            stats[name] = int(arrays[name + "_src"].shape[0])
    return stats


def imbalance(parts_info: list, key: str):
    """Local. max/mean of a per-part count (1.0 is perfect balance), None if absent."""
    values = np.array([p.get(key, 0) for p in parts_info], dtype=np.float64)
    if key not in parts_info[0] or values.mean() == 0:
        return None
    return round(float(values.max() / values.mean()), 4)


def _spec(name, arr, encodings) -> dict:
    spec = {"dtype": str(arr.dtype), "shape": list(arr.shape[1:])}
    if (encodings or {}).get(name):
        spec["encoding"] = encodings[name]
    return spec


def field_specs(arrays: dict, encodings=None) -> tuple[dict, dict]:
    """Local. meta.json's ``node_fields`` and ``edge_fields`` from one part's arrays (a typed
    dataset's per-type fields, ``feat@paper``, are :func:`typed_field_specs`')."""
    node, edge = {}, {}
    for name, arr in arrays.items():
        if name in ondisk.STRUCTURE or name.startswith(ondisk.LINK_PREFIX) or ondisk.TYPED_SEPARATOR in name:
            continue
        spec = _spec(name, arr, encodings)
        if name.startswith(ondisk.EDGE_PREFIX):
            edge[name[len(ondisk.EDGE_PREFIX):]] = spec
        else:
            node[name] = spec
    return node, edge


def typed_field_specs(arrays: dict, schema, encodings=None) -> dict:
    """Local. meta.json's ``schema.typed_fields`` (``{type: {field: spec}}``) from one part's arrays,
    which hold every per-type field (``field@type``), even with no row of its type in the part."""
    specs = {}
    for node_type in schema.node_types:
        for name, arr in arrays.items():
            field, _, owner = name.partition(ondisk.TYPED_SEPARATOR)
            if owner == node_type:
                specs.setdefault(node_type, {})[field] = _spec(name, arr, encodings)
    return specs


def schema_meta(relation_counts, layout, typed_specs) -> dict:
    """Local. meta.json's ``schema`` entry of a typed dataset: the schema
    (:meth:`~hpcgnn.format.schema.Schema.as_meta`), every part's node count per type
    (``type_counts`` [P][T], from the :class:`~hpcgnn.format.schema.TypeLayout`), the edge count
    of every relation (``relation_counts`` [R]) and the per-type node fields (``typed_fields``)."""
    entry = layout.schema.as_meta()
    entry["type_counts"] = [[int(x) for x in row] for row in layout.type_counts]
    entry["relation_counts"] = [int(x) for x in relation_counts]
    entry["typed_fields"] = typed_specs or {}
    return entry


def type_imbalance(layout) -> dict:
    """Local. ``{"nodes@<type>": max/mean}`` of every node type's per-part count (None for a type
    without nodes)."""
    counts = layout.type_counts.astype(np.float64)
    means = counts.mean(axis=0)
    return {f"nodes@{node_type}": (round(float(counts[:, t].max() / means[t]), 4) if means[t] else None)
            for t, node_type in enumerate(layout.schema.node_types)}


def write_part_file(directory, arrays, part_id, num_parts, node_starts, edge_start, checksums=True,
                    version=ondisk.FORMAT_VERSION):
    """Local. Write part ``part_id``'s file into ``directory`` (``version``: the dataset's format
    version, :data:`~hpcgnn.format.ondisk.TYPED_VERSION` for a typed one); returns its meta.json
    entry (file name, size, sha256)."""
    path = os.path.join(directory, ondisk.part_file_name(part_id))
    attrs = {"format": ondisk.FORMAT_NAME, "version": version, "part_id": part_id,
             "num_parts": num_parts, "node_start": int(node_starts[part_id]),
             "node_end": int(node_starts[part_id + 1]), "edge_start": int(edge_start)}
    ondisk.write_part(path, arrays, attrs, checksums)
    return {"file": ondisk.part_file_name(part_id), "size": os.path.getsize(path),
            "sha256": ondisk.sha256_file(path)}


def dataset_meta(name, num_nodes, node_starts, edge_starts, stats, files, specs, partitioner, source,
                 edge_digest=None) -> dict:
    """Local. meta.json of a partitioned dataset: ``stats`` (:func:`part_stats` of every part)
    and ``files`` (part id -> :func:`write_part_file`'s entry) become ``parts``; ``partitioner``
    gets the edge cut and the imbalance of each count; ``edge_digest`` (an
    :class:`~hpcgnn.prep.edge_digest.EdgeDigest` of the edges the parts must hold, in orig ids)
    becomes ``edge_digest``, which ``inspect --verify`` checks the stored edges against."""
    for part_id, part in enumerate(stats):
        part.update(files[part_id])
    cut = sum(p["cut_edges"] for p in stats)
    node_fields, edge_fields = specs
    meta = {
        "format": ondisk.FORMAT_NAME, "version": ondisk.FORMAT_VERSION, "graph_name": name,
        "num_nodes": int(num_nodes), "num_edges": int(edge_starts[-1]), "num_parts": len(stats),
        "node_starts": [int(x) for x in node_starts], "edge_starts": [int(x) for x in edge_starts],
        "index_dtype": str(np.dtype(ondisk.id_dtype(num_nodes))),
        "node_fields": node_fields, "edge_fields": edge_fields,
        "partitioner": dict(partitioner, num_parts=len(stats), edge_cut=cut,
                            edge_cut_fraction=round(cut / max(int(edge_starts[-1]), 1), 6),
                            imbalance={k: imbalance(stats, k) for k in
                                       ("num_nodes", "num_edges", "train", "val", "test")}),
        "source": source or {},
        "parts": stats,
    }
    if edge_digest is not None:
        meta["edge_digest"] = edge_digest.to_meta()
    return meta
