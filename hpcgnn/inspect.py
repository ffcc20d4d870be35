"""``python -m hpcgnn.inspect`` (and ``hpcgnn inspect``): summarise and verify a partitioned dataset;
see :mod:`hpcgnn.prep.inspection`."""
import sys

from hpcgnn.prep.inspection import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
