"""``python -m hpcgnn.generate`` (and ``hpcgnn generate``): write a synthetic graph;
see :mod:`hpcgnn.prep.generate`."""
import sys

from hpcgnn.prep.generate import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
