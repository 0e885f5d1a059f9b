"""Bit-identical wheels, without Docker: the stamp writes the same zip from the same members
whatever wrote the wheel before it (its entries' dates, order and permissions), the date comes
from the inputs (an sdist's newest file, a checkout's last commit, else the zip epoch), and
`wheelbuild diff` names where two wheels differ: the member and, for a shared object compiled
here with gcc, the ELF section. tests/integration/test_reproducible.py builds the example for real."""

from __future__ import annotations

import hashlib
import os
import time
import zipfile
from pathlib import Path

import pytest
from wheelbuild.variants import parse_variant
from wheelbuild.wheel.diff import first_difference
from wheelbuild.wheel.stamp import stamp_wheel

from tests.indexkit import make_wheel

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


@pytest.mark.parametrize("kind", ["fifo", "link to /dev/zero"])
def test_diff_of_a_fifo_or_a_device_named_like_a_wheel_is_refused_at_once(tmp_path: Path, kind: str) -> None:
    """They used to block forever (a FIFO) or spin at 100% CPU (/dev/zero)."""
    wheel = make_wheel(tmp_path / "made", "wbtiny", "0.1.0", tag="cp311-cp311-linux_x86_64")
    hostile = tmp_path / "wbtiny-0.1.0-cp311-cp311-linux_x86_64.whl"
    if kind == "fifo":
        os.mkfifo(hostile)
    else:
        hostile.symlink_to("/dev/zero")
    with pytest.raises(ValueError, match=r"not a regular file"):
        first_difference(wheel, hostile)
