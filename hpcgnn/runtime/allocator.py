"""Keep freed memory in the process instead of handing it back to the kernel.

A training step allocates and frees the same few-megabyte tensors over and over. With
glibc's defaults, large blocks are mmap-ed and unmapped (or trimmed from the heap top) each
time, so every step pays page faults and page zeroing on fresh memory: about a third of a
GraphSAGE step on this machine. Raising the thresholds once makes the heap reuse them.
"""
from __future__ import annotations

import ctypes
import ctypes.util

_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3


def keep_heap_memory(mmap_threshold=1 << 30, trim_threshold=4 << 30, top_pad=256 << 20) -> bool:
    """Local. Tune glibc's malloc for allocation-heavy loops; returns False if not glibc."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    ok = mallopt(_M_MMAP_THRESHOLD, min(mmap_threshold, 2**31 - 1))
    ok &= mallopt(_M_TRIM_THRESHOLD, min(trim_threshold, 2**31 - 1))
    ok &= mallopt(_M_TOP_PAD, min(top_pad, 2**31 - 1))
    return bool(ok)
