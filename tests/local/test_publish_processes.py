"""wheelbuild.index.publish with other processes: a lock another process holds, publishers at once, and
the kernel's own faults (strace injects a full disk or a SIGKILL at the Nth rename into place):
the index stays whole, and what was checked is what is published."""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from wheelbuild.errors import (
    IndexWriteFailed,
    PublishLocked,
    WheelConflict,
)
from wheelbuild.index.publish import publish

from tests import toolchain
from tests.indexkit import (
    check_tree,
    lock_held,
    make_wheel,
    parse_page,
    python_child,
    temp_files,
    tree_with_one_wheel,
)

REPO = Path(__file__).resolve().parents[2]


# A publish of one new wheel writes: its .metadata, the wheel, its .sha256 and .archs caches, its
# project's two pages, (for a new project) the root's two pages, and the page for people.
WRITES_NEW_PROJECT = 9


WRITES_NEW_VERSION = 7


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return tree_with_one_wheel(tmp_path)


PUBLISH_IN_A_CHILD = """
import sys
from pathlib import Path
from wheelbuild.errors import WheelbuildError
from wheelbuild.index.publish import publish
try:
    publish([Path(sys.argv[1])], Path(sys.argv[2]))
except WheelbuildError as error:
    print(error.exit_code, error.cause)
"""


def _without_record(wheel: Path, to: Path) -> Path:
    """*wheel* with its RECORD left out, at *to*: a wheel installers refuse."""
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(to, "w") as copy:
        for info in source.infolist():
            if not info.filename.endswith("/RECORD"):
                copy.writestr(info, source.read(info))
    return to


@pytest.mark.parametrize("swapped_in", ["a wheel installers refuse", "a good wheel of other bytes"])
def test_what_is_checked_is_what_is_published_when_the_file_is_replaced_midway(
    tmp_path: Path, swapped_in: str
) -> None:
    wheel = make_wheel(tmp_path / "in")
    checked = wheel.read_bytes()
    other = make_wheel(tmp_path / "other", payload="other bytes")
    if swapped_in == "a wheel installers refuse":
        other = _without_record(other, tmp_path / "other" / "refused.whl")
    root = tmp_path / "tree"
    with lock_held(root) as waited:
        child = python_child(PUBLISH_IN_A_CHILD, str(wheel), str(root))
        waited(child)  # it has read and checked the wheel, and waits for the lock
        os.replace(other, wheel)  # replaced, all at once, before it copies anything
    said, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    published = root / "files" / wheel.name
    if swapped_in == "a wheel installers refuse":
        assert said.startswith(f"52 {wheel.name} is not a usable wheel: it has no "), said
        assert not published.exists()
        return
    assert said == "", said  # published what it read under the lock, the new bytes
    assert check_tree(root) == {"wbtiny": [wheel.name]}  # the index's sha256 is the served file's
    assert published.read_bytes() == wheel.read_bytes() != checked
    (tmp_path / "again").mkdir()
    first = tmp_path / "again" / wheel.name
    first.write_bytes(checked)
    with pytest.raises(WheelConflict):  # the bytes first given were never published
        publish([first], root)


HOLD_LOCK = """
import sys, time
from filelock import FileLock
with FileLock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(60)
"""


def test_a_held_lock_times_out_with_its_own_error(tmp_path: Path, tree: Path) -> None:
    holder = python_child(HOLD_LOCK, str(tree / ".lock"))
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "held\n"
        wheel = make_wheel(tmp_path / "in", "waiting", "1.0")
        start = time.monotonic()
        with pytest.raises(PublishLocked) as raised:
            publish([wheel], tree, lock_timeout=0.5)
        assert time.monotonic() - start >= 0.5  # it waited its timeout (never less, however loaded)
        assert holder.poll() is None  # and gave up while the lock was still held, not after
        assert raised.value.exit_code == 50
        assert not (tree / "files" / wheel.name).exists()
    finally:
        holder.kill()
        holder.wait()
    # The lock dies with its holder: the next publish goes through.
    assert publish([wheel], tree, lock_timeout=5).added == (wheel.name,)


PUBLISHER = """
import sys
from pathlib import Path
from wheelbuild.index.publish import publish
root, *wheels = sys.argv[1:]
result = publish([Path(w) for w in wheels], Path(root), lock_timeout=60)
print(len(result.added), flush=True)
"""


def test_concurrent_publisher_processes_all_end_up_in_the_index(tmp_path: Path, tree: Path) -> None:
    batches = [
        [make_wheel(tmp_path / f"p{n}", f"proj{n}", f"1.{k}") for k in range(3)]
        + [make_wheel(tmp_path / f"p{n}", "shared", f"2.{n}")]
        for n in range(4)
    ]
    # The test holds the tree's lock while the publishers start: each reads its wheels and then
    # waits for the lock, so all four contend for it the moment it is let go.
    with lock_held(tree) as waited:
        procs = [python_child(PUBLISHER, str(tree), *map(str, batch)) for batch in batches]
        for proc in procs:
            waited(proc)
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert out.strip() == "4"
    listing = check_tree(tree)
    assert sorted(listing) == ["oldpkg", "proj0", "proj1", "proj2", "proj3", "shared"]
    for n, batch in enumerate(batches):
        assert listing[f"proj{n}"] == [w.name for w in batch[:3]]
    assert listing["shared"] == sorted(b[3].name for b in batches)
    shared = parse_page((tree / "simple/shared/index.html").read_bytes())
    assert len(shared.anchors) == 4


@pytest.mark.parametrize("fail_at", range(1, WRITES_NEW_PROJECT + 1))
def test_a_full_disk_at_any_write_leaves_a_valid_index_and_a_retry_finishes(
    tmp_path: Path, tree: Path, fail_at: int
) -> None:
    wheel = make_wheel(tmp_path / "in", "newpkg", "1.0")
    done = _traced(PUBLISH_IN_A_CHILD, wheel, tree, tmp_path / "renames.log", f"error=ENOSPC:when={fail_at}")
    assert done.returncode == 0, done.stderr
    exit_code, _, cause = done.stdout.partition(" ")
    assert int(exit_code) == IndexWriteFailed.exit_code == 54
    assert "No space left on device" in cause
    listing = check_tree(tree, settled=False)  # every page parses; each link resolves, right hash
    assert listing["oldpkg"] == ["oldpkg-1.0-py3-none-any.whl"]
    assert set(listing) <= {"oldpkg", "newpkg"}
    assert temp_files(tree) == []
    assert publish([wheel], tree).added in ((wheel.name,), ())
    assert check_tree(tree) == {"newpkg": [wheel.name], "oldpkg": ["oldpkg-1.0-py3-none-any.whl"]}


@pytest.mark.parametrize("kill_at", range(1, WRITES_NEW_VERSION + 1))
def test_sigkill_at_any_write_leaves_the_previous_index_valid(
    tmp_path: Path, tree: Path, kill_at: int
) -> None:
    old = check_tree(tree)
    wheel = make_wheel(tmp_path / "in", "oldpkg", "1.1")  # a new version of a listed project
    log = tmp_path / "renames.log"
    # SIGKILL as the Nth rename into place starts: its temp file is complete, the rename not done.
    done = _traced(PUBLISH_IN_A_CHILD, wheel, tree, log, f"signal=KILL:when={kill_at}")
    at = _renamed(log, tree)
    assert len(at) == kill_at and at[-1][1] is None, at  # stopped at that rename, before its result
    assert done.returncode == -signal.SIGKILL  # strace dies as its tracee did

    # What a reader sees now: the old pages or new ones, each whole and each linking real files.
    listing = check_tree(tree, settled=False)
    assert listing["oldpkg"] in (old["oldpkg"], sorted([*old["oldpkg"], wheel.name]))
    assert [t.name.split(".tmp")[0] for t in temp_files(tree)] != []  # the killed write's leftover
    # The dead process's lock is gone with it; the next publish cleans up and finishes.
    publish([wheel], tree, lock_timeout=5)
    assert check_tree(tree) == {"oldpkg": sorted([*old["oldpkg"], wheel.name])}
    assert temp_files(tree) == []
    published = tree / "files" / wheel.name
    assert (
        hashlib.sha256(published.read_bytes()).hexdigest() == hashlib.sha256(wheel.read_bytes()).hexdigest()
    )


def test_the_crash_tests_stop_at_every_write_there_is(tmp_path: Path, tree: Path) -> None:
    log = tmp_path / "renames.log"
    done = _traced(PUBLISH_IN_A_CHILD, make_wheel(tmp_path / "in", "newpkg", "1.0"), tree, log)
    assert done.returncode == 0 and done.stdout == "", done.stdout + done.stderr
    writes = [rel for rel, result in _renamed(log, tree)]
    assert len(writes) == WRITES_NEW_PROJECT, writes
    done = _traced(PUBLISH_IN_A_CHILD, make_wheel(tmp_path / "in", "oldpkg", "1.1"), tree, log)
    assert done.returncode == 0 and done.stdout == "", done.stdout + done.stderr
    writes = [rel for rel, result in _renamed(log, tree)]
    assert len(writes) == WRITES_NEW_VERSION, writes
    assert writes[:3] == [f"files/oldpkg-1.1-py3-none-any.whl{s}" for s in (".metadata", "", ".sha256")]


# Every write into a tree is a complete temp file renamed over its target: strace, a real tracer
# of the kernel's system calls, logs each rename and can fail or kill the Nth one.
RENAMES = "rename,renameat,renameat2"


def _traced(
    code: str, wheel: Path, tree: Path, log: Path, inject: str | None = None
) -> subprocess.CompletedProcess[str]:
    """*code* run by a Python under strace, which logs its renames to *log* and, with *inject*
    (strace's `error=ENOSPC:when=N` or `signal=KILL:when=N`), fails or kills the Nth."""
    strace = toolchain.require("strace")
    injected = ["-e", f"inject={RENAMES}:{inject}"] if inject else []
    return subprocess.run(
        [strace, "-f", "-qq", "-o", str(log), "-e", f"trace={RENAMES}", "-e", "signal=none", *injected,
         sys.executable, "-c", code, str(wheel), str(tree)],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


_RENAME = re.compile(
    r'rename(?:at2?)?\((?:\w+, )?"[^"]*", (?:\w+, )?"(?P<target>[^"]*)"(?:, \w+)?\)(?P<result>.*)'
)


def _renamed(log: Path, tree: Path) -> list[tuple[str, str | None]]:
    """Each rename the log shows: its target below *tree*, and what it returned (None when the
    process was killed before it returned: strace writes `= ?`)."""
    found = []
    for line in log.read_text().splitlines():
        if match := _RENAME.search(line):
            result = match["result"].strip().removeprefix("=").strip()
            target = Path(match["target"]).relative_to(tree).as_posix()
            found.append((target, None if result == "?" else result))
    return found
