"""One console line per finished stage of a long command (``partition``, ``evaluate``).

A stage that ends prints what it did, how long it took and the time since the command started,
as a plain line: a terminal shows where a long run is, and a batch log (SLURM) keeps one
greppable line per stage instead of progress-bar carriage returns.
"""
from __future__ import annotations

import sys
import time


class StageLog:
    """Local. ``log("what ended")`` prints ``command: what ended (stage s, total s)``.

    Parameters
    ----------
    command : str
        First word of every line.
    enabled : bool
        False prints nothing (ranks other than 0, library callers) but still keeps time.
    stream : file, optional
        Where lines go; default ``sys.stdout`` at the time of each line.
    """

    def __init__(self, command: str, enabled: bool = True, stream=None):
        self.command = command
        self.enabled = enabled
        self.stream = stream
        self.started = self.last = time.perf_counter()

    def __call__(self, what: str) -> float:
        """Local. End a stage: print its line; return its seconds."""
        now = time.perf_counter()
        seconds, self.last = now - self.last, now
        if self.enabled:
            print(f"{self.command}: {what} ({seconds:.1f}s, {now - self.started:.1f}s total)",
                  file=self.stream or sys.stdout, flush=True)
        return seconds

    def restart(self) -> None:
        """Local. The next stage starts now (the time since the last line was no stage of ours)."""
        self.last = time.perf_counter()

    @property
    def total_s(self) -> float:
        """Local. Seconds since the log was made."""
        return time.perf_counter() - self.started


def silent(_what: str) -> None:
    """Local. A stage log that prints nothing (the default of library functions)."""
