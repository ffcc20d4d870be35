"""The ``--help`` layout of every command: each flag's default shown after its description."""
from __future__ import annotations

import argparse


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Local. Append ``(default: X)`` to a flag's help unless the text already states its
    default or there is none worth showing (None, an off switch, a suppressed value)."""

    def _get_help_string(self, action):
        text = action.help or ""
        default = action.default
        if ("default" in text or default is None or default is argparse.SUPPRESS
                or isinstance(default, bool) or action.nargs == 0):
            return text
        if isinstance(default, (list, tuple)):
            default = ",".join(map(str, default))
        shown = f"(default: {str(default).replace('%', '%%')})"
        return f"{text} {shown}" if text else shown


class RawDescriptionDefaultsHelpFormatter(argparse.RawDescriptionHelpFormatter, DefaultsHelpFormatter):
    """Local. :class:`DefaultsHelpFormatter` that prints the description and epilog as written
    (for examples laid out line by line)."""
