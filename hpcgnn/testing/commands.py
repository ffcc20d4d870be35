"""A command run the way a user runs it, inside the test's own process.

Starting ``python -m hpcgnn.<command>`` costs a fresh interpreter and its torch import (seconds
each on a loaded machine); calling the command's ``main`` costs neither and prints the same
one-line error with the same exit status (:func:`hpcgnn.runtime.abort.entry_point`). Tests of
what happens to a real process (a signal, ``os._exit``, several ranks under mpiexec) still start one.
"""
from __future__ import annotations

import contextlib
import importlib
import io
import os
import subprocess


def run_command(module, *argv, drop_env=("SLURM_JOB_ID",)) -> subprocess.CompletedProcess:
    """Local. Run ``python -m <module> <argv>`` as ``<module>.main(argv)`` in this process (one
    rank): a ``CompletedProcess`` with the exit status (``main``'s return value, or the code it
    exits with) and what the command printed to stdout and stderr. The environment variables in
    ``drop_env`` are unset while it runs (a test job's own Slurm id would otherwise reach the
    command). A bug's exception propagates, as :func:`~hpcgnn.runtime.abort.entry_point` lets it
    in a process of one rank."""
    main = importlib.import_module(module).main
    args = [str(arg) for arg in argv]
    stdout, stderr = io.StringIO(), io.StringIO()
    saved = {name: os.environ.pop(name) for name in drop_env if name in os.environ}
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                status = main(args)
            except SystemExit as stop:
                status = stop.code
    finally:
        os.environ.update(saved)
    return subprocess.CompletedProcess([module, *args], status or 0, stdout.getvalue(), stderr.getvalue())
