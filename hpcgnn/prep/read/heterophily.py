"""``.npz`` graphs with an edge array and predefined splits (the heterophily benchmark layout:
roman-empire, amazon-ratings, minesweeper, tolokers, questions, ...).

Keys: ``edges`` [E, 2] (or [2, E]) integer node ids, ``node_features`` [N, F], ``node_labels``
[N], and split masks ``train_masks`` / ``val_masks`` / ``test_masks`` of shape [k, N] (k
predefined splits; [N, k] is accepted too) or the singular ``train_mask`` / ``val_mask`` /
``test_mask`` [N]. A kind with a single mask serves every split (some files have one test mask
beside k training masks). With k > 1 the split is chosen by ``split_index``
(``--split-index I``); none is picked silently, since results differ from split to split.
Arrays are loaded without pickle support.
"""
from __future__ import annotations

import os
import zipfile

import numpy as np

from hpcgnn.format.fields import MASKS
from hpcgnn.prep.graph import Graph, as_index_array
from hpcgnn.runtime.errors import InputError

_EDGE_KEY = "edges"
_FEATURE_KEY = "node_features"
_LABEL_KEY = "node_labels"
# (plural key, singular key, graph field)
_MASK_KEYS = tuple((kind + "_masks", kind + "_mask", field) for kind, field in zip(("train", "val", "test"), MASKS))


def _load(path):
    if not os.path.isfile(path):
        raise InputError(path, "file not found")
    if not zipfile.is_zipfile(path):
        raise InputError(path, "not a .npz (zip) archive: empty, truncated or another kind of file",
                         "format", "heterophily")
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {key: archive[key] for key in archive.files}
    except ValueError as exc:
        raise InputError(path, f"holds pickled objects, which this format does not allow ({exc})") from None


def _edges(path, arrays):
    if _EDGE_KEY not in arrays:
        raise InputError(path, "missing required array", _EDGE_KEY, f"found {sorted(arrays)}")
    edges = as_index_array(path, _EDGE_KEY, arrays.pop(_EDGE_KEY))
    if edges.ndim == 2 and edges.shape[0] == 2 and edges.shape[1] != 2:
        edges = edges.T
    if edges.ndim != 2 or edges.shape[1] != 2:
        raise InputError(path, "must be [E, 2] (source, destination per row)", _EDGE_KEY, list(edges.shape))
    return np.ascontiguousarray(edges[:, 0]), np.ascontiguousarray(edges[:, 1])


def _labels(path, labels):
    if labels.ndim != 1 or labels.dtype.kind not in "iuf":
        raise InputError(path, "must be a 1-D numeric array", _LABEL_KEY, f"{labels.dtype}{list(labels.shape)}")
    if labels.dtype.kind == "f":
        labels = np.where(np.isnan(labels), -1, labels)  # NaN: an unlabelled node
        whole = np.isfinite(labels) & (labels == np.round(labels))
        if not whole.all():
            raise InputError(path, "labels must be whole numbers", _LABEL_KEY, float(labels[~whole][0]))
    return labels.astype(np.int64)


def _masks(path, arrays, num_nodes):
    """Each kind's masks as bool [k, N] (k = 1 for a single mask), keyed by graph field."""
    found = {}
    for plural, singular, field in _MASK_KEYS:
        key = plural if plural in arrays else singular if singular in arrays else None
        if key is None:
            continue
        masks = np.asarray(arrays.pop(key))
        if masks.ndim == 1:
            masks = masks[None, :]
        elif masks.ndim == 2 and masks.shape[1] != num_nodes and masks.shape[0] == num_nodes:
            masks = masks.T
        if masks.ndim != 2 or masks.shape[1] != num_nodes:
            raise InputError(path, f"expected [k, {num_nodes}] masks (one column per node)", key, list(masks.shape))
        if masks.dtype != np.bool_:
            if masks.dtype.kind not in "biuf" or not np.isin(masks, (0, 1)).all():
                raise InputError(path, "masks must be boolean or 0/1", key, str(masks.dtype))
            masks = masks.astype(bool)
        found[field] = (key, masks)
    return found


def _pick_split(path, masks, split_index):
    counts = {key: chosen.shape[0] for key, chosen in masks.values()}
    splits = max(counts.values(), default=0)
    uneven = [key for key, count in counts.items() if count not in (1, splits)]
    if uneven:
        raise InputError(path, f"split counts differ ({counts})", uneven[0], counts[uneven[0]])
    if split_index is None:
        if splits > 1:
            biggest = next(key for key, count in counts.items() if count == splits)
            raise InputError(path, f"holds {splits} predefined splits ({biggest} [{splits}, N]); choose one with "
                             f"--split-index I (0..{splits - 1})", "--split-index", None)
        split_index = 0
    if not splits:
        raise InputError(path, "the file has no split masks to choose from", "--split-index", split_index)
    valid = isinstance(split_index, (int, np.integer)) and not isinstance(split_index, bool)
    if not valid or not 0 <= split_index < splits:
        raise InputError(path, f"no such split (0..{splits - 1})", "--split-index", split_index)
    return {field: chosen[split_index if chosen.shape[0] > 1 else 0] for field, (_, chosen) in masks.items()}


def read_heterophily(path, split_index=None, name=None) -> Graph:
    """Local. Read an ``edges``/``node_features``/``node_labels`` ``.npz`` with predefined splits.

    Parameters
    ----------
    path : str or os.PathLike
        The ``.npz`` file (layout in the module docstring).
    split_index : int, optional
        Which predefined split becomes ``train_mask``/``val_mask``/``test_mask``; required when
        the file holds more than one.
    name : str, optional
        Graph name; default is the file name without ``.npz``.

    Returns
    -------
    Graph
        Validated graph: edges as listed (an undirected benchmark stores each edge once; add
        the reverse with ``--symmetrize``), ``feat`` (float32), ``label`` (int64) and the
        chosen masks. ``notes['split_index']`` records the choice. Other arrays are ignored.
    """
    path = os.fspath(path)
    arrays = _load(path)
    src, dst = _edges(path, arrays)
    ndata = {}
    if _FEATURE_KEY in arrays:
        feat = np.asarray(arrays.pop(_FEATURE_KEY))
        if feat.ndim != 2 or feat.dtype.kind not in "biuf":
            raise InputError(path, "must be a 2-D numeric array", _FEATURE_KEY, f"{feat.dtype}{list(feat.shape)}")
        ndata["feat"] = feat.astype(np.float32, copy=False)
    if _LABEL_KEY in arrays:
        ndata["label"] = _labels(path, np.asarray(arrays.pop(_LABEL_KEY)))
    rows = [values.shape[0] for values in ndata.values()]
    num_nodes = rows[0] if rows else int(max(src.max(initial=-1), dst.max(initial=-1)) + 1)
    masks = _masks(path, arrays, num_nodes)
    notes = {}
    if masks or split_index is not None:
        ndata.update(_pick_split(path, masks, split_index))
        notes["split_index"] = 0 if split_index is None else int(split_index)
    graph = Graph(int(num_nodes), src, dst, ndata, {}, name=name or os.path.splitext(os.path.basename(path))[0],
                  source=path, notes=notes)
    return graph.validate()
