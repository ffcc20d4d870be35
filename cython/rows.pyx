# cython: language_level=3
"""Row copies between tables by index, in one pass and without the GIL (the store's gathers)."""
from libc.stdint cimport int64_t, uint8_t
from libc.string cimport memcpy


def copy_rows(const uint8_t[:, ::1] src, const int64_t[::1] src_rows, uint8_t[:, ::1] out,
              const int64_t[::1] out_rows):
    """Local. ``out[out_rows[i]] = src[src_rows[i]]`` for every i, rows as raw bytes.

    One pass where numpy's ``out[a] = src[b]`` makes two (a gathered temporary, then a
    scatter). Indices are checked against both tables first.
    """
    cdef Py_ssize_t n = src_rows.shape[0], i
    cdef Py_ssize_t width = src.shape[1]
    cdef int64_t s, d, src_n = src.shape[0], out_n = out.shape[0]
    if out_rows.shape[0] != n:
        raise ValueError(f"copy_rows: {n} source rows but {out_rows.shape[0]} destinations")
    if out.shape[1] != width:
        raise ValueError(f"copy_rows: rows of {width} bytes into rows of {out.shape[1]} bytes")
    cdef int64_t bad = -1
    with nogil:
        for i in range(n):
            s = src_rows[i]
            d = out_rows[i]
            if s < 0 or s >= src_n or d < 0 or d >= out_n:
                bad = i
                break
        if bad < 0:
            for i in range(n):
                memcpy(&out[out_rows[i], 0], &src[src_rows[i], 0], width)
    if bad >= 0:
        raise IndexError(f"copy_rows: row {src_rows[bad]} -> {out_rows[bad]} outside tables of "
                         f"{src_n} and {out_n} rows")
