"""Every command, given hostile values (empty, NaN, infinities, huge and negative numbers, unicode,
directories, devices, binary files, zip bombs), refuses with a typed error (`error:` and
`remedy:`) or click's usage error (exit 2): never a traceback, never exit 0.

Run in process with click's CliRunner; Docker is out of reach (a socket that does not exist) and so
is the network (indexes on 127.0.0.1:9, the discard port, where nothing listens). Each generated
command line has at least one value that is wrong for its place, so none should succeed; `serve`
is guarded so that a server that would start fails the test at once instead of blocking it.
"""

from __future__ import annotations

import os
import struct
import traceback
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wheelbuild.cli import main as cli
from wheelbuild.index import serve as serving
from wheelbuild.index.publish import publish

from tests.indexkit import make_wheel, set_compression_method

GOOD = "wbtiny-0.1.0+cu130torch2.11-py3-none-any.whl"
NUMBERS = ["nan", "inf", "-inf", "-1", "0", "1e308", "9" * 400, "-" + "9" * 40]
TEXTS = ["", " ", "ünïcødé", "\u202egnp.exe", "x" * 300]
PATHS = ["a-dir", "/dev/null", "/dev/zero", "binary", "no/such/file", "/proc/self/no-such", "x" * 300]
WHEELS = [
    "bomb-1.0-py3-none-any.whl",  # METADATA inflates to 2 MiB
    "sobomb-1.0-cp311-cp311-linux_x86_64.whl",  # an extension module that deflates 1000:1
    "notelf-1.0-cp311-cp311-linux_x86_64.whl",  # an extension module that is not ELF
    "badelf-1.0-cp311-cp311-linux_x86_64.whl",  # ELF whose section offset overflows pyelftools
    "method-1.0-py3-none-any.whl",  # METADATA under compression method 99
    "zero-1.0-py3-none-any.whl",  # a link to /dev/zero
    "dirwheel-1.0-py3-none-any.whl",  # a directory
    "notzip-1.0-py3-none-any.whl",  # binary bytes
    f"run/{GOOD}",  # beside a damaged build-report.json
]


@dataclass(frozen=True)
class Slot:
    """One option (or positional, when `option` is empty) with values right and wrong for it."""

    option: str
    valid: tuple[str, ...]
    hostile: tuple[str, ...]
    required: bool = False  # always given (a required option; a positional with a valid value)
    many: bool = False  # a positional that takes several values


@dataclass(frozen=True)
class Command:
    words: tuple[str, ...]
    slots: tuple[Slot, ...]  # at least one of these gets a hostile value
    free: tuple[Slot, ...] = ()  # options any value of which may be right: drawn from both lists
    flags: tuple[str, ...] = ()


def _slot(
    option: str, valid: list[str], hostile: list[str], *, required: bool = False, many: bool = False
) -> Slot:
    return Slot(option, tuple(valid), tuple(hostile), required or (option == "" and bool(valid)), many)


PACKAGE_HOSTILE = [
    "",
    " ",
    "/dev/null",
    "/dev/zero",
    "binary",
    "ünïcødé",
    "x" * 300,
    "http://127.0.0.1:9/a.tar.gz",
]
ARCHS = _slot("--archs", ["100,120"], ["", "0", "-1", "nan", "9" * 400, "1e308", "ünï", "sm_"])
MEMORY = _slot(
    "--memory", ["6g"], ["", " ", "0", "-1", "nan", "inf", "9" * 400, "9" * 400 + "g", "ünï", "a-dir"]
)
CPUS = _slot("--cpus", ["2"], ["", *NUMBERS, "ünï"])
JOBS = [
    _slot(o, ["2"], ["", "0", "-1", "nan", "inf", "ünï", "9" * 400]) for o in ("--max-jobs", "--nvcc-threads")
]
TORCH = _slot("--torch", ["cu130"], ["", " ", "cu999", "rocm6.2", "nan", "ünï", "9" * 400, "2.11.0+cu999"])
VERSION = _slot("--version", ["2.8.3"], ["", " "])
IMAGE = (
    _slot("--base-image", [], ["", "ünï", "-x", "9" * 400]),
    _slot("--cuda12-image", [], ["", "ünï", "-x"]),
    _slot("--ca-bundle", [], ["", "a-dir", "/dev/null", "/dev/zero", "no/such/file"]),
)
# uni's METADATA names ünï: inspect shows it (as text), publish refuses it (not the file's name)
WHEEL_ARGS = _slot("", [GOOD, "uni-1.0-py3-none-any.whl"], [*WHEELS, *PATHS, ""], many=True)

COMMANDS = [
    Command(
        ("build",),
        (
            _slot("", ["wbdemo", "flash-attn"], PACKAGE_HOSTILE),
            TORCH,
            ARCHS,
            _slot("--python", ["3.12"], ["", "2.7", "nan", "9" * 400, "ünï"]),
            VERSION,
            MEMORY,
            CPUS,
            *JOBS,
            _slot("--env", ["A=1"], ["", "=", "1A=x", "ünï=1", "9" * 400]),
            _slot("--gpus", ["none"], ["", "ünï", "1"]),
            _slot("--arch-env", ["TORCH_CUDA_ARCH_LIST"], ["", " "]),
        ),
        free=(*IMAGE, _slot("--output-dir", ["out"], ["", "/dev/null", "binary", "/proc/self/x", "x" * 300])),
        flags=("--rebuild", "--no-gate", "--admission", "-q"),
    ),
    Command(
        ("plan",),
        (
            _slot("", ["flash-attn", "wbdemo"], PACKAGE_HOSTILE),
            ARCHS,
            _slot("--version", [], ["", " "]),
            MEMORY,
            CPUS,
            *JOBS,
            _slot("--torch", ["cu130"], ["", " ", "cu999", "nan", "ünï", "9" * 400]),
        ),
    ),
    Command(
        ("calibrate",),
        (
            _slot("", ["flash-attn"], PACKAGE_HOSTILE),
            TORCH,
            VERSION,
            ARCHS,
            _slot("--threads", ["1,2"], ["", "0", "-1", "nan", "ünï", "9" * 400]),
            _slot("--sample", ["2"], ["", "0", "-1", "nan", "9" * 400]),
            MEMORY,
        ),
        free=(*IMAGE, _slot("--compare", [], PATHS), _slot("--unit", [], ["", "ünï", "x" * 300])),
    ),
    Command(("image", "build"), (), free=IMAGE, flags=("--cuda12",)),
    Command(("image", "ls"), ()),
    Command(("inspect",), (WHEEL_ARGS,), flags=("--json",)),
    Command(
        ("publish",),
        (
            WHEEL_ARGS,
            _slot(
                "--to",
                ["out/{variant}"],
                ["", " ", "-Fcfg:/srv", "h:-rf", "ssh://-x@h/p", "s3://b/p", "https://u:p@h/"],
            ),
            _slot("--torch", ["cu130"], ["", " ", "cu999", "nan", "ünï"]),
            _slot("--archs", ["100"], ["", "0", "nan", "9" * 400, "ünï"]),
        ),
    ),
    Command(
        ("yank",),
        (
            _slot(
                "",
                ["wbtiny==0.1.0+cu130torch2.11", GOOD],
                ["", " ", "x", "==", "x==nan", "ünï==1", "9" * 400],
            ),
            _slot(
                "--tree",
                ["tree"],
                ["", "typo", "a-dir", "/dev/null", "binary", "/dev/zero", "x" * 300],
                required=True,
            ),
        ),
        free=(_slot("--reason", ["bad build"], ["", "ünï", "x" * 300]),),
        flags=("--undo",),
    ),
    Command(
        ("serve",),
        (
            _slot("", ["tree"], ["", "a-dir", "typo", "/dev/null", "binary", "x" * 300]),
            _slot("--host", ["127.0.0.1"], ["", " "]),
            _slot("--port", ["0"], ["", "-1", "65536", "nan", "9" * 400, "ünï"]),
            _slot("--htpasswd", [], ["", "a-dir", "/dev/null", "/dev/zero", "binary", "typo", "x" * 300]),
            _slot("--access-log", [], ["", "a-dir", "/proc/self/no/log", "binary/log", "x" * 300]),
        ),
    ),
    Command(
        ("matrix",),
        (
            _slot(
                "--config-file",
                ["wheelbuild.toml"],
                ["", "a-dir", "binary", "/dev/null", "/dev/zero", "typo.toml", "bad.toml"],
            ),
            _slot("--format", ["lines"], ["", "ünï"]),
            _slot("--track", ["latest"], ["", "earliest"]),
        ),
        free=(
            *IMAGE,
            _slot("--skip-published", ["tree"], ["", "a-dir", "/dev/null", "binary", "x" * 300]),
            _slot("--torch-index-url", ["http://127.0.0.1:9/whl/cu130"], ["", "ünï", "ftp://x"]),
        ),
    ),
]


def _mostly_valid(draw: st.DrawFn, slot: Slot) -> str:
    """A valid value three times in four (where there is one), so that the forced hostile value
    is often the only one, and not always hidden behind an earlier refusal."""
    if slot.valid and draw(st.integers(0, 3)) != 0:
        return draw(st.sampled_from(slot.valid))
    return draw(st.sampled_from(slot.hostile))


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    command = draw(st.sampled_from(COMMANDS))
    argv, positionals = list(command.words), []
    forced = draw(st.sampled_from(range(len(command.slots)))) if command.slots else -1
    for number, slot in enumerate(command.slots):
        if number == forced:
            values = [draw(st.sampled_from(slot.hostile))]
        elif slot.required or draw(st.booleans()):
            values = [_mostly_valid(draw, slot)]
        else:
            continue
        if slot.many and draw(st.booleans()):
            values.append(_mostly_valid(draw, slot))
        if slot.option:
            argv += [slot.option, *values]
        else:
            positionals += values
    for slot in command.free:
        if draw(st.booleans()):
            argv += [slot.option, _mostly_valid(draw, slot)]
    argv += [flag for flag in command.flags if draw(st.booleans())]
    return argv + positionals


def _zip(path: Path, members: dict[str, bytes]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def _metadata(name: str, version: str = "1.0", extra: bytes = b"") -> bytes:
    return f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode() + extra + b"\n"


@pytest.fixture(scope="module")
def playground(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory of hostile files, and a few good ones (a wheel, a tree, a matrix config)."""
    root = tmp_path_factory.mktemp("fuzz")
    (root / "a-dir").mkdir()
    (root / "dirwheel-1.0-py3-none-any.whl").mkdir()
    (root / "binary").write_bytes(bytes(range(256)) * 64)
    (root / "notzip-1.0-py3-none-any.whl").write_bytes(bytes(range(256)) * 64)
    (root / "zero-1.0-py3-none-any.whl").symlink_to("/dev/zero")
    (root / "cache").mkdir()
    good = make_wheel(root, requires_dist=("torch==2.11.*",))
    assert good.name == GOOD
    publish([good], root / "tree")
    make_wheel(root / "run", requires_dist=("torch==2.11.*",))
    (root / "run" / "build-report.json").write_text('{"torch": ')
    _zip(
        root / "bomb-1.0-py3-none-any.whl",
        {"bomb-1.0.dist-info/METADATA": _metadata("bomb", extra=b" " * 2 * 1024**2)},
    )
    _zip(
        root / "sobomb-1.0-cp311-cp311-linux_x86_64.whl",
        {"sobomb-1.0.dist-info/METADATA": _metadata("sobomb"), "sobomb/_C.so": bytes(8 * 1024**2)},
    )
    _zip(
        root / "notelf-1.0-cp311-cp311-linux_x86_64.whl",
        {
            "notelf-1.0.dist-info/METADATA": _metadata("notelf"),
            "notelf/_C.so": b"\x7fELF\x02" + bytes(range(256)),
        },
    )
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
    header = ident + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, 64, 0, 64, 56, 0, 64, 1, 0)
    section = struct.pack("<IIQQQQIIQQ", 0, 1, 0x800, 0, 2**63 + 1, 0, 0, 0, 1, 0)  # compressed, far away
    _zip(
        root / "badelf-1.0-cp311-cp311-linux_x86_64.whl",
        {"badelf-1.0.dist-info/METADATA": _metadata("badelf"), "badelf/_C.so": header + section},
    )
    method = _zip(
        root / "method-1.0-py3-none-any.whl", {"method-1.0.dist-info/METADATA": _metadata("method")}
    )
    set_compression_method(method, "method-1.0.dist-info/METADATA", 99)
    _zip(root / "uni-1.0-py3-none-any.whl", {"uni-1.0.dist-info/METADATA": _metadata("ünï")})
    (root / "wheelbuild.toml").write_text(
        '[[build]]\npackage = "wbdemo"\ntorch = ["cu130"]\npython = ["3.12"]\n'
    )
    (root / "bad.toml").write_text('[[build]]\npackage = ""\n')
    return root


@pytest.fixture
def in_playground(playground: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.chdir(playground)
    for key in list(os.environ):
        if key.startswith(("WHEELBUILD_", "CIBW_")) or key.lower().endswith("_proxy"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")
    monkeypatch.setenv("WHEELBUILD_CACHE_DIR", str(playground / "cache"))
    monkeypatch.setenv("WHEELBUILD_SIMPLE_INDEX", "http://127.0.0.1:9/simple/")
    monkeypatch.setenv("WHEELBUILD_TORCH_INDEX_URL", "http://127.0.0.1:9/whl/cu130")
    monkeypatch.setenv("WHEELBUILD_CUDA_REDIST_URL", "http://127.0.0.1:9/redist/")
    real_serve = serving.serve

    def serve_that_must_not_start(*args: Any, **kwargs: Any) -> None:
        def started(url: str) -> None:
            raise AssertionError(f"a server started at {url}: serve was given only valid arguments")

        real_serve(*args, **{**kwargs, "ready": started})

    monkeypatch.setattr(serving, "serve", serve_that_must_not_start)
    yield playground


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(argv=command_lines())
def test_hostile_values_are_refused_with_a_cause_and_a_remedy(in_playground: Path, argv: list[str]) -> None:
    result = CliRunner().invoke(cli.main, argv)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        assert result.exc_info is not None
        shown = "".join(traceback.format_exception(*result.exc_info))
        pytest.fail(f"wheelbuild {argv!r} raised:\n{shown}")
    output = result.output
    assert "Traceback" not in output, (argv, output)
    assert result.exit_code != 0, (argv, output)
    if result.exit_code == 2:
        assert "Usage: " in output and "Error: " in output, (argv, output)
    else:
        lines = output.splitlines()
        assert any(line.startswith("error: ") for line in lines), (argv, output)
        assert lines[-1].startswith("remedy: "), (argv, output)
