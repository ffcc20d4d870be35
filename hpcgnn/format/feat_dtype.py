"""Compact feature storage (``hpcgnn partition --feat-dtype``): node features kept as 2-byte
values, so the part files, each rank's memory, the rows a batch gathers and the bytes RMA moves
all halve.

``float16`` is numpy's and HDF5's own type. ``bfloat16`` (float32's exponent range with 8
significant bits: any float32 feature fits, normalised or not) has no numpy or HDF5 type: it is
stored as ``uint16`` bit patterns, the top half of the float32 after rounding to nearest even,
and meta.json says so with ``"encoding": "bfloat16"`` beside the field's ``"dtype": "uint16"``.
Readers turn rows back into float32 (:func:`hpcgnn.store.float_rows`); a bfloat16 value is
exactly a float32 whose low 16 bits are zero, so decoding loses nothing more.
"""
from __future__ import annotations

import numpy as np

from hpcgnn.runtime.errors import InputError

FEAT_DTYPES = ("float32", "bfloat16", "float16")
#: encodings a field's meta.json spec may name, with the numpy dtype that holds the bits
ENCODINGS = {"bfloat16": np.dtype(np.uint16)}


def bfloat16_bits(values) -> np.ndarray:
    """Local. The bfloat16 bit patterns (uint16) of ``values``, rounded to nearest even."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = bits + (np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))
    return (rounded >> np.uint32(16)).astype(np.uint16)


def bfloat16_values(bits) -> np.ndarray:
    """Local. The float32 values of bfloat16 bit patterns."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def encode(values, feat_dtype, where=None) -> np.ndarray:
    """Local. ``values`` (floats) as stored under ``feat_dtype`` (one of :data:`FEAT_DTYPES`).
    float16 holds magnitudes up to 65504: a larger value is a one-line InputError (``where``: the
    input's name), not an infinity in training."""
    if feat_dtype == "bfloat16":
        return bfloat16_bits(values)
    if feat_dtype == "float16":
        limit = float(np.finfo(np.float16).max)
        big = np.abs(values) > limit
        if big.any():
            value = float(np.asarray(values)[big][0])
            raise InputError(where, f"feat has a value beyond float16's range (+-{limit:g}): use --feat-dtype "
                             "bfloat16, which keeps float32's range", "--feat-dtype", f"{value:g}")
    return np.asarray(values, dtype=np.dtype(feat_dtype))


def encoding_of(feat_dtype) -> str | None:
    """Local. The meta.json ``encoding`` a ``feat_dtype`` needs (None: a plain numpy dtype)."""
    return feat_dtype if feat_dtype in ENCODINGS else None
