"""images/wheelbuild-admit's test bench (tests/unit and tests/local test_admit.py): a costs file, a
budget, a ledger directory and a fake compiler in tmp_path, and the wrappers started in front of it.
Each suite's conftest takes the fixture from here."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]


ADMIT = REPO / "images" / "wheelbuild-admit"


FAKE_COMPILER = """\
import json, os, sys, time

args = sys.argv[1:]
name = args[args.index("-c") + 1] if "-c" in args else "no-source"
record = os.environ["FAKE_RECORD"]


def write(suffix, data):
    path = os.path.join(record, name + suffix)
    with open(path + ".tmp", "w") as handle:
        json.dump(data, handle)
    os.replace(path + ".tmp", path)


start = time.time()
write(".start", {"pid": os.getpid(), "start": start})
if "--hold" in args:  # until the test writes <record>/go-<name> (or go-ALL, when it ends)
    while not any(os.path.exists(os.path.join(record, "go-" + n)) for n in (name, "ALL")):
        time.sleep(0.01)
time.sleep(float(args[args.index("--sleep") + 1]) if "--sleep" in args else 0.0)
write(".json", {"pid": os.getpid(), "start": start, "end": time.time()})
if "--signal" in args:
    os.kill(os.getpid(), int(args[args.index("--signal") + 1]))
sys.exit(int(args[args.index("--exit") + 1]) if "--exit" in args else 0)
"""


class Bench:
    """A costs file, a budget, a ledger directory and a fake compiler, all in tmp_path."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.record = root / "record"
        self.record.mkdir()
        self.ledger_dir = root / "ledger"
        self.fake = root / "fake_cc.py"
        self.fake.write_text(FAKE_COMPILER)
        self.costs = root / "costs.json"
        self.processes: list[subprocess.Popen[str]] = []
        self.configure(budget=10, default=4)

    def configure(
        self,
        *,
        budget: int,
        default: int,
        units: dict[str, int] | None = None,
        fairness: float = 30,
        slots: int | None = None,
    ) -> None:
        extra = {} if slots is None else {"slots": slots}
        self.costs.write_text(json.dumps({"default": default, "units": units or {}, **extra}))
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("WHEELBUILD_ADMIT_")}
        self.env.update(
            FAKE_RECORD=str(self.record),
            WHEELBUILD_ADMIT_BUDGET=str(budget),
            WHEELBUILD_ADMIT_COSTS=str(self.costs),
            WHEELBUILD_ADMIT_DIR=str(self.ledger_dir),
            WHEELBUILD_ADMIT_FAIRNESS_S=str(fairness),
        )

    def start(self, name: str, *extra: str, admit: bool = True) -> subprocess.Popen[str]:
        """wheelbuild-admit <python> fake_cc.py [extra] -c <name>, like ninja's compile rule."""
        env = (
            self.env
            if admit
            else {k: v for k, v in self.env.items() if not k.startswith("WHEELBUILD_ADMIT_")}
        )
        command = [
            sys.executable,
            str(ADMIT),
            sys.executable,
            str(self.fake),
            *extra,
            "-c",
            name,
            "-o",
            f"{name}.o",
        ]
        # A session of its own, as ninja gives each command a process group of its own.
        process = subprocess.Popen(
            command,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.processes.append(process)
        return process

    def queue(self, name: str, *extra: str) -> subprocess.Popen[str]:
        """start(), then wait until the wrapper waits in the ledger. The wrapper writes its
        waiting entry under the lock of its first decision, so once it shows, that decision was
        "not yet"; an entry among the running means it was admitted at once."""
        process = self.start(name, *extra)
        pid = str(process.pid)
        self.wait_for(
            lambda: pid in self.ledger()["waiting"] or pid in self.ledger()["running"],
            what=f"{name} to queue",
        )
        assert pid not in self.ledger()["running"], f"{name} was admitted at once"
        return process

    def finish(self, process: subprocess.Popen[str], timeout: float = 15) -> int:
        """Wait for a wrapper; it must print nothing."""
        out, err = process.communicate(timeout=timeout)
        assert (out, err) == ("", ""), f"wheelbuild-admit printed {out!r} {err!r}"
        return process.returncode

    def interval(self, name: str) -> tuple[float, float]:
        data = json.loads((self.record / f"{name}.json").read_text())
        return data["start"], data["end"]

    def started(self, name: str) -> dict[str, Any] | None:
        path = self.record / f"{name}.start"
        return json.loads(path.read_text()) if path.exists() else None

    def go(self, name: str) -> None:
        (self.record / f"go-{name}").touch()

    def ledger(self) -> dict[str, dict[str, Any]]:
        path = self.ledger_dir / "ledger.json"
        return json.loads(path.read_text()) if path.exists() else {"running": {}, "waiting": {}}

    def wait_for(self, condition: Callable[[], object], timeout: float = 10, what: str = "") -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what or condition}")
            time.sleep(0.02)


@pytest.fixture
def bench(tmp_path: Path) -> Iterator[Bench]:
    b = Bench(tmp_path)
    yield b
    b.go("ALL")  # every held fake compiler, also those still waiting, ends when it runs
    for process in b.processes:
        try:
            process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # the wrapper and its compiler
            process.communicate()
