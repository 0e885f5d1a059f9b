"""One small reporter for progress and logs: a terminal gets colour, CI gets plain lines."""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO

from rich.console import Console
from rich.markup import escape


class Reporter:
    def __init__(self, stream: TextIO | None = None, *, quiet: bool = False) -> None:
        stream = stream or sys.stdout
        plain = not stream.isatty() or bool(os.environ.get("CI")) or bool(os.environ.get("NO_COLOR"))
        self.console = Console(file=stream, no_color=plain, highlight=False, soft_wrap=True)
        self.plain = plain
        self.quiet = quiet
        self._started = time.monotonic()

    def _elapsed(self) -> str:
        seconds = int(time.monotonic() - self._started)
        return f"{seconds // 60:d}:{seconds % 60:02d}"

    def step(self, text: str) -> None:
        self.console.print(f"[bold cyan]==>[/] [dim]{self._elapsed()}[/] {escape(text)}")

    def info(self, text: str) -> None:
        self.console.print(f"    {escape(text)}")

    def warn(self, text: str) -> None:
        self.console.print(f"[yellow]warning:[/] {escape(text)}")

    def log(self, line: str) -> None:
        """A line of a long tool's output (image build, cibuildwheel)."""
        if not self.quiet:
            self.console.print(f"[dim]{escape(line)}[/]")
