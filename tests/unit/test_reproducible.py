"""Bit-identical wheels, without Docker: the stamp writes the same zip from the same members
whatever wrote the wheel before it (its entries' dates, order and permissions), the date comes
from the inputs (an sdist's newest file, a checkout's last commit, else the zip epoch), and
`wheelbuild diff` names where two wheels differ: the member and, for a shared object compiled
here with gcc, the ELF section. tests/integration/test_reproducible.py builds the example for real."""

from __future__ import annotations

import hashlib
import subprocess
import tarfile
import time
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from wheelbuild.cli.main import main
from wheelbuild.errors import WheelsDiffer
from wheelbuild.spec.sources import ZIP_EPOCH, PreparedSource, source_date
from wheelbuild.variants import parse_variant
from wheelbuild.wheel.diff import first_difference
from wheelbuild.wheel.stamp import stamp_wheel

from tests.indexkit import make_wheel
from tests.toolchain import require

VARIANT = parse_variant("2.14.1+cu130")
EPOCH = 1_700_000_000


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _rewritten(
    wheel: Path, dest: Path, *, when: tuple[int, int, int, int, int, int], reverse: bool, mode: int
) -> Path:
    """The same members as another tool would zip them: other dates, order and permissions."""
    dest.mkdir(parents=True)
    out = dest / wheel.name
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        infos = source.infolist()
        for info in reversed(infos) if reverse else infos:
            clone = zipfile.ZipInfo(info.filename, date_time=when)
            clone.external_attr = mode << 16
            target.writestr(clone, source.read(info))
    return out


def test_the_same_members_zipped_otherwise_are_stamped_to_the_same_bytes(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "made", "wbtiny", "0.1.0", tag="cp311-cp311-linux_x86_64")
    one = _rewritten(wheel, tmp_path / "a", when=(2026, 1, 2, 3, 4, 6), reverse=False, mode=0o100664)
    two = _rewritten(wheel, tmp_path / "b", when=(2027, 5, 6, 7, 8, 10), reverse=True, mode=0o100600)
    assert _sha(one) != _sha(two)
    stamped = [stamp_wheel(w, VARIANT, date_epoch=EPOCH) for w in (one, two)]
    assert _sha(stamped[0]) == _sha(stamped[1])
    with zipfile.ZipFile(stamped[0]) as archive:
        infos = archive.infolist()
    assert {i.date_time for i in infos} == {time.gmtime(EPOCH)[:6]}
    assert {(i.external_attr >> 16) & 0o777 for i in infos} == {0o644}
    names = [i.filename for i in infos]
    assert names[-1].endswith(".dist-info/RECORD") and names[0] == "wbtiny/__init__.py"
    # Without a date (an older caller) the entries stay as they were.
    kept = stamp_wheel(
        _rewritten(wheel, tmp_path / "c", when=(2026, 1, 2, 3, 4, 6), reverse=True, mode=0o100600), VARIANT
    )
    with zipfile.ZipFile(kept) as archive:
        assert {i.date_time for i in archive.infolist()} == {(2026, 1, 2, 3, 4, 6)}


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


def test_diff_of_the_same_members_differently_dated_says_so(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "made", "wbtiny", "0.1.0", tag="cp311-cp311-linux_x86_64")
    one = _rewritten(wheel, tmp_path / "a", when=(2026, 1, 2, 3, 4, 6), reverse=False, mode=0o100644)
    two = _rewritten(wheel, tmp_path / "b", when=(2027, 1, 2, 3, 4, 6), reverse=False, mode=0o100644)
    found = first_difference(one, two)
    assert (
        found is not None
        and found.what == "same bytes, dated (2026, 1, 2, 3, 4, 6) and (2027, 1, 2, 3, 4, 6)"
    )
    with pytest.raises(ValueError):
        first_difference(one, tmp_path / "made" / "not-there.whl") if False else first_difference(
            one, _broken(tmp_path)
        )


def _broken(tmp_path: Path) -> Path:
    path = tmp_path / "broken.whl"
    path.write_bytes(b"PK not a zip")
    return path
