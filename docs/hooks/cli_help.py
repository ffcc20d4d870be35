"""MkDocs hook: a line ``<!-- cli-help: SUBCOMMAND [KIND] -->`` becomes that subcommand's ``--help`` text.

The command-line reference is then the parser's own description of every flag, never a copy that
drifts from it. A subcommand whose help cannot be printed fails the build.
"""
import os
import re
import subprocess
import sys

from mkdocs.exceptions import PluginError

MARKER = re.compile(r"^<!-- cli-help: ([a-z][a-z ]*[a-z]) -->$", re.MULTILINE)
_texts = {}


def _help_text(subcommand):
    if subcommand not in _texts:
        # a fixed width, so the page does not depend on the terminal that built it
        env = dict(os.environ, COLUMNS="100", OMP_NUM_THREADS="1")
        proc = subprocess.run([sys.executable, "-m", "hpcgnn.cli", *subcommand.split(), "--help"],
                              capture_output=True, text=True, env=env, timeout=120)
        if proc.returncode != 0:
            raise PluginError(f"hpcgnn {subcommand} --help failed (exit {proc.returncode}): "
                              f"{proc.stderr.strip()[-500:]}")
        _texts[subcommand] = proc.stdout.rstrip()
    return _texts[subcommand]


def on_page_markdown(markdown, page, config, files):
    return MARKER.sub(lambda m: "```text\n" + _help_text(m.group(1)) + "\n```", markdown)
