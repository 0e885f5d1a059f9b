"""What a build prints while it runs: a status line in every 15 s window whatever prints or not
(plain lines, a terminal's live view, with or without cibuildwheel's log), naming the Python,
the step and the compiles running; cibuildwheel's log only when asked; one sha256 per wheel.

The console runs on a fake clock that the test moves one heartbeat tick at a time, calling what
the heartbeat's thread calls each tick: the cadence is proven without waiting on wall time. The
thread itself is proven by waiting on the line it prints."""

from __future__ import annotations

import io
import itertools
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NoReturn

import pytest
from click.testing import CliRunner
from wheelbuild.attempt.buildlog import BuildLog, MemorySample, shown_line
from wheelbuild.cli import main as cli
from wheelbuild.cli.seams import Seams
from wheelbuild.errors import DockerUnavailable
from wheelbuild.host.unit_memory import ProcessInfo, UnitTracker
from wheelbuild.plan.memory_model import GIB, MIB
from wheelbuild.progress.console import STATUS_EVERY_S, TICK_S, BuildView, Console

from tests.clikit import NO_DOCKER

SILENT_S = 18 * 60  # cicc on one flash-attn unit, with nothing printed meanwhile
STATUS_LINE = re.compile(r"^--- (?:(\d+):)?(\d+):(\d\d) (.*)$")
COLOUR = re.compile(r"\x1b\[[0-9;]*m")  # a terminal's line carries colour codes
SHA = "74ac5a72e90902512717ea866bf76a568c9cc9f445dc7fbbaa8636d59e934d08"
# cibuildwheel's own lines, as build.log recorded them in a real build of the example.
RECORDED = (
    "Building cp311-manylinux_x86_64 wheel",
    "Setting up build environment...",
    "Running before_build...",
    "wheelbuild: wheel cache: installing 29 files (3.02 GB) into the machine's installed tree, once, no download",
    "Building wheel...",
    "[1/4] /usr/local/cuda/bin/nvcc -c /project/csrc/binding.cpp -o /project/build/temp/csrc/binding.o",
)
SUMMARY = (
    "  cp311-manylinux_x86_64: wbdemo-0.1.0+cu130torch2.14-cp311-cp311-manylinux_2_34_x86_64.whl "
    f"1.0 MB in a minute, SHA256={SHA}"
)

# build and plan read torch's index before Docker: from the cache, as seeded.
pytestmark = pytest.mark.usefixtures("fake_torch_index")


@dataclass
class FakeClock:
    now: float = 5000.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    """A stream that says it is a terminal: the console then shows rich's live view."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def no_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    """CI or NO_COLOR in this environment would make every stream plain."""
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("NO_COLOR", raising=False)


def _status_lines(text: str) -> list[tuple[int, str]]:
    """(elapsed seconds, the rest) of each status line printed."""
    found = []
    for line in COLOUR.sub("", text).splitlines():
        if matched := STATUS_LINE.match(line):
            hours, minutes, seconds, rest = matched.groups()
            found.append((int(hours or 0) * 3600 + int(minutes) * 60 + int(seconds), rest))
    return found


def _into_the_compile(view: BuildView, clock: FakeClock) -> BuildLog:
    """cibuildwheel's lines up to the first finished unit, a second apart, as the engine feeds them."""
    log = BuildLog()
    for line in RECORDED:
        clock.now += 1
        log.feed(line, clock.now)
        view.line(line, log)
    return log


def _silent_compile(console: Console, view: BuildView, clock: FakeClock) -> Iterator[float]:
    """SILENT_S seconds without a log line, one heartbeat tick at a time: the watcher's memory
    sample (two compiles running, older each second) and the heartbeat's look. Yields each tick's
    time in seconds since the console started."""
    started = clock.now
    for _ in range(int(SILENT_S / TICK_S)):
        clock.now += TICK_S
        running = clock.now - started
        view.memory(
            MemorySample(
                GIB, 2867 * MIB, 20 * GIB + 512 * MIB, (("flash_fwd", running + 3), ("flash_bwd", running))
            )
        )
        console.status()  # what the heartbeat's thread does each tick
        yield clock.now - 5000.0


@pytest.mark.parametrize("show_log", [False, True], ids=["default", "verbose"])
def test_a_compile_silent_for_18_minutes_gets_a_status_line_in_every_15_s_window(show_log: bool) -> None:
    clock, out = FakeClock(), io.StringIO()
    console = Console(out, show_log=show_log, clock=clock)
    with console.build_view(20 * GIB) as view:
        _into_the_compile(view, clock)
        ticks = list(_silent_compile(console, view, clock))
    during = [(t, rest) for t, rest in _status_lines(out.getvalue()) if t > ticks[0]]
    times = [t for t, _ in during]
    # One in every window of the silence, never more than 15 s apart, and never stuck: each line
    # tells the time it was printed.
    for window in range(int(ticks[0]), int(ticks[-1]) - int(STATUS_EVERY_S), int(STATUS_EVERY_S)):
        assert any(window <= t < window + STATUS_EVERY_S for t in times), (window, times[:5])
    assert all(later - earlier <= STATUS_EVERY_S for earlier, later in itertools.pairwise(times))
    assert len(times) <= SILENT_S / (STATUS_EVERY_S - TICK_S) + 1  # and not a line a tick
    # Each names the Python, the step and how long it has run, the units, the compiles running
    # with their ages, and the memory.
    last_t, last = during[-1]
    assert last_t >= ticks[-1] - STATUS_EVERY_S
    # The compile began with "Building wheel..." 5 s in; the watcher's sampling 6 s in.
    assert last == (
        f"cp311 compiling ({_m_ss(last_t - 5)} so far); 1/4 units; "
        f"running flash_fwd ({_m_ss(last_t - 3)}), flash_bwd ({_m_ss(last_t - 6)}); "
        "memory 1.0 GiB (peak 2.8 GiB) of 20.5 GiB"
    )
    # cibuildwheel's own lines are shown only when asked for.
    assert ("Running before_build..." in out.getvalue()) is show_log


def test_a_terminals_live_view_keeps_its_status_line_current_through_a_silent_compile(no_ci: None) -> None:
    clock, out = FakeClock(), Terminal()
    console = Console(out, show_log=False, clock=clock)
    assert not console.plain
    with console.build_view(20 * GIB) as view:
        _into_the_compile(view, clock)
        for elapsed in _silent_compile(console, view, clock):
            if elapsed % STATUS_EVERY_S == 0:  # at every 15 s of the silence, the top line is now's
                top = view.progress.tasks[0].description
                assert top.startswith("cp311 compiling ("), top
                assert f"running flash_fwd ({_m_ss(elapsed - 6 + 3)})" in top, (elapsed, top)
    assert "Running before_build..." not in out.getvalue()


def _m_ss(seconds: float) -> str:
    return f"{int(seconds) // 60}:{int(seconds) % 60:02d}"


@pytest.mark.parametrize("terminal", [False, True], ids=["plain", "terminal"])
def test_a_silent_install_outside_the_attempt_names_its_python_and_what_the_script_started(
    terminal: bool, no_ci: None
) -> None:
    clock = FakeClock()
    out = Terminal() if terminal else io.StringIO()
    console = Console(out, show_log=False, clock=clock)
    console.step("import gate: each wheel installed and imported in a fresh container")
    console.doing("gating wbdemo-0.1.0-cp311-cp311-manylinux_2_34_x86_64.whl", "cp311")
    console.log(
        "wheelbuild: wheel cache: installing 29 files (3.02 GB) into the machine's installed tree, once"
    )
    for _ in range(int(180 / TICK_S)):
        clock.now += TICK_S
        console.status()
    lines = _status_lines(out.getvalue())
    # Due one tick early (at 14 s), so a heartbeat that looks once a tick is never late.
    assert [t for t, _ in lines] == list(range(14, 180, 14))
    assert lines[-1][1] == (
        "cp311 gating wbdemo-0.1.0-cp311-cp311-manylinux_2_34_x86_64.whl (2:48 so far); "
        "wheel cache: installing 29 files (3.02 GB) into the machine's installed tree, once"
    )
    assert "wheelbuild: wheel cache" not in out.getvalue()  # the log itself: only with show_log


def test_the_heartbeat_prints_a_status_line_by_itself_while_nothing_else_happens() -> None:
    clock, printed = FakeClock(), threading.Event()

    class Watched(io.StringIO):
        def write(self, text: str) -> int:
            written = super().write(text)
            if text.startswith("---"):
                printed.set()
            return written

    out = Watched()
    console = Console(out, show_log=False, clock=clock)
    console.doing("installing torch and the build requirements", "cp311")
    clock.now += STATUS_EVERY_S  # a step silent for 15 s: no line, no caller, only the heartbeat
    with console.heartbeat():
        assert printed.wait(timeout=60), "the heartbeat printed no status line"
    assert "--- 0:15 cp311 installing torch and the build requirements (0:15 so far)" in out.getvalue()


def test_cibuildwheels_sha256_of_the_unstamped_wheel_never_reaches_the_terminal() -> None:
    assert SHA not in shown_line(SUMMARY)
    assert shown_line(SUMMARY).endswith(
        "1.0 MB in a minute (unstamped; wheelbuild stamps it next and prints the wheel's sha256 at the end)"
    )
    out = io.StringIO()
    console = Console(out, show_log=True)
    with console.build_view(4 * GIB) as view:
        log = BuildLog()
        log.feed(SUMMARY)
        view.line(SUMMARY, log)
    assert "wbdemo-0.1.0+cu130torch2.14-cp311-cp311-manylinux_2_34_x86_64.whl 1.0 MB" in out.getvalue()
    assert not re.search(r"[0-9a-f]{64}", out.getvalue())
    # Other lines pass as they came.
    assert shown_line("Fixed-up wheel written to /tmp/x.whl") == "Fixed-up wheel written to /tmp/x.whl"


def test_the_running_compiles_are_the_units_seen_at_the_last_sample_with_their_ages() -> None:
    nvcc = ("nvcc", "-c", "/p/csrc/{}.cu", "-o", "/p/build/{}.o")
    tracker = UnitTracker()

    def unit(pid: int, name: str) -> ProcessInfo:
        return ProcessInfo(pid, 1, 100 * MIB, tuple(word.format(name) for word in nvcc))

    tracker.observe(10.0, "cp311-manylinux_x86_64", [unit(2, "fwd"), unit(3, "bwd")], GIB)
    # An nvcc step seen only by its intermediate's name, as a real build showed one.
    step = ProcessInfo(5, 1, 10 * MIB, ("nvlink", "-o", "/tmp/tmpxft_000000a1_00000000-2.o"))
    tracker.observe(40.0, "cp311-manylinux_x86_64", [unit(2, "fwd"), unit(4, "relu"), step], GIB)
    assert tracker.running("cp311-manylinux_x86_64") == (("fwd", 30.0), ("relu", 0.0))  # bwd finished
    assert tracker.running("cp312-manylinux_x86_64") == ()


@pytest.mark.parametrize(
    ("args", "env", "shown"),
    [
        ((), {}, False),
        (("-q",), {}, False),
        (("-v",), {}, True),
        (("-q", "--verbose"), {}, True),
        (("--verbose", "-q"), {}, False),
        ((), {"WHEELBUILD_VERBOSE": "1"}, True),
    ],
    ids=["default", "quiet", "verbose", "quiet-then-verbose", "verbose-then-quiet", "env"],
)
def test_cibuildwheels_log_is_shown_only_with_verbose(
    args: tuple[str, ...], env: dict[str, str], shown: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[bool] = []

    def pipeline(*given: object) -> NoReturn:
        console = given[2]
        assert isinstance(console, Console)
        seen.append(console.show_log)
        raise DockerUnavailable("stopped here", "the pipeline's own tests run it")  # no Docker here

    monkeypatch.setenv("DOCKER_HOST", NO_DOCKER)
    result = CliRunner().invoke(
        cli.main, ["build", "wbdemo", *args], env=env, catch_exceptions=False, obj=Seams(run_build=pipeline)
    )
    assert result.exit_code == 20, result.output
    assert seen == [shown]
