"""``python -m hpcgnn.partition`` (and ``hpcgnn partition``): read a graph, partition it, write the HDF5 parts;
see :mod:`hpcgnn.prep.partition`."""

from hpcgnn.prep.partition import main
from hpcgnn.runtime.abort import run_program

__all__ = ["main"]

if __name__ == "__main__":
    run_program(main)
