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
  printf '#!/bin/sh\\necho "pip $*" >> {log}\\n' > "$3/bin/pip"
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
