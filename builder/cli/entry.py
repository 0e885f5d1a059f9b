"""The console script's entry point: loads the CLI, then runs it.

Importing the CLI takes most of a second (click, packaging, pyelftools, every command's module);
a Ctrl-C in that time raises KeyboardInterrupt in whatever module is loading. Caught here, where
nothing heavy is imported yet, it ends like a Ctrl-C anywhere else: one line and exit 130.
"""

from __future__ import annotations

import sys

INTERRUPTED = 130  # errors.Interrupted's exit code, named here without importing errors.py


def run() -> None:
    """Load the command line and run it (cli.run renders every error from then on)."""
    try:
        from .main import run as run_cli
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted\n")
        sys.exit(INTERRUPTED)
    run_cli()
