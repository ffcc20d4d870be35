"""``python -m hpcgnn.inspect`` (and ``hpcgnn inspect``): summarise and verify a partitioned dataset;
see :mod:`hpcgnn.prep.inspection`."""

from hpcgnn.prep.inspection import main
from hpcgnn.runtime.abort import run_program

__all__ = ["main"]

if __name__ == "__main__":
    run_program(main)
