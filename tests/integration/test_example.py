"""The newcomer's path, for real: a fresh copy of the checkout, `scripts/example`, then
`wheelbuild doctor`, `plan` and `gc --dry-run` in the same folder and a shell that set nothing.

scripts/example writes the two settings that make its build work here (the local base image,
torch from PyPI) to wheelbuild.toml's [tool.wheelbuild], where build, plan, doctor and gc all
read them. Its build is stopped before any container by a Python no torch has (`--python 3.8`,
refused as `build` refuses it): the settings, the venv and what the later commands read are
what is checked; the build itself is tested in test_build.py. It also checks the two setups
share one venv: scripts/example's has no test extras, scripts/test's setup adds them to it,
and scripts/example afterwards leaves them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors
import pytest
from wheelbuild.engine.docker_engine import DockerEngine
from wheelbuild.gc import decisions
from wheelbuild.host.ca_bundle import resolve_ca_bundle
from wheelbuild.image import names
from wheelbuild.image.options import ImageOptions, image_inputs

from .conftest import REPO
from .test_gc import _tiny_image

PYPI = "https://pypi.org/simple"
BEGIN = "# >>> scripts/example: this machine's settings"
NO_TORCH_PYTHON = "3.8"  # no cu130 torch has a cp38 wheel: build refuses it before a container
REFUSED = 11  # build's exit code for that (NoMatchingTorch)


@dataclass(frozen=True)
class Clone:
    root: Path
    env: dict[str, str]  # the user's shell: no WHEELBUILD_* set
    first_run: subprocess.CompletedProcess[str]  # scripts/example's, in the fresh copy
    first_had_test_extras: bool  # whether its venv could import pytest right after

    def run(self, *args: str | Path, timeout: float = 600, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(a) for a in args], cwd=self.root, env=self.env | env, capture_output=True, text=True,
            timeout=timeout, check=False,
        )  # fmt: skip

    def wheelbuild(self, *args: str | Path, **env: str) -> subprocess.CompletedProcess[str]:
        return self.run(self.root / ".venv" / "bin" / "wheelbuild", *args, timeout=300, **env)

    def venv_made(self) -> tuple[int, int]:
        """Which venv this is: its pyvenv.cfg's inode and time, new whenever it is made again."""
        made = (self.root / ".venv" / "pyvenv.cfg").stat()
        return made.st_ino, made.st_mtime_ns


def _example(root: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["scripts/example", "--python", NO_TORCH_PYTHON], cwd=root, env=env, capture_output=True,
        text=True, timeout=900, check=False,
    )  # fmt: skip
    assert done.returncode == REFUSED, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def _has_test_extras(root: Path) -> bool:
    check = [str(root / ".venv" / "bin" / "python"), "-c", "import pytest"]
    return subprocess.run(check, capture_output=True, check=False).returncode == 0


def _fresh_copy(tmp_path: Path) -> Path:
    """The checkout as a clone of it would be, with any uncommitted change: the files git tracks
    or would add, never the ignored ones (.venv, wheelhouse/*)."""
    listed = subprocess.run(
        ["git", "-C", REPO, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True, check=False,
    )  # fmt: skip
    if listed.returncode != 0:
        pytest.skip(f"{REPO} is not a git checkout: the newcomer's path starts from a clone")
    root = tmp_path / "clone"
    for name in sorted(set(listed.stdout.decode().split("\0")) - {""}):
        source, target = REPO / name, root / name
        if source.is_symlink() or source.is_file():  # a tracked file deleted here is left out
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target, follow_symlinks=False)
    return root


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory, base_image: str) -> Clone:
    """A fresh copy after scripts/example, once for this module (it makes a real venv)."""
    tmp_path = tmp_path_factory.mktemp("newcomer")
    root = _fresh_copy(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WHEELBUILD_")}
    env |= {"WHEELBUILD_CACHE_DIR": str(tmp_path / "cache"), "NO_COLOR": "1"}
    first = _example(root, env)
    return Clone(root, env, first, _has_test_extras(root))


def test_after_scripts_example_doctor_plan_and_gc_read_what_it_set(
    clone: Clone, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    root = clone.root
    written = (root / "wheelbuild.toml").read_text()
    assert written.startswith((REPO / "wheelbuild.toml").read_text().rstrip("\n"))  # the matrix is kept
    settings = tomllib.loads(written)["tool"]["wheelbuild"]
    base = settings["base-image"]
    assert settings == {"base-image": base, "torch-index-url": PYPI}
    docker_client.images.get(base)  # the local base scripts/setup made or reused
    said = clone.first_run.stdout + clone.first_run.stderr
    assert f'example:   base-image = "{base}"' in said and f'example:   torch-index-url = "{PYPI}"' in said
    assert "options from files: base-image, torch-index-url from wheelbuild.toml" in said
    # Where the time went: its setup, timed, and no build phase (the build stopped before a container).
    lines = clone.first_run.stderr.splitlines()
    at = lines.index("example: where the time went:")
    assert re.fullmatch(r"example:   setup  (\d+ min )?\d+ s", lines[at + 1]), lines[at:]
    assert lines[at + 2] == (
        "example:   build  no times: the build wrote no report (it stopped before its end)"
    )
    assert re.fullmatch(r"example:   total  (\d+ min )?\d+ s", lines[at + 3]), lines[at:]
    # scripts/example's venv: wheelbuild, and none of the test tools.
    assert (root / ".venv" / "bin" / "wheelbuild").is_file() and not clone.first_had_test_extras

    doctor = clone.wheelbuild("doctor", "--json")
    checks = {c["check"]: c for c in json.loads(doctor.stdout)}
    # It passes, unless this machine's free disk, which no setting changes, is under doctor's floor.
    failing = {name for name, check in checks.items() if check["status"] == "fail"}
    assert failing <= {"disk-docker", "disk-cache"}, doctor.stdout
    assert doctor.returncode == (26 if failing else 0), doctor.stderr
    assert checks["torch-index"] == {
        "check": "torch-index", "status": "ok", "found": f"HTTP 200 from {PYPI}/torch/", "remedy": "",
    }  # fmt: skip
    assert checks["base-image"]["status"] == "ok"
    assert checks["base-image"]["found"].startswith(f"wheelbuild.toml's base-image {base} (present here)")

    plan = clone.wheelbuild("plan", "wbdemo", "-v")  # -v: each option's source
    assert plan.returncode == 0, plan.stderr
    sources = {
        line.split()[0]: line.split()[1:] for line in plan.stdout.splitlines() if line.startswith("  ")
    }
    assert sources["base-image"] == [base, "from", "wheelbuild.toml"]
    assert sources["torch-index-url"] == [PYPI, "from", "wheelbuild.toml"]

    # gc counts the image of the example's inputs as current: one of that tag and an older one,
    # under a Docker prefix of this test's own so that gc sees nothing else.
    scope = decisions.Scope(f"wbextest-{secrets.token_hex(4)}")
    options = ImageOptions(base_image=base, ca_bundle=resolve_ca_bundle(None))
    current = scope.retag(image_inputs(DockerEngine(docker_client), options).tag)
    stale = f"{scope.image_repository}:0123456789abcdef"
    try:
        for tag in (current, stale):
            _tiny_image(docker_client, tag, base, scope.prefix)
        swept = clone.wheelbuild(
            "gc", "--dry-run", "--output-dir", tmp_path / "out", **{names.PREFIX_ENV: scope.prefix}
        )
        assert swept.returncode == 0, swept.stdout + swept.stderr
        (kept,) = [line for line in swept.stdout.splitlines() if f" {current} " in line]
        (removed,) = [line for line in swept.stdout.splitlines() if f" {stale} " in line]
        assert kept.startswith("keep") and "the image of the current inputs" in kept, swept.stdout
        assert removed.startswith("would remove image"), swept.stdout
    finally:
        for tag in (current, stale):
            with contextlib.suppress(docker.errors.ImageNotFound):
                docker_client.images.remove(tag, force=True)

    # Run again: the same single table, the same venv.
    made = clone.venv_made()
    again = _example(root, clone.env)
    assert (root / "wheelbuild.toml").read_text() == written and written.count(BEGIN) == 1
    assert clone.venv_made() == made and "creating .venv" not in again.stderr


def test_scripts_test_setup_adds_the_test_extras_and_scripts_example_keeps_them(clone: Clone) -> None:
    made = clone.venv_made()
    tests = clone.run("scripts/setup", "--tests")  # what scripts/test runs first
    assert tests.returncode == 0, tests.stderr
    assert not clone.first_had_test_extras and "adding wheelbuild's [test] extras" in tests.stderr
    assert _has_test_extras(clone.root) and clone.venv_made() == made

    again = _example(clone.root, clone.env)
    assert "creating .venv" not in again.stderr and "adding" not in again.stderr
    assert _has_test_extras(clone.root) and clone.venv_made() == made


def test_scripts_example_leaves_a_users_own_table_and_prints_the_exports_instead(clone: Clone) -> None:
    config = clone.root / "wheelbuild.toml"
    written = config.read_text()
    own = '[tool.wheelbuild]\nmemory = "8g"\n'
    config.write_text(own)
    try:
        done = _example(clone.root, clone.env)
        assert config.read_text() == own
        said = done.stderr.splitlines()
        assert f"example: {config.name} has a [tool.wheelbuild] table of its own; left as it is" in said
        base = tomllib.loads(written)["tool"]["wheelbuild"]["base-image"]
        assert said[-3:] == [
            "example: this build used these settings; for doctor, gc and build to use them too, run:",
            f"export WHEELBUILD_BASE_IMAGE={base}",
            f"export WHEELBUILD_TORCH_INDEX_URL={PYPI}",
        ]
        assert "options from files: memory from wheelbuild.toml" in done.stdout + done.stderr
    finally:
        config.write_text(written)
