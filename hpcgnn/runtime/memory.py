"""How much memory a new allocation can have on this machine."""
from __future__ import annotations


def available_memory() -> int:
    """Local. Bytes of memory available to a new allocation without swapping (psutil's estimate:
    free memory plus what the kernel can reclaim, as the page cache)."""
    import psutil  # deferred: only the checks before large allocations need it

    return int(psutil.virtual_memory().available)
