"""images/wheelbuild-ninja and the launcher before-build writes for it, run with the real ninja
(the build image's version, from the test extras): the build file's compiles start longest
predicted first, as builder.plan.memory_model.launch_order predicts them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.test_attempt_scripts import _before_build_env, _run
from tests.unit.test_ninja_order import SCRIPT


def _real_ninja() -> str:
    beside = Path(sys.executable).parent / "ninja"
    found = str(beside) if beside.exists() else shutil.which("ninja")
    if found is None:
        pytest.fail("no ninja: `pip install -e '.[test]'` installs the image's version")
    return found


def _project(directory: Path, sources: list[str]) -> None:
    """A build file like torch's: one compile per source in this order, then a link. Each
    command appends its source's name to started.log, so the log is the launch order at -j1."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in sources:
        (directory / name).write_text(name)
    builds = [f"build {Path(n).stem}.o: compile $root/{n}" for n in sources]
    objects = " ".join(f"{Path(n).stem}.o" for n in sources)
    (directory / "build.ninja").write_text(
        "ninja_required_version = 1.3\n"
        f"root = {directory}\n\n"
        "rule compile\n"
        "  command = echo $in >> started.log && cp $in $out\n\n"
        "rule link\n"
        "  command = cat $in > $out\n\n"
        + "\n".join(builds)
        + f"\n\nbuild ext.so: link {objects}\n\ndefault ext.so\n"
    )


def _started(directory: Path) -> list[str]:
    return [Path(line).name for line in (directory / "started.log").read_text().split()]


def _order(seconds: dict[str, float]) -> dict[str, str]:
    return {"WHEELBUILD_NINJA_ORDER": json.dumps({"seconds": seconds})}


def _run_shim(directory: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), _real_ninja(), *args],
        cwd=directory,
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_ninja_starts_the_named_compiles_longest_first_and_leaves_the_rest_in_place(tmp_path: Path) -> None:
    _project(tmp_path, ["binding.cpp", "short.cu", "long.cu", "middle.cu"])
    done = _run_shim(tmp_path, "-j1", env=_order({"short.cu": 10.0, "long.cu": 300.0, "middle.cu": 40.0}))
    assert done.returncode == 0, done.stdout + done.stderr
    # binding.cpp has no predicted time: it keeps its place, first.
    assert _started(tmp_path) == ["binding.cpp", "long.cu", "middle.cu", "short.cu"]
    assert (tmp_path / "ext.so").read_text() == "binding.cppshort.culong.cumiddle.cu"  # the link's own order
    again = _run_shim(tmp_path, "-j1", env=_order({"short.cu": 10.0, "long.cu": 300.0, "middle.cu": 40.0}))
    assert "no work to do" in again.stdout  # the rewritten file means the same build


def test_without_an_order_or_for_a_tool_the_build_file_is_not_touched(tmp_path: Path) -> None:
    _project(tmp_path, ["a.cu", "b.cu"])
    before = (tmp_path / "build.ninja").read_text()
    version = _run_shim(tmp_path, "--version", env=_order({"b.cu": 9.0}))
    assert version.returncode == 0 and version.stdout.startswith("1.13.0")
    targets = _run_shim(tmp_path, "-t", "targets", env=_order({"b.cu": 9.0}))
    assert targets.returncode == 0 and "ext.so" in targets.stdout
    assert (tmp_path / "build.ninja").read_text() == before
    plain = _run_shim(tmp_path, "-j1", env={})
    assert plain.returncode == 0 and _started(tmp_path) == ["a.cu", "b.cu"]


def test_a_bad_order_warns_and_ninja_still_builds_in_the_files_order(tmp_path: Path) -> None:
    _project(tmp_path, ["a.cu", "b.cu"])
    done = _run_shim(tmp_path, "-j1", env={"WHEELBUILD_NINJA_ORDER": "{not json"})
    assert done.returncode == 0
    assert "wheelbuild-ninja: left build.ninja in its own order (JSONDecodeError" in done.stderr
    assert _started(tmp_path) == ["a.cu", "b.cu"]


def test_the_directory_and_file_options_find_the_build_file(tmp_path: Path) -> None:
    _project(tmp_path / "out", ["a.cu", "b.cu"])
    (tmp_path / "out" / "build.ninja").rename(tmp_path / "out" / "other.ninja")
    done = _run_shim(tmp_path, "-C", "out", "-fother.ninja", "-j1", env=_order({"a.cu": 1.0, "b.cu": 2.0}))
    assert done.returncode == 0, done.stdout + done.stderr
    assert _started(tmp_path / "out") == ["b.cu", "a.cu"]


@pytest.mark.parametrize("where", ["venv", "path"])
def test_before_build_puts_the_ordering_launcher_ahead_of_the_real_ninja(tmp_path: Path, where: str) -> None:
    """before-build (with stand-ins for the wheel cache and torch, as in test_attempt_scripts)
    writes bin/ninja into the build's venv; the `ninja` torch then runs is the launcher, which
    orders the file and runs the real ninja, whether that was in the venv or further on PATH."""
    env, _, script = _before_build_env(tmp_path)
    shutil.copy(SCRIPT, Path(script).parent / SCRIPT.name)  # mounted beside before-build
    venv_bin = tmp_path / "bin"  # holds the build's `python`
    if where == "venv":
        (venv_bin / "ninja").symlink_to(_real_ninja())
    else:
        tools = tmp_path / "tools"
        tools.mkdir()
        (tools / "ninja").symlink_to(_real_ninja())
        env["PATH"] = f"{venv_bin}:{tools}:{env['PATH']}"
    env |= _order({"a.cu": 1.0, "b.cu": 2.0})
    done = _run("sh", script, "torch==2.11.0", "2.11", "13", "0123abcd", env=env)
    assert done.returncode == 0, done.stderr
    assert "wheelbuild-ninja" in (venv_bin / "ninja").read_text()
    project = tmp_path / "project"
    _project(project, ["a.cu", "b.cu"])
    built = subprocess.run(
        ["ninja", "-j1"], cwd=project, env=env, capture_output=True, text=True, check=False
    )
    assert built.returncode == 0, built.stdout + built.stderr
    assert _started(project) == ["b.cu", "a.cu"]
    # before-build again (a retry in the same venv) keeps one launcher over the same real ninja
    assert _run("sh", script, "torch==2.11.0", "2.11", "13", "0123abcd", env=env).returncode == 0
    rebuilt = subprocess.run(["ninja", "-t", "targets"], cwd=project, env=env, capture_output=True, text=True)
    assert rebuilt.returncode == 0 and "ext.so" in rebuilt.stdout
