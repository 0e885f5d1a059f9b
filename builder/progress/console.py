"""One small console for progress and logs.

A build prints its steps and summaries, and while it runs a status line at least every
STATUS_EVERY_S seconds, whatever prints or not: which Python, which step and for how long, what
an in-container script said it started (torch's install, the import gate's), and while compiling
ninja's units and the compiles running with their ages. The log of a long tool (cibuildwheel,
an image build, the gate's container) is shown only with `show_log`; build.log always has it.
A terminal gets colour and a live progress view whose top line is the status, kept current; CI
(or no TTY) gets plain lines."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TextIO

from rich.console import Console as RichConsole
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

from ..attempt.buildlog import BuildLog, MemorySample, activity, python_of, shown_line
from ..units import format_bytes

STATUS_EVERY_S = 15.0
TICK_S = 1.0  # how often the heartbeat looks whether a status line is due
_NAMED_COMPILES = 3  # the status line names the oldest few running compiles, and counts the rest
_DETAIL_CHARS = 160  # of what a script said it started: a path in it may be long

# cibuildwheel's steps as the status line names them (others are shown lower-cased).
_STEP_DOING = {
    "Setting up build environment": "setting up the build environment",
    "Running before_build": "installing torch and the build requirements",
    "Building wheel": "compiling",
    "Repairing wheel": "repairing the wheel",
    "Testing wheel": "testing the wheel",
}


def clock_text(seconds: float) -> str:
    """Seconds as m:ss (h:mm:ss from an hour)."""
    whole = max(0, int(seconds))
    hours, rest = divmod(whole, 3600)
    if hours:
        return f"{hours}:{rest // 60:02d}:{rest % 60:02d}"
    return f"{rest // 60:d}:{rest % 60:02d}"


def step_doing(step: str) -> str:
    """cibuildwheel's step ("Building wheel") as the status line says it ("compiling")."""
    return _STEP_DOING.get(step, step[:1].lower() + step[1:])


@dataclass(frozen=True)
class Status:
    """What runs now, as the status line says it."""

    doing: str  # "image", "compiling", "gating wbdemo-...whl"
    since: float  # when it began, on the console's clock
    python: str | None = None  # cp311: cibuildwheel builds one Python after another
    detail: str = ""  # what an in-container script last said it started
    units: tuple[int, int] | None = None  # ninja's finished and total units of this Python
    compiling: tuple[tuple[str, float], ...] = ()  # the compiles running, with their ages
    memory: str = ""  # the container's memory against its limit

    def text(self, now: float) -> str:
        """`cp311 compiling (18:02 so far); 1/4 units; running fwd (17:58); memory ...`."""
        head = f"{self.python} " if self.python else ""
        parts = [f"{head}{self.doing} ({clock_text(now - self.since)} so far)"]
        if self.detail:
            parts.append(self.detail)
        if self.units is not None:
            parts.append(f"{self.units[0]}/{self.units[1]} units")
        if self.compiling:
            named = ", ".join(f"{unit} ({clock_text(age)})" for unit, age in self.compiling[:_NAMED_COMPILES])
            more = len(self.compiling) - _NAMED_COMPILES
            parts.append(f"running {named}" + (f" and {more} more" if more > 0 else ""))
        if self.memory:
            parts.append(self.memory)
        return "; ".join(parts)


class Console:
    """Steps, notes, warnings, logs and the status line of one command, on one stream.
    `clock` (monotonic seconds) is the status line's and the elapsed time's: tests pass their own."""

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        show_log: bool = True,
        notes: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        stream = stream or sys.stdout
        plain = not stream.isatty() or bool(os.environ.get("CI")) or bool(os.environ.get("NO_COLOR"))
        self.rich = RichConsole(file=stream, no_color=plain, highlight=False, soft_wrap=True)
        self.plain = plain
        self.show_log = show_log
        self.notes = notes  # info lines; off where the command prints what they say anyway (plan)
        self._clock = clock
        self._started = clock()
        # The heartbeat's thread and the engine's watcher change the status as the log does.
        self._lock = threading.RLock()
        self._status = Status("starting", self._started)
        self._last_status = self._started
        self._view: BuildView | None = None

    def elapsed(self) -> str:
        return clock_text(self._clock() - self._started)

    def step(self, text: str) -> None:
        with self._lock:
            self._status = Status(text.split(":", 1)[0][:80], self._clock())
            self.rich.print(f"[bold cyan]==>[/] [dim]{self.elapsed()}[/] {escape(text)}")

    def info(self, text: str) -> None:
        if self.notes:
            self.rich.print(f"    {escape(text)}")

    def warn(self, text: str) -> None:
        self.rich.print(f"[yellow]warning:[/] {escape(text)}")

    def log(self, line: str) -> None:
        """A line of a long tool's output (image build, cibuildwheel, the gate): shown with
        show_log; what it says it starts is the status line's detail either way."""
        if (started := activity(line)) is not None:
            with self._lock:
                self._status = replace(self._status, detail=started[:_DETAIL_CHARS])
        if self.show_log:
            self.rich.print(f"[dim]{escape(line)}[/]", markup=True)

    def doing(self, what: str, python: str | None = None) -> None:
        """What runs now, for the status line (nothing is printed): `gating x.whl` under cp311."""
        with self._lock:
            self._status = Status(what, self._clock(), python)

    def status(self, force: bool = False) -> None:
        """A status line, when STATUS_EVERY_S passed since the last (or `force`). It is due one
        tick early, so that the heartbeat, looking once a tick, is never late. In a terminal's
        live view the view's top line is the status, kept current instead."""
        with self._lock:
            now = self._clock()
            if self._view is not None and not self.plain:
                self._view.show(self._status.text(now))
                return
            if not force and now - self._last_status < STATUS_EVERY_S - TICK_S:
                return
            self._last_status = now
            self.rich.print(
                f"[bold]---[/] [dim]{clock_text(now - self._started)}[/] {escape(self._status.text(now))}"
            )

    def follow_build(self, python: str | None, doing: str, units: tuple[int, int] | None) -> None:
        """The status as the build's log moves on: a new Python or step starts anew."""
        with self._lock:
            status = self._status
            if (python, doing) != (status.python, status.doing):
                status = Status(doing, self._clock(), python, memory=status.memory)
            self._status = replace(status, units=units)

    def follow_memory(self, memory: str, compiling: tuple[tuple[str, float], ...]) -> None:
        """The status as the engine's watcher samples the container."""
        with self._lock:
            self._status = replace(self._status, memory=memory, compiling=compiling)

    @contextmanager
    def heartbeat(self) -> Iterator[None]:
        """While the body runs, a thread looks once a TICK_S whether a status line is due."""
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(TICK_S):
                try:
                    self.status()
                except OSError:  # the stream is gone (a closed pipe): nothing left to tell
                    return

        thread = threading.Thread(target=beat, name="wheelbuild-status", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    @contextmanager
    def build_view(self, limit: int) -> Iterator[BuildView]:
        view = BuildView(self, limit)
        with self._lock:
            self._view = view
        try:
            if self.plain:
                yield view
                self.status(force=True)
                return
            with view.progress:
                yield view
        finally:
            with self._lock:
                self._view = None


class BuildView:
    """Live view of one attempt: ninja's [n/N] per Python and in total, the container's memory
    (used and peak against its limit), elapsed time and ETA; and the status it feeds."""

    def __init__(self, console: Console, limit: int) -> None:
        self.console = console
        self.limit = limit
        self.memory_text = "memory: waiting for the container"
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[memory]}"),
            console=console.rich,
            transient=False,
        )
        self._tasks: dict[str, TaskID] = {}
        # The status line, kept current: which Python, which step, the compiles running.
        self._setup = self.progress.add_task("starting", total=None, memory="")

    def line(self, line: str, progress: BuildLog) -> None:
        self.console.log(shown_line(line))
        self.console.follow_build(
            python_of(progress.identifier),
            step_doing(progress.step),
            (progress.done, progress.total) if progress.total else None,
        )
        if self.console.plain:
            return
        self.console.status()
        if progress.identifier and progress.total:
            task = self._tasks.get(progress.identifier)
            if task is None:
                task = self.progress.add_task(progress.identifier, total=progress.total, memory="")
                self._tasks[progress.identifier] = task
            self.progress.update(task, completed=progress.done, total=progress.total, memory=self.memory_text)

    def memory(self, sample: MemorySample) -> None:
        limit = format_bytes(sample.limit or self.limit)
        self.memory_text = f"memory {format_bytes(sample.used)} (peak {format_bytes(sample.peak)}) of {limit}"
        self.console.follow_memory(self.memory_text, sample.compiling)
        if not self.console.plain:
            for task in self._tasks.values():
                self.progress.update(task, memory=self.memory_text)

    def show(self, status: str) -> None:
        """The live view's top line."""
        self.progress.update(self._setup, description=status)
