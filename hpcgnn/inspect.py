"""``python -m hpcgnn.inspect``: the short spelling of ``hpcgnn inspect`` (:mod:`hpcgnn.cli.inspect`)."""
from hpcgnn.cli.inspect import main
from hpcgnn.runtime.abort import run_program

__all__ = ["main"]

if __name__ == "__main__":
    run_program(main)
