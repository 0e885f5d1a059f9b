"""Bit-identical wheels, without Docker: the stamp writes the same zip from the same members
whatever wrote the wheel before it (its entries' dates, order and permissions), the date comes
from the inputs (an sdist's newest file, a checkout's last commit, else the zip epoch), and
`wheelbuild diff` names where two wheels differ: the member and, for a shared object compiled
here with gcc, the ELF section. tests/integration/test_reproducible.py builds the example for real."""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

from click.testing import CliRunner
from wheelbuild.cli.main import main
from wheelbuild.errors import WheelsDiffer
from wheelbuild.spec.sources import ZIP_EPOCH, PreparedSource, source_date
from wheelbuild.wheel.diff import first_difference

from tests.indexkit import make_wheel
from tests.toolchain import require


def test_the_date_comes_from_the_inputs(tmp_path: Path) -> None:
    sdist = tmp_path / "pkg-1.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as archive:
        for name, mtime in (("pkg-1.0/setup.py", 1_650_000_000), ("pkg-1.0/PKG-INFO", 1_690_000_000)):
            data = tmp_path / "data"
            data.write_text("x")
            info = archive.gettarinfo(str(data), arcname=name)
            info.mtime = mtime
            archive.addfile(info, data.open("rb"))
    found = source_date(PreparedSource(project_dir=tmp_path, package=sdist.name))
    assert (found.epoch, found.why) == (1_690_000_000, "the newest file in pkg-1.0.tar.gz")

    project = tmp_path / "checkout" / "ext"
    project.mkdir(parents=True)
    (project / "setup.py").write_text("")
    git = ["git", "-C", str(project), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run(
        [*git, "commit", "-qm", "x"],
        check=True,
        env={"GIT_COMMITTER_DATE": "@1600000000 +0000", "PATH": "/usr/bin:/bin"},
    )
    found = source_date(PreparedSource(project_dir=project, package="."))
    assert found.epoch == 1_600_000_000 and found.why.startswith("the last commit of ext/ (")

    bare = tmp_path / "bare"
    bare.mkdir()
    assert source_date(PreparedSource(project_dir=bare, package=".")).epoch == ZIP_EPOCH


SOURCE = "int answer(void) { return %d; }\n"


def _so(tmp_path: Path, name: str, value: int) -> bytes:
    src = tmp_path / f"{name}.c"
    src.write_text(SOURCE % value)
    out = tmp_path / f"{name}.so"
    subprocess.run([require("gcc"), "-shared", "-fPIC", "-o", str(out), str(src)], check=True)
    return out.read_bytes()


def test_diff_names_the_member_and_the_elf_section_where_two_wheels_differ(tmp_path: Path) -> None:
    member = "wbtiny/_k.cpython-311-x86_64-linux-gnu.so"
    a = make_wheel(
        tmp_path / "a",
        "wbtiny",
        "0.1.0",
        tag="cp311-cp311-linux_x86_64",
        extra_files={member: _so(tmp_path, "a", 41)},
    )
    b = make_wheel(
        tmp_path / "b",
        "wbtiny",
        "0.1.0",
        tag="cp311-cp311-linux_x86_64",
        extra_files={member: _so(tmp_path, "b", 42)},
    )
    found = first_difference(a, b)
    assert found is not None and found.member == member
    assert found.what.startswith("ELF section .text: ")
    assert first_difference(a, a) is None

    done = CliRunner().invoke(main, ["diff", str(a), str(b)])
    assert done.exit_code == WheelsDiffer.exit_code
    assert f"differ: {member}: ELF section .text" in done.output
    same = CliRunner().invoke(main, ["diff", str(a), str(a)])
    assert same.exit_code == 0 and "are the same bytes" in same.output
