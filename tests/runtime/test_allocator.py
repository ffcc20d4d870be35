import platform

from hpcgnn.runtime.allocator import keep_heap_memory


def test_keep_heap_memory_applies_on_glibc():
    result = keep_heap_memory()
    if platform.libc_ver()[0] == "glibc":
        assert result is True
    else:
        assert result in (True, False)
