"""``python -m hpcgnn.partition`` (and ``hpcgnn partition``): read a graph, partition it, write the HDF5 parts;
see :mod:`hpcgnn.prep.partition`."""
import sys

from hpcgnn.prep.partition import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
