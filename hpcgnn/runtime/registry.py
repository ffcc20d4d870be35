"""Entries by name: what ``--sampler``, ``--task`` and ``--model`` choose from.

Each registry keeps registration order (the order of the flag's choices), refuses a name
registered twice, and names the choices when asked for an unknown one.
"""
from __future__ import annotations


class Registry(dict):
    """Local. ``name -> entry`` of one kind of thing (``"sampler"``, ``"task"``, ``"model"``)."""

    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind

    def add(self, name, entry):
        """Local. Register ``entry`` as ``name``; a name already taken is a ValueError."""
        if name in self:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self[name] = entry
        return entry

    def named(self, name):
        """Local. The entry registered as ``name`` (KeyError naming the choices if none)."""
        if name not in self:
            raise KeyError(f"unknown {self.kind} {name!r} (choose from {', '.join(self)})")
        return self[name]
