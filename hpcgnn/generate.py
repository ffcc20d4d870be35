"""``python -m hpcgnn.generate`` (and ``hpcgnn generate``): write a synthetic graph;
see :mod:`hpcgnn.prep.generate`."""

from hpcgnn.prep.generate import main
from hpcgnn.runtime.abort import run_program

__all__ = ["main"]

if __name__ == "__main__":
    run_program(main)
