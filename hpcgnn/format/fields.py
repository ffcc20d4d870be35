"""The node fields every graph and every partitioned dataset share: the split masks' names, the
node field of input ids, the label of a node without one, and the kind each named field must be.

Readers and the partitioner (:mod:`hpcgnn.prep`) write fields by these rules, and the part-file
reader (:mod:`hpcgnn.format.ondisk`) and the runtime read them by the same ones.
"""
from __future__ import annotations

import numpy as np

from hpcgnn.runtime.errors import InputError

#: the boolean split masks, in split order
MASKS = ("train_mask", "val_mask", "test_mask")
#: Node field holding each node's id in the input file, once a step numbered the nodes anew
#: (an edge list's ``--relabel`` or ``--id-base 1``, ``--largest-component``); without it a
#: node's id is its id in the file. The partitioner writes it as the part files' ``orig_id``.
ORIG_ID = "orig_id"
#: Label of a node without one; the readers map missing labels (NaN, an empty one-hot row) to
#: it, random splits skip it, and it may not appear on a node inside a split mask (the loss
#: and the accuracy read the labels of exactly those nodes).
UNLABELLED = -1


def check_node_field(where, name, arr):
    """Local. Refuse a node field of the wrong kind: masks boolean 1-D, labels integer 1-D or 2-D,
    ``feat`` 2-D, floating values finite (InputError naming the field)."""
    ndim = len(getattr(arr, "shape", ()))
    if name in MASKS:
        if getattr(arr, "dtype", None) != np.bool_:
            raise InputError(where, "masks must be boolean", name, getattr(arr, "dtype", type(arr)))
        if ndim != 1:
            raise InputError(where, "masks must be 1-D [num_nodes]", name, list(arr.shape))
    elif name == "label":
        if not np.issubdtype(arr.dtype, np.integer):
            raise InputError(where, "labels must be integers", name, arr.dtype)
        if ndim not in (1, 2):
            raise InputError(where, "labels must be 1-D [num_nodes] (or 2-D multi-label)", name, list(arr.shape))
        if ndim == 2 and arr.shape[1] == 0:
            raise InputError(where, "a multi-label label [num_nodes, C] needs at least one column", name,
                             list(arr.shape))
    elif name == "feat" and ndim != 2:
        raise InputError(where, "features must be 2-D [num_nodes, width]", name, list(arr.shape))
    check_finite(where, name, arr)


def check_finite(where, name, arr):
    """Local. Refuse a field whose floating values include NaN or inf, or whose dtype is neither
    floating, integer nor boolean (a dense array or a ``scipy.sparse`` matrix)."""
    values = arr.data if hasattr(arr, "tocsr") else arr
    if np.issubdtype(values.dtype, np.floating):
        bad = ~np.isfinite(values)
        if bad.any():
            first = values.reshape(-1)[np.flatnonzero(bad.reshape(-1))[0]]
            raise InputError(where, "contains NaN or inf", name, float(first))
    elif not (np.issubdtype(values.dtype, np.integer) or values.dtype == np.bool_):
        raise InputError(where, "unsupported dtype", name, values.dtype)
