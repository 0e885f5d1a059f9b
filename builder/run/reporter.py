"""One small reporter for progress and logs: a terminal gets colour and a live progress view,
CI (or no TTY) gets plain lines at a sane rate."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from ..units import format_bytes
from .buildlog import BuildLog, MemorySample

PLAIN_STATUS_EVERY_S = 15.0


class Reporter:
    def __init__(self, stream: TextIO | None = None, *, quiet: bool = False) -> None:
        stream = stream or sys.stdout
        plain = not stream.isatty() or bool(os.environ.get("CI")) or bool(os.environ.get("NO_COLOR"))
        self.console = Console(file=stream, no_color=plain, highlight=False, soft_wrap=True)
        self.plain = plain
        self.quiet = quiet
        self._started = time.monotonic()

    def elapsed(self) -> str:
        seconds = int(time.monotonic() - self._started)
        return f"{seconds // 60:d}:{seconds % 60:02d}"

    def step(self, text: str) -> None:
        self.console.print(f"[bold cyan]==>[/] [dim]{self.elapsed()}[/] {escape(text)}")

    def info(self, text: str) -> None:
        self.console.print(f"    {escape(text)}")

    def warn(self, text: str) -> None:
        self.console.print(f"[yellow]warning:[/] {escape(text)}")

    def log(self, line: str) -> None:
        """A line of a long tool's output (image build, cibuildwheel)."""
        if not self.quiet:
            self.console.print(f"[dim]{escape(line)}[/]", markup=True)

    @contextmanager
    def build_view(self, limit: int) -> Iterator[BuildView]:
        view = BuildView(self, limit)
        if self.plain:
            yield view
            view.status(force=True)
            return
        with view.progress:
            yield view


class BuildView:
    """Live view of one attempt: ninja's [n/N] per Python and in total, the container's memory
    (used and peak against its limit), elapsed time and ETA."""

    def __init__(self, reporter: Reporter, limit: int) -> None:
        self.reporter = reporter
        self.limit = limit
        self.memory_text = "memory: waiting for the container"
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[memory]}"),
            console=reporter.console,
            transient=False,
        )
        self._tasks: dict[str, TaskID] = {}
        self._last_status = 0.0
        self._log = BuildLog()
        # Until ninja reports units, one line says which step cibuildwheel is in.
        self._setup = self.progress.add_task("starting", total=None, memory="")

    def line(self, line: str, progress: BuildLog) -> None:
        self._log = progress
        self.reporter.log(line)
        if self.reporter.plain:
            self.status()
            return
        where = f"{progress.identifier or 'cibuildwheel'}: {progress.step}"
        self.progress.update(self._setup, description=where, memory=self.memory_text)
        if progress.identifier and progress.total:
            task = self._tasks.get(progress.identifier)
            if task is None:
                task = self.progress.add_task(progress.identifier, total=progress.total, memory="")
                self._tasks[progress.identifier] = task
            self.progress.update(task, completed=progress.done, total=progress.total, memory=self.memory_text)

    def memory(self, sample: MemorySample) -> None:
        limit = format_bytes(sample.limit or self.limit)
        self.memory_text = f"memory {format_bytes(sample.used)} (peak {format_bytes(sample.peak)}) of {limit}"
        if not self.reporter.plain:
            for task in self._tasks.values():
                self.progress.update(task, memory=self.memory_text)

    def status(self, force: bool = False) -> None:
        """Plain mode: one status line at most every PLAIN_STATUS_EVERY_S seconds."""
        now = time.monotonic()
        if not force and now - self._last_status < PLAIN_STATUS_EVERY_S:
            return
        self._last_status = now
        units = f"{self._log.done}/{self._log.total} units" if self._log.total else "no units yet"
        where = f"{self._log.identifier or 'cibuildwheel'}: {self._log.step}"
        self.reporter.console.print(
            f"--- [{where}] {units}; {self.memory_text}; {self.reporter.elapsed()} elapsed"
        )
