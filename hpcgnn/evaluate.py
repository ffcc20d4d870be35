"""``python -m hpcgnn.evaluate``: the short spelling of ``hpcgnn evaluate`` (:mod:`hpcgnn.cli.evaluate`)."""
from hpcgnn.cli.evaluate import main
from hpcgnn.runtime.abort import run_program

__all__ = ["main"]

if __name__ == "__main__":
    run_program(main)
