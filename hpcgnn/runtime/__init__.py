"""Process plumbing with no graph knowledge: MPI communicators and collectives, the abort path,
random-seed derivation, atomic file writes, errors, and the allocator setting.

Nothing here initialises MPI at import time: :func:`hpcgnn.runtime.comm.mpi` does, on first use.
"""
