# cython: language_level=3
"""The progress thread's loop, without the GIL.

A Python loop must take the GIL at every wake-up, and a rank whose main thread runs Python
holds it for up to the interpreter's switch interval (5 ms): the poll comes late exactly when
the rank is busy. This loop calls ``MPI_Iprobe`` through its address (taken from the MPI
library mpi4py loaded, so nothing here is compiled against one MPI) and sleeps in between, and
never touches the GIL until it is told to stop.
"""
from libc.stdint cimport uintptr_t, uint8_t
from posix.time cimport nanosleep, timespec

# MPI_Comm is an int (MPICH family) or a pointer (Open MPI); either fits a pointer-sized
# register argument of the C calling convention, so one signature serves both.
ctypedef int (*iprobe_fn)(int, int, uintptr_t, int*, void*) noexcept nogil


def poll(uintptr_t iprobe, uintptr_t comm, int any_source, int any_tag, double interval,
         uint8_t[::1] stop not None, long[::1] polls not None):
    """Local. Call ``MPI_Iprobe(any_source, any_tag, comm)`` every ``interval`` seconds until
    ``stop[0]`` is set; ``polls[0]`` counts the calls."""
    cdef iprobe_fn fn = <iprobe_fn>iprobe
    cdef int flag = 0
    cdef char status[1024]  # larger than any MPI_Status
    cdef timespec ts
    ts.tv_sec = <long>interval
    ts.tv_nsec = <long>((interval - <long>interval) * 1e9)
    cdef volatile uint8_t* halt = &stop[0]
    with nogil:
        while halt[0] == 0:
            fn(any_source, any_tag, comm, &flag, <void*>status)
            polls[0] += 1
            nanosleep(&ts, NULL)
