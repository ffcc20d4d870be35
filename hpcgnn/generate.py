"""``python -m hpcgnn.generate``: the short spelling of ``hpcgnn generate`` (:mod:`hpcgnn.cli.generate`)."""
from hpcgnn.cli.generate import main
from hpcgnn.runtime.abort import run_program

__all__ = ["main"]

if __name__ == "__main__":
    run_program(main)
