"""``python -m hpcgnn.train``: the short spelling of ``hpcgnn train`` (:mod:`hpcgnn.cli.train`)."""
from hpcgnn.cli.train import main
from hpcgnn.runtime.abort import run_program

__all__ = ["main"]

if __name__ == "__main__":
    run_program(main)
