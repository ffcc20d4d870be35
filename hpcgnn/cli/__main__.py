"""``python -m hpcgnn.cli``: the ``hpcgnn`` console command."""
from hpcgnn.cli import program

program()
