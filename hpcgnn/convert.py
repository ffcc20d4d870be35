"""``python -m hpcgnn.convert``: the short spelling of ``hpcgnn convert`` (:mod:`hpcgnn.cli.convert`)."""
from hpcgnn.cli.convert import main
from hpcgnn.runtime.abort import run_program

__all__ = ["main"]

if __name__ == "__main__":
    run_program(main)
