"""scripts/setup: what building needs (scripts/example) and, with --tests, the test tools as well
(scripts/test), both in one venv that neither command rebuilds for the other.

The real scripts/setup runs in a copy of the checkout's scripts/ and pyproject.toml. What it
would change on this shared machine is stood in for, and said here: apt-get records what it
was asked to install (the tools are hidden from PATH, so setup believes them missing), `id`
says root (setup installs packages only as root), the Docker and base-image steps are the
stubs test_workflow.py uses for scripts/nightly, and the interpreter makes a venv whose pip
records its arguments (a real venv with the test extras takes minutes and the network:
tests/integration/test_example.py makes real ones, through scripts/example and scripts/test).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.clikit import REPO

# What the test tools are found as; hidden from setup's PATH so that it must ask for them.
TEST_TOOLS = ("gcc", "g++", "objdump", "rsync", "ssh", "ssh-keygen", "strace", "chromium", "chromium-browser")
TEST_PACKAGES = {"gcc", "g++", "binutils", "rsync", "openssh-client", "strace", "chromium"}


@dataclass(frozen=True)
class Checkout:
    root: Path
    bin: Path
    log: Path

    def setup(self, *args: str) -> subprocess.CompletedProcess[str]:
        self.log.write_text("")
        env = {k: v for k, v in os.environ.items() if not k.startswith("WHEELBUILD_")}
        env |= {"PATH": str(self.bin), "PYTHON": str(self.bin / "stub-python")}
        done = subprocess.run(
            [self.root / "scripts" / "setup", *args],
            cwd=self.root, env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[-1] == "export WHEELBUILD_BASE_IMAGE=wheelbuild-base:stub"
        return done

    def calls(self, tool: str) -> list[str]:
        """Each call of `tool` (apt-get, pip, venv) since the last setup, as its argument line."""
        lines = self.log.read_text().splitlines()
        return [line.split(" ", 1)[1] for line in lines if line.split(" ", 1)[0] == tool]

    def apt_packages(self) -> set[str]:
        words = {word for call in self.calls("apt-get") for word in call.split()}
        return {word for word in words if not word.startswith("-")} - {"install", "update"}

    @property
    def stamp(self) -> str:
        return (self.root / ".venv" / ".wheelbuild-stamp").read_text().strip()


def _script(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


def _checkout(tmp_path: Path) -> Checkout:
    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "setup", root / "scripts" / "setup")
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    _script(root / "scripts" / "install-docker", "#!/bin/sh\nexit 0\n")
    _script(root / "scripts" / "make-base-image", "#!/bin/sh\necho wheelbuild-base:stub\n")
    log = tmp_path / "calls.log"
    stubs = tmp_path / "bin"
    stubs.mkdir()
    # Every command on PATH but the test tools and the two stood in for, first one of a name wins.
    for folder in os.environ["PATH"].split(os.pathsep):
        if not os.path.isdir(folder):
            continue
        for entry in os.scandir(folder):
            target = stubs / entry.name
            if entry.name in (*TEST_TOOLS, "apt-get", "id") or target.exists() or target.is_symlink():
                continue
            if entry.is_file() and os.access(entry.path, os.X_OK):
                target.symlink_to(entry.path)
    _script(stubs / "apt-get", f'#!/bin/sh\necho "apt-get $*" >> {log}\n')
    _script(stubs / "id", "#!/bin/sh\necho 0\n")
    # The interpreter setup makes the venv with: a venv whose python is real and whose pip records.
    _script(
        stubs / "stub-python",
        f"""#!/bin/sh
if [ "$1 $2" = "-m venv" ] && [ "$3" != "--help" ]; then
  mkdir -p "$3/bin"
  ln -s {sys.executable} "$3/bin/python"
  printf '#!/bin/sh\\necho "pip $*" >> {log}\\n[ ! -x {log}.pip-hook ] || exec {log}.pip-hook "$@"\\n' > "$3/bin/pip"
  chmod +x "$3/bin/pip"
  echo "venv $3" >> {log}
  exit 0
fi
exec {sys.executable} "$@"
""",
    )
    return Checkout(root, stubs, log)


def test_setup_for_building_installs_no_test_tool_and_setup_for_tests_adds_them(tmp_path: Path) -> None:
    checkout = _checkout(tmp_path)

    checkout.setup()  # scripts/example's setup: the venv with wheelbuild alone
    assert checkout.calls("apt-get") == []
    assert checkout.calls("venv") == [".venv"]
    assert checkout.calls("pip") == ["install -q --upgrade pip", "install -q -e ."]

    checkout.setup("--tests")  # scripts/test's: the tools, and the extras added to the same venv
    assert checkout.apt_packages() == TEST_PACKAGES
    assert checkout.calls("venv") == []
    assert checkout.calls("pip") == ["install -q -e .[test]"]


def test_example_and_test_setups_share_one_venv_and_never_undo_each_other(tmp_path: Path) -> None:
    checkout = _checkout(tmp_path)
    checkout.setup("--tests")
    assert checkout.calls("pip") == ["install -q --upgrade pip", "install -q -e .[test]"]
    hashed = checkout.stamp.split()[0]
    assert checkout.stamp == f"{hashed} test"

    for args in ((), ("--tests",), ()):  # scripts/example, scripts/test, scripts/example again
        checkout.setup(*args)
        assert checkout.calls("venv") == [] and checkout.calls("pip") == [], args
        assert checkout.stamp == f"{hashed} test", args

    # A changed pyproject.toml rebuilds the venv once, with the extras it held.
    with (checkout.root / "pyproject.toml").open("a") as pyproject:
        pyproject.write("\n# changed\n")
    checkout.setup()
    assert checkout.calls("venv") == [".venv"]
    assert checkout.calls("pip") == ["install -q --upgrade pip", "install -q -e .[test]"]
    assert checkout.stamp.endswith(" test") and checkout.stamp.split()[0] != hashed


def test_setup_refuses_an_unknown_argument(tmp_path: Path) -> None:
    checkout = _checkout(tmp_path)
    done = subprocess.run(
        [checkout.root / "scripts" / "setup", "--test"], cwd=checkout.root,
        env={**os.environ, "PATH": str(checkout.bin)}, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip() == "setup: unknown argument --test; usage: scripts/setup [--tests]"
    assert checkout.log.exists() is False  # nothing was installed or made


def _setup_failing(checkout: Checkout) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WHEELBUILD_")}
    env |= {"PATH": str(checkout.bin), "PYTHON": str(checkout.bin / "stub-python")}
    return subprocess.run(
        [checkout.root / "scripts" / "setup"], cwd=checkout.root, env=env, capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip


def test_the_venv_is_made_while_the_base_image_is(tmp_path: Path) -> None:
    checkout = _checkout(tmp_path)
    # The base image finishes only once wheelbuild's pip install has begun: setup waiting for
    # the base before it starts the venv would fail here after 20 s instead of passing.
    _script(
        checkout.root / "scripts" / "make-base-image",
        f"""#!/bin/sh
for _ in $(seq 200); do grep -qx 'pip install -q -e .' {checkout.log} && break; sleep 0.1; done
grep -qx 'pip install -q -e .' {checkout.log} || {{ echo "no pip install yet" >&2; exit 1; }}
echo "make-base-image: done" >&2
echo wheelbuild-base:stub
""",
    )
    done = checkout.setup()
    assert checkout.calls("pip") == ["install -q --upgrade pip", "install -q -e ."]
    assert "setup: creating .venv (while the base image is made)..." in done.stderr
    assert checkout.stamp.split()[0]


def test_a_failed_pip_install_fails_setup_with_its_exit_code_and_output_and_no_stamp(tmp_path: Path) -> None:
    checkout = _checkout(tmp_path)
    _script(
        Path(f"{checkout.log}.pip-hook"),
        '#!/bin/sh\ncase "$*" in *-e*) echo "pip: no network" >&2; exit 3;; esac\n',
    )
    done = _setup_failing(checkout)
    assert done.returncode == 3, done.stderr
    assert "pip: no network" in done.stderr
    assert "setup: making .venv failed (exit 3; its output is above)" in done.stderr
    assert "export WHEELBUILD_BASE_IMAGE" not in done.stdout
    assert not (checkout.root / ".venv" / ".wheelbuild-stamp").exists()  # the next setup tries again


def test_a_failed_base_image_fails_setup_and_stops_the_pip_install_under_way(tmp_path: Path) -> None:
    checkout = _checkout(tmp_path)
    pid_file = tmp_path / "pip.pid"
    # wheelbuild's pip install runs for a minute; the base image fails as soon as it has begun.
    _script(
        Path(f"{checkout.log}.pip-hook"),
        f'#!/bin/sh\ncase "$*" in *-e*) echo $$ > {pid_file}; exec sleep 60;; esac\n',
    )
    _script(
        checkout.root / "scripts" / "make-base-image",
        f"""#!/bin/sh
for _ in $(seq 200); do [ -s {pid_file} ] && break; sleep 0.1; done
echo "make-base-image: debootstrap failed" >&2
exit 4
""",
    )
    done = _setup_failing(checkout)
    assert done.returncode == 4, done.stderr
    assert "make-base-image: debootstrap failed" in done.stderr
    assert not (checkout.root / ".venv" / ".wheelbuild-stamp").exists()
    pip = int(pid_file.read_text())
    for _ in range(50):  # stopped by setup on its way out, not left to run on
        try:
            os.kill(pip, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.kill(pip, 9)
        raise AssertionError("setup left its pip install running after the base image failed")
