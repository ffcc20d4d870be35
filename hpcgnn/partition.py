"""``python -m hpcgnn.partition``: the short spelling of ``hpcgnn partition`` (:mod:`hpcgnn.cli.partition`)."""
from hpcgnn.cli.partition import main
from hpcgnn.runtime.abort import run_program

__all__ = ["main"]

if __name__ == "__main__":
    run_program(main)
