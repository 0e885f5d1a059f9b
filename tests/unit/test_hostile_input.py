"""Hostile input, from an attacker's review (issue 10): zip bombs and odd zips, damaged build
reports, empty and non-finite values, option injection through `--to`, and what each command
says about them. Every refusal is a typed error with a cause and a remedy, never a traceback."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import struct
import subprocess
import tracemalloc
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from packaging.version import Version
from wheelbuild.cli.main import main
from wheelbuild.errors import (
    BadArgument,
    BadMemory,
    IndexWriteFailed,
    InvalidWheel,
    NotPublished,
    WheelArchiveAmbiguous,
    WheelConflict,
)
from wheelbuild.index import remote
from wheelbuild.index import serve as serving
from wheelbuild.index import tree as index_tree
from wheelbuild.index.publish import Sidecars, publish
from wheelbuild.index.remote import RsyncTarget, parse_target
from wheelbuild.index.yank import unyank, yank
from wheelbuild.pipeline.check import (
    check_wheels,
    describe_gate,
    gate_verdict,
    inputs_key_beside,
    inspect_or_refuse,
)
from wheelbuild.units import parse_memory
from wheelbuild.variants import parse_variant
from wheelbuild.wheel.contents import UnsafeMember, inspect_wheel
from wheelbuild.wheel.stamp import stamp_wheel

from tests.indexkit import make_wheel, set_compression_method

NAME = "wbtiny-0.1.0+cu130torch2.11-py3-none-any.whl"
METADATA = "wbtiny-0.1.0+cu130torch2.11.dist-info/METADATA"


# A tag an extension module may carry (a py3-none-any wheel holding one is refused for its tag).
LINUX = "cp311-cp311-linux_x86_64"


def _deflated(
    directory: Path,
    members: dict[str, bytes],
    version: str = "0.1.0+cu130torch2.11",
    tag: str = "py3-none-any",
) -> Path:
    """A wheel like make_wheel's, every member deflated, with *members* replaced or added."""
    source = make_wheel(directory / "src", version=version, tag=tag)
    path = directory / source.name
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as new:
        for info in old.infolist():
            new.writestr(info.filename, members.pop(info.filename, b"") or old.read(info))
        for name, data in members.items():
            new.writestr(name, data)
    return path


def _metadata_bomb(directory: Path, size: int) -> Path:
    """METADATA that inflates to *size* bytes (a long run of spaces after real headers)."""
    head = b"Metadata-Version: 2.1\nName: wbtiny\nVersion: 0.1.0+cu130torch2.11\nSummary: "
    return _deflated(directory, {METADATA: head + b" " * (size - len(head)) + b"\n\n"})


def _declare_size(path: Path, member: str, size: int, *, local_too: bool = False) -> None:
    """Rewrite the uncompressed size the central directory declares for *member* (and its local
    header, with *local_too*: the two then agree, and only the size lies)."""
    data = bytearray(path.read_bytes())
    at = data.find(b"PK\x01\x02")
    while at != -1:
        length = struct.unpack_from("<H", data, at + 28)[0]
        if data[at + 46 : at + 46 + length] == member.encode():
            struct.pack_into("<I", data, at + 24, size)
            if local_too:
                local = struct.unpack_from("<I", data, at + 42)[0]
                struct.pack_into("<I", data, local + 22, size)
        at = data.find(b"PK\x01\x02", at + 4)
    path.write_bytes(bytes(data))


# -- 1. a wheel is untrusted input --------------------------------------------------------------


def test_a_metadata_bomb_is_refused_unread_and_nothing_is_published(tmp_path: Path) -> None:
    bomb = _metadata_bomb(tmp_path / "in", 64 * 1024**2)
    assert bomb.stat().st_size < 1024**2  # 64 MiB inflate from well under 1 MiB
    tracemalloc.start()
    try:
        with pytest.raises(InvalidWheel) as refused:
            publish([bomb], tmp_path / "cu130")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 1024**2  # nothing near the 64 MiB was read
    assert "METADATA" in refused.value.cause and "over the cap" in refused.value.cause
    assert refused.value.exit_code == 52
    assert not (tmp_path / "cu130" / "files").exists()


def test_metadata_a_little_over_the_cap_is_refused_by_inspect_and_read_wheel(tmp_path: Path) -> None:
    bomb = _metadata_bomb(tmp_path, 1024**2 + 1)
    with pytest.raises(InvalidWheel, match=r"METADATA.*over the cap"):
        inspect_or_refuse(bomb)
    with pytest.raises(InvalidWheel, match=r"METADATA.*over the cap"):
        index_tree.read_wheel(bomb)


def test_metadata_whose_size_header_lies_is_refused(tmp_path: Path) -> None:
    wheel = _metadata_bomb(tmp_path, 4 * 1024**2)
    _declare_size(wheel, METADATA, 100, local_too=True)  # says 100 bytes, holds 4 MiB
    with pytest.raises(InvalidWheel):
        index_tree.read_wheel(wheel)
    with pytest.raises(InvalidWheel):
        inspect_or_refuse(wheel)
    _declare_size(wheel, METADATA, 99)  # and the central directory says another size than the local header
    with pytest.raises(
        WheelArchiveAmbiguous, match=r"the local header of '[^']*/METADATA' gives another CRC or size"
    ):
        index_tree.read_wheel(wheel)


def test_an_extension_module_over_the_ratio_cap_is_refused(tmp_path: Path) -> None:
    wheel = _deflated(
        tmp_path, {"wbtiny/_C.so": bytes(8 * 1024**2)}, tag=LINUX
    )  # 8 MiB of zeros: about 8 KiB
    with pytest.raises(InvalidWheel, match=r"wbtiny/_C.so.*compression ratio over the cap"):
        inspect_or_refuse(wheel)


def test_an_extension_module_declaring_over_2_gib_is_refused_unread(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, tag=LINUX, extra_files={"wbtiny/_C.so": b"\x7fELF"})
    _declare_size(wheel, "wbtiny/_C.so", 3 * 1024**3, local_too=True)
    with pytest.raises(InvalidWheel, match=r"wbtiny/_C.so: 3221225472 bytes uncompressed, over the cap"):
        inspect_or_refuse(wheel)


def _elf_with_a_section_past_any_offset() -> bytes:
    """128 bytes of ELF64 whose one section is compressed (SHF_COMPRESSED) at offset 2**63 + 1:
    pyelftools raises OverflowError on it, not ELFError."""
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
    header = ident + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, 64, 0, 64, 56, 0, 64, 1, 0)
    return header + struct.pack("<IIQQQQIIQQ", 0, 1, 0x800, 0, 2**63 + 1, 0, 0, 0, 1, 0)


def test_an_extension_module_that_breaks_the_elf_reader_is_an_invalid_wheel(tmp_path: Path) -> None:
    wheel = make_wheel(
        tmp_path, tag=LINUX, extra_files={"wbtiny/_C.so": _elf_with_a_section_past_any_offset()}
    )
    with pytest.raises(InvalidWheel, match=r"not a readable ELF file"):
        inspect_or_refuse(wheel)


def test_metadata_under_an_unknown_compression_method_is_an_invalid_wheel(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path)
    set_compression_method(wheel, METADATA, 99)
    with pytest.raises(InvalidWheel, match="compression method 99"):
        inspect_or_refuse(wheel)
    with pytest.raises(InvalidWheel, match="compression method 99"):
        index_tree.read_wheel(wheel)


def test_an_extension_module_under_an_unknown_compression_method_is_an_invalid_wheel(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, tag=LINUX, extra_files={"wbtiny/_C.so": b"\x7fELF not really"})
    set_compression_method(wheel, "wbtiny/_C.so", 99)
    with pytest.raises(InvalidWheel, match="compression method 99"):
        inspect_or_refuse(wheel)


def test_stamp_refuses_a_record_over_its_cap(tmp_path: Path) -> None:
    record = "wbtiny-0.1.0.dist-info/RECORD"
    with zipfile.ZipFile(make_wheel(tmp_path / "plain", version="0.1.0")) as plain:
        rows = plain.read(record)
    wheel = _deflated(tmp_path, {record: rows + b"\n" * (17 * 1024**2)}, version="0.1.0")
    with pytest.raises(UnsafeMember, match=r"RECORD: .* over the cap"):
        stamp_wheel(wheel, parse_variant("2.11.0+cu130"))


# -- 1b. a wheel an installer would refuse (or install where it must not) -------------------------

DIST_INFO = "wbtiny-0.1.0+cu130torch2.11.dist-info"
RECORD = f"{DIST_INFO}/RECORD"
Members = dict[str, bytes]


def _with_record(members: Members) -> Members:
    """*members* with a RECORD that tells the truth about each of them."""
    rows = [f"{path},{_record_hash(data)},{len(data)}\n" for path, data in members.items() if path != RECORD]
    return {**members, RECORD: "".join([*rows, f"{RECORD},,\n"]).encode()}


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _renamed_dist_info(members: Members, folder: str) -> Members:
    return {name.replace(DIST_INFO, folder): data for name, data in members.items()}


def _lying_record(members: Members, row: str) -> Members:
    """A RECORD whose line for the module says *row* instead of the truth."""
    lines = _with_record(members)[RECORD].decode().splitlines()
    told = [row if line.startswith("wbtiny/__init__.py,") else line for line in lines]
    return {**members, RECORD: ("\n".join(told) + "\n").encode()}


def _metadata(members: Members, text: bytes) -> Members:
    return _with_record({**members, f"{DIST_INFO}/METADATA": text})


UNINSTALLABLE: dict[str, tuple[Callable[[Members], Members], str]] = {
    "no WHEEL": (
        lambda m: _with_record({k: v for k, v in m.items() if not k.endswith("/WHEEL")}),
        f"it has no {DIST_INFO}/WHEEL",
    ),
    "WHEEL of another major version": (
        lambda m: _with_record({**m, f"{DIST_INFO}/WHEEL": b"Wheel-Version: 2.0\n\n"}),
        "Wheel-Version 2.0",
    ),
    "no RECORD": (lambda m: {k: v for k, v in m.items() if k != RECORD}, f"it has no {RECORD}"),
    "an absolute member": (lambda m: _with_record({**m, "/etc/evil.pth": b"import os"}), "an absolute path"),
    "a member up two folders": (lambda m: _with_record({**m, "../../evil.py": b"x"}), "a '..' in its path"),
    "a dist-info of another name": (
        lambda m: _renamed_dist_info(_with_record(m), "evil-0.1.0+cu130torch2.11.dist-info"),
        "is not that of wbtiny",
    ),
    "a second dist-info": (
        lambda m: _with_record({**m, "evil-1.0.dist-info/entry_points.txt": b"[console_scripts]\n"}),
        "2 .dist-info folders",
    ),
    "a member RECORD does not list": (
        lambda m: {**_with_record(m), "wbtiny/extra.py": b"x = 1\n"},
        "does not list 'wbtiny/extra.py'",
    ),
    "a RECORD hash that lies": (
        lambda m: _lying_record(
            m, f"wbtiny/__init__.py,{_record_hash(b'other bytes')},{len(m['wbtiny/__init__.py'])}"
        ),
        "hash of 'wbtiny/__init__.py' is not that of its bytes",
    ),
    "a RECORD size that lies": (
        lambda m: _lying_record(m, f"wbtiny/__init__.py,{_record_hash(m['wbtiny/__init__.py'])},1"),
        "says 'wbtiny/__init__.py' has 1 bytes",
    ),
    "an md5 in RECORD": (
        lambda m: _lying_record(m, "wbtiny/__init__.py,md5=AAAA,1"),
        "gives 'wbtiny/__init__.py' no sha256",
    ),
    "METADATA that is not UTF-8": (
        lambda m: _metadata(m, m[f"{DIST_INFO}/METADATA"].replace(b"Summary: a", b"Summary: \xff\xfe a")),
        "METADATA is not UTF-8",
    ),
    "METADATA without Metadata-Version": (
        lambda m: _metadata(m, m[f"{DIST_INFO}/METADATA"].replace(b"Metadata-Version: 2.1\n", b"")),
        "has no Metadata-Version",
    ),
    "a .data folder of no scheme": (
        lambda m: _with_record({**m, "wbtiny-0.1.0+cu130torch2.11.data/../x": b"x"}),
        "a '..' in its path",
    ),
    "a .data folder of an unknown scheme": (
        lambda m: _with_record({**m, "wbtiny-0.1.0+cu130torch2.11.data/etc/evil.conf": b"x"}),
        "in no install scheme",
    ),
}


@pytest.mark.parametrize("case", UNINSTALLABLE)
def test_a_wheel_an_installer_would_refuse_is_not_published(tmp_path: Path, case: str) -> None:
    change, says = UNINSTALLABLE[case]
    source = make_wheel(tmp_path / "src")
    with zipfile.ZipFile(source) as good:
        members = change({info.filename: good.read(info) for info in good.infolist()})
    wheel = tmp_path / "in" / source.name
    wheel.parent.mkdir()
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as crafted:
        for name, data in members.items():
            crafted.writestr(zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0)), data)
    with pytest.raises(InvalidWheel) as refused:
        publish([wheel], tmp_path / "cu130")
    assert refused.value.exit_code == 52
    assert refused.value.cause.startswith(f"{wheel.name} is not a usable wheel: ")
    assert says in refused.value.cause, refused.value.cause
    assert not (tmp_path / "cu130").exists()


def test_a_wheel_whose_members_unpack_to_far_more_than_it_holds_is_refused_unread(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path)
    _declare_size(wheel, "wbtiny/__init__.py", 1024**3, local_too=True)  # says 1 GiB, from a wheel of 1 KiB
    with pytest.raises(InvalidWheel, match=r"a ratio over the cap of 100 \(a zip bomb\)"):
        publish([wheel], tmp_path / "cu130")
    assert not (tmp_path / "cu130").exists()


def test_the_wheels_the_tests_make_and_stamp_writes_are_ones_an_installer_takes(tmp_path: Path) -> None:
    plain = make_wheel(
        tmp_path / "plain", version="0.1.0", requires_dist=("torch>=2",), tag="cp312-cp312-linux_x86_64"
    )
    stamped = stamp_wheel(plain, parse_variant("2.11.0+cu130"))  # METADATA, RECORD and names rewritten
    assert stamped.name == "wbtiny-0.1.0+cu130torch2.11-cp312-cp312-linux_x86_64.whl"
    assert index_tree.read_wheel(stamped).version == Version("0.1.0+cu130torch2.11")
    with zipfile.ZipFile(stamped) as archive:
        assert "wbtiny-0.1.0+cu130torch2.11.dist-info/RECORD" in archive.namelist()


def test_a_unicode_project_name_is_shown_as_text(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, metadata_name="wbtïny")
    assert inspect_wheel(wheel).metadata_name == "wbtïny"
    with pytest.raises(InvalidWheel) as refused:
        index_tree.read_wheel(wheel)
    assert "'wbtïny'" in refused.value.cause and "Header" not in refused.value.cause


def test_a_file_name_too_long_for_the_disk_says_so_not_free_disk_space(tmp_path: Path) -> None:
    # 240 characters: the wheel itself fits NAME_MAX (255), its temp sidecar does not.
    name = "w" * (240 - len("-1.0-py3-none-any.whl"))
    wheel = make_wheel(tmp_path / "in", name, "1.0")
    assert len(wheel.name) == 240
    with pytest.raises(IndexWriteFailed) as refused:
        publish([wheel], tmp_path / "cu130")
    assert "too long" in refused.value.cause
    assert "disk space" not in refused.value.remedy


# -- 1. the build report beside a wheel -----------------------------------------------------------


def _report(wheel: Path, report: object) -> None:
    text = report if isinstance(report, str) else json.dumps(report)
    (wheel.parent / "build-report.json").write_text(text)


def _good_report(wheel: Path, **changes: object) -> dict[str, Any]:
    report: dict[str, Any] = {
        "inputs_key": "abc123" * 10 + "abcd",
        "torch": {"variant": "2.11.0+cu130"},
        "archs": [100, 120],
        "gate": [
            {
                "wheel": wheel.name,
                "passed": True,
                "torch": "2.11.0+cu130",
                "imports": [{"module": "wbtiny", "ok": True}],
                "smoke": {"status": "skipped", "reason": "no GPU"},
            }
        ],
    }
    report.update(changes)
    return report


@pytest.mark.parametrize(
    "report",
    [
        "{not json",
        "[]",
        "\xff\xfe",
        {},
        {"torch": {}, "archs": [100]},
        {"torch": "cu130", "archs": [100]},
        {"torch": {"variant": 130}, "archs": [100]},
        {"torch": {"variant": "cu130"}, "archs": "100,120"},
        {"torch": {"variant": "cu130"}, "archs": [100], "gate": [1]},
        {"torch": {"variant": "cu130"}, "archs": [100], "gate": [{"wheel": NAME, "imports": [7]}]},
        {"torch": {"variant": "cu130"}, "archs": [100], "gate": [{"wheel": NAME, "passed": "yes"}]},
        {"torch": {"variant": "cu130"}, "archs": [100], "gate": "passed"},
        {"torch": {"variant": "cu130"}, "archs": [100], "inputs_key": "a" * 64 + "\n" + "b" * 64},
    ],
    ids=[
        "not-json",
        "a-list",
        "not-utf8",
        "empty",
        "no-variant",
        "torch-not-a-table",
        "variant-not-text",
        "archs-not-a-list",
        "gate-entry-not-a-table",
        "import-not-a-table",
        "passed-not-a-bool",
        "gate-not-a-list",
        "inputs-key-of-two-lines",
    ],
)
def test_a_damaged_build_report_is_a_clear_refusal(tmp_path: Path, report: object) -> None:
    wheel = make_wheel(tmp_path)
    _report(wheel, report)
    for read in (
        lambda: check_wheels([wheel], None, None),
        lambda: describe_gate(wheel),
        lambda: gate_verdict(wheel),
        lambda: inputs_key_beside(wheel),
    ):
        with pytest.raises(InvalidWheel) as refused:
            read()
        assert "build-report.json" in refused.value.cause
        assert "--torch" in refused.value.remedy


def test_a_good_build_report_still_drives_the_checks_and_the_gate(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, requires_dist=("torch==2.11.*",))
    _report(wheel, _good_report(wheel))
    assert inputs_key_beside(wheel) == "abc123" * 10 + "abcd"
    assert gate_verdict(wheel) == ([], None)
    assert describe_gate(wheel)["status"] == "passed"
    _report(wheel, _good_report(wheel, gate={"skipped": "--no-gate"}))
    assert describe_gate(wheel)["status"] == "not run"
    _report(wheel, _good_report(wheel, gate=[{"wheel": wheel.name, "passed": False, "imports": []}]))
    assert describe_gate(wheel)["status"] == "refused"


# -- 2. values that mean nothing ----------------------------------------------------------------


@pytest.mark.parametrize("text", ["9" * 400, "9" * 400 + "g", "99999999999t", ""])
def test_memory_that_cannot_be_a_limit_is_bad_memory(text: str) -> None:
    with pytest.raises(BadMemory):
        parse_memory(text)


def test_parse_target_refuses_an_empty_target() -> None:
    with pytest.raises(BadArgument, match="empty"):
        parse_target("")


def test_yank_into_a_wheelhouse_that_is_not_there_creates_nothing(tmp_path: Path) -> None:
    typo = tmp_path / "wheelhose" / "cu130"
    for act in (lambda: yank(typo, "wbtiny==0.1.0"), lambda: unyank(typo, "wbtiny==0.1.0")):
        with pytest.raises(NotPublished, match="no index"):
            act()
    assert not (tmp_path / "wheelhose").exists()
    bare = tmp_path / "bare"
    bare.mkdir()
    with pytest.raises(NotPublished, match="no index"):
        yank(bare, "wbtiny==0.1.0")
    assert list(bare.iterdir()) == []


# -- 3. option injection through --to ------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "-Fconfig:/srv/wheels",
        "-l@host:/srv",
        "ci@-Fconfig:/srv",
        "ssh://-Fconfig/srv",
        "ssh://-x@host/srv",
        "host:-rf",
    ],
)
def test_a_host_or_path_that_reads_as_an_option_is_refused(text: str) -> None:
    with pytest.raises(BadArgument, match="begins with '-'"):
        parse_target(text)


def test_rsync_and_ssh_get_double_dash_before_host_arguments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[list[str]] = []

    class Holder:  # the remote lock's ssh: says "locked", then waits for its stdin to close
        def __init__(self, args: list[str], **_kwargs: object) -> None:
            calls.append(list(args))
            self.stdout = self.stdin = self

        def readline(self) -> str:
            return "locked\n"

        def close(self) -> None:
            pass

        def wait(self, timeout: float | None = None) -> int:
            return 0

    def run(args: list[str], **_kwargs: object) -> subprocess.CompletedProcess[str]:
        calls.append(list(args))
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(subprocess, "Popen", Holder)
    monkeypatch.setattr(subprocess, "run", run)
    monkeypatch.setattr(shutil, "which", lambda tool: f"/usr/bin/{tool}")
    target = RsyncTarget(host="ci@wheels.example", path="/srv/wheels")
    remote.publish_rsync(
        [make_wheel(tmp_path / "in")], target, tmp_path / "mirror", lambda _line: None, Sidecars()
    )
    ssh, *rsyncs = calls
    assert ssh[ssh.index("--") + 1] == "ci@wheels.example"
    assert len(rsyncs) == 4  # pull, files, simple/, the page for people
    assert rsyncs[-1][-2:] == [
        f"{tmp_path / 'mirror'}/index.html",
        "ci@wheels.example:/srv/wheels/index.html",
    ]
    for rsync in rsyncs:
        assert rsync[0] == "rsync" and len(rsync) - rsync.index("--") == 3  # -- SRC DST


# -- 2. the commands themselves, in process -------------------------------------------------------


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Result]:
    """Run `wheelbuild ARGS` in process, in an empty directory, Docker and the network out of reach."""
    monkeypatch.chdir(tmp_path)
    for key in list(os.environ):
        if key.startswith(("WHEELBUILD_", "CIBW_")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")
    monkeypatch.setenv("WHEELBUILD_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    monkeypatch.setenv("WHEELBUILD_SIMPLE_INDEX", "http://127.0.0.1:9/simple/")
    (tmp_path / "a-dir").mkdir()
    (tmp_path / "binary").write_bytes(bytes(range(256)) * 16)
    publish([make_wheel(tmp_path / "in")], tmp_path / "tree")

    def never_serve(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the server was started: the arguments should have been refused first")

    monkeypatch.setattr(serving, "serve", never_serve)

    def invoke(*args: str) -> Result:
        return CliRunner().invoke(main, list(args))

    return invoke


def _refused(result: Result, code: int, says: str) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    lines = result.output.splitlines()
    assert lines[-2].startswith("error: ") and says in lines[-2], result.output
    assert lines[-1].startswith("remedy: ") and len(lines[-1]) > len("remedy: ")


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (("plan", "wbdemo", "--cpus", "nan"), 35, "--cpus nan"),
        (("plan", "wbdemo", "--cpus", "inf"), 35, "--cpus inf"),
        (("plan", "wbdemo", "--cpus", "0"), 35, "--cpus 0"),
        (("plan", "wbdemo", "--cpus", "-1"), 35, "--cpus -1"),
        (("build", "wbdemo", "--cpus", "-1"), 35, "--cpus -1"),
        (("plan", "wbdemo", "--memory", "9" * 400), 12, "memory size"),
        (("plan", "wbdemo", "--memory", ""), 12, "memory size ''"),
        (("build", "wbdemo", "--memory", ""), 12, "memory size ''"),
        (("plan", "flash-attn", "--version", ""), 37, "--version"),
        (("build", "flash-attn", "--version", ""), 37, "--version"),
        (("build", "wbdemo", "--version", ""), 37, "--version"),
        (("plan", ""), 39, "empty"),
        (("build", ""), 39, "empty"),
        (("calibrate", ""), 39, "empty"),
        (("matrix", "--config", "a-dir"), 33, "a-dir"),
        (("matrix", "--config", "binary"), 33, "binary"),
        (("serve", "tree", "--access-log", "a-dir"), 13, "a-dir"),
        (("serve", "tree", "--access-log", "/proc/no/such/log"), 13, "/proc/no/such/log"),
        (("serve", "tree", "--host", ""), 13, "--host"),
        (("serve", "tree", "--header-timeout", "nan"), 13, "--header-timeout nan"),
        (("serve", "tree", "--idle-timeout", "0"), 13, "--idle-timeout 0"),
        (("serve", "tree", "--idle-timeout", "inf"), 13, "--idle-timeout inf"),
        (("publish", f"in/{NAME}", "--to", "", "--torch", "cu130"), 13, "empty"),
        (("publish", f"in/{NAME}", "--to", "-Fcfg:/srv", "--torch", "cu130"), 13, "begins with '-'"),
        (("yank", "wbtiny==0.1.0", "--tree", "tree-typo"), 53, "no index"),
    ],
)
def test_each_command_refuses_with_a_cause_and_a_remedy(
    cli: Callable[..., Result], tmp_path: Path, args: tuple[str, ...], code: int, says: str
) -> None:
    before = sorted(p.name for p in tmp_path.iterdir())
    _refused(cli(*args), code, says)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing created beside


def test_a_unicode_project_name_reads_as_text_in_the_cli(cli: Callable[..., Result], tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "uni", metadata_name="wbtïny")
    result = cli("inspect", "--json", str(wheel))
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)[0]["metadata"]["name"] == "wbtïny"


def test_a_metadata_sidecar_that_is_a_link_is_rewritten_from_the_wheel_not_advertised(tmp_path: Path) -> None:
    """files/<wheel>.metadata linked to a file outside the tree: its hash would be advertised on
    the pages. The next publish writes the wheel's own METADATA there instead, as a file."""
    first = make_wheel(tmp_path / "a")
    publish([first], tmp_path / "cu130")
    sidecar = tmp_path / "cu130" / "files" / f"{first.name}.metadata"
    own = sidecar.read_bytes()
    outside = tmp_path / "outside.txt"
    outside.write_text("Metadata-Version: 2.1\nName: evil\n")
    sidecar.unlink()
    sidecar.symlink_to(outside)
    publish([make_wheel(tmp_path / "b", version="0.2.0+cu130torch2.11")], tmp_path / "cu130")
    assert not sidecar.is_symlink() and sidecar.read_bytes() == own
    page = (tmp_path / "cu130" / "simple" / "wbtiny" / "index.html").read_text()
    assert hashlib.sha256(own).hexdigest() in page
    assert hashlib.sha256(outside.read_bytes()).hexdigest() not in page


def test_a_fifo_planted_under_a_wheels_name_is_a_conflict_not_a_traceback(tmp_path: Path) -> None:
    publish([make_wheel(tmp_path / "a")], tmp_path / "cu130")
    second = make_wheel(tmp_path / "b", version="0.2.0+cu130torch2.11")
    os.mkfifo(tmp_path / "cu130" / "files" / second.name)
    with pytest.raises(WheelConflict) as refused:
        publish([second], tmp_path / "cu130")
    assert "as something other than a file" in refused.value.cause and refused.value.exit_code == 51
