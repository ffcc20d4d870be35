"""What the typed readers share: relation names made from foreign names, the validation part
held out of a training set, and split masks from id lists.

Every typed reader (:mod:`~hpcgnn.prep.read.typed_npz`, :mod:`~hpcgnn.prep.read.typed_mat`,
:mod:`~hpcgnn.prep.read.ogb_hetero`, :mod:`~hpcgnn.prep.read.magnn`,
:mod:`~hpcgnn.prep.read.rdf`) returns a typed graph (:func:`~hpcgnn.prep.typed.typed_graph`:
input ids numbered type by type, edges relation by relation, labels and masks on one node
type, the labelled type), its module docstring saying how the layout names the node types and
relations and where the labels and split come from. The arguments they have in common mean the
same in each:

- ``add_reverse`` (``--add-reverse``): add relation ``rev_<r>`` (destination -> source) for
  every relation ``r``, for layouts that store each relation in one direction only.
- ``target_type`` (``--target-type``): the labelled type, when the files leave more than one
  type that could be it; a name that is no node type is refused naming the types there are.
- ``name``: the graph's name; default the file's name without its extension, or the dataset
  directory's name.

The held-out validation part (:func:`hold_out_validation`) serves the layouts whose files give
a training set and a test set only (the R-GCN entity-classification files, HGB's
``label.dat``): a seeded, stratified fraction of the training ids (``--val-fraction``, seeded
by ``--split-seed``) becomes the validation set, so that model selection never looks at the
test set. Per class (ascending) the class's training ids are permuted by one generator and
``round(fraction * size)`` of them are held out; the same seed always gives the same split.
"""
from __future__ import annotations

import re

import numpy as np

from hpcgnn.format.schema import NAME_PATTERN, REVERSE_PREFIX
from hpcgnn.runtime.errors import InputError

#: the validation fraction a reader holds out of a training set without a validation set
DEFAULT_VAL_FRACTION = 0.2
#: relation and type names are cut to this length, leaving room for :data:`REVERSE_PREFIX`
_NAME_ROOM = 64 - len(REVERSE_PREFIX) - 4
_NOT_NAME = re.compile(r"[^A-Za-z0-9_\-]+")


def sanitized_name(text, taken, fallback="rel") -> str:
    """Local. ``text`` made a schema name (``NAME_PATTERN``) that is not in ``taken``, nor is its
    reverse ``rev_<name>``; both are added to ``taken``.

    Characters outside ``[A-Za-z0-9_-]`` become ``_``, a leading digit or ``-`` gets a ``_``
    before it, long names are cut, and a name already taken gets ``_2``, ``_3``, ...
    """
    base = _NOT_NAME.sub("_", str(text)).strip("_") or fallback
    if not re.match(r"[A-Za-z_]", base):
        base = "_" + base
    base = base[:_NAME_ROOM]
    name, n = base, 1
    while name in taken or REVERSE_PREFIX + name in taken:
        n += 1
        name = f"{base}_{n}"
    assert NAME_PATTERN.fullmatch(name) and NAME_PATTERN.fullmatch(REVERSE_PREFIX + name)
    taken.update((name, REVERSE_PREFIX + name))
    return name


def check_fraction(where, value, flag="--val-fraction") -> float:
    """Local. A validation fraction in ``[0, 1)``."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        value = float("nan")
    if not 0.0 <= value < 1.0:
        raise InputError(where, "a validation fraction is in [0, 1)", flag, value)
    return value


def hold_out_validation(where, train_ids, labels, fraction, seed) -> tuple[np.ndarray, np.ndarray]:
    """Local. ``(train, val)``: a seeded stratified ``fraction`` of ``train_ids`` held out (module
    docstring); ``labels[i]`` is the class of ``train_ids[i]``. Both come out sorted."""
    fraction = check_fraction(where, fraction)
    train_ids = np.asarray(train_ids, dtype=np.int64)
    labels = np.asarray(labels)
    if fraction == 0.0 or train_ids.size == 0:
        return np.sort(train_ids), np.zeros(0, dtype=np.int64)
    rng = np.random.default_rng(seed)
    held = []
    for cls in np.unique(labels):
        members = rng.permutation(train_ids[labels == cls])
        held.append(members[:int(round(fraction * members.shape[0]))])
    val = np.sort(np.concatenate(held))
    train = np.setdiff1d(train_ids, val)
    if train.size == 0:
        raise InputError(where, "holding out the validation part leaves no training node; lower the fraction",
                         "--val-fraction", fraction)
    return train, val


def masks_from_ids(where, count, splits, flag=None) -> dict:
    """Local. ``{"train_mask": bool [count], ...}`` from ``{"train_mask": ids, ...}``; an id out of
    ``[0, count)`` or in two sets is refused naming the set (and ``flag`` when one chooses it)."""
    masks, owner = {}, np.full(count, -1, dtype=np.int8)
    for i, (mask_name, ids) in enumerate(splits.items()):
        ids = np.asarray(ids)
        if ids.size and not np.issubdtype(ids.dtype, np.integer):
            raise InputError(where, "split ids must be integers", mask_name, ids.dtype)
        ids = ids.astype(np.int64, copy=False).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= count):
            bad = int(ids.min()) if ids.min() < 0 else int(ids.max())
            raise InputError(where, f"split id beyond the labelled type's range [0, {count})"
                             + (f"; {flag}" if flag else ""), mask_name, bad)
        clash = ids[owner[ids] >= 0]
        if clash.size:
            raise InputError(where, f"node in two split sets ({list(splits)[owner[clash[0]]]} and {mask_name})",
                             mask_name, int(clash[0]))
        owner[ids] = i
        mask = np.zeros(count, dtype=bool)
        mask[ids] = True
        masks[mask_name] = mask
    return masks


def class_ids(values) -> tuple[np.ndarray, list]:
    """Local. Class ids ``0..C-1`` of label values (strings or numbers), numbered in ascending
    order of the values, and the values behind each id."""
    classes, inverse = np.unique(np.asarray(values), return_inverse=True)
    return inverse.reshape(-1).astype(np.int64), [str(c) for c in classes]
