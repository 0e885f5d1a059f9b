"""Test helpers for the private index: make small real wheels, and check a whole index tree the
way a client would read it (every page parses, every link resolves to a file with the hash the
link names). Shared by tests/unit/test_index.py, test_publish.py and tests/local/test_serve.py.
"""

from __future__ import annotations

import base64
import ctypes
import hashlib
import json
import os
import select
import struct
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin

from filelock import FileLock


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(
    directory: Path,
    name: str = "wbtiny",
    version: str = "0.1.0+cu130torch2.11",
    *,
    tag: str = "py3-none-any",
    requires_python: str | None = ">=3.8",
    payload: str = "",
    metadata_name: str | None = None,
    metadata_version: str | None = None,
    requires_dist: tuple[str, ...] = (),
    extra_files: dict[str, bytes] | None = None,
) -> Path:
    """A real, installable pure-Python wheel with a correct RECORD. *payload* changes the bytes
    (and so the sha256) without changing the name. Its module is importable as
    ``name.replace('-', '_')`` and has ``VERSION``."""
    directory.mkdir(parents=True, exist_ok=True)
    dist = name.replace("-", "_").replace(".", "_")
    module = dist.lower()
    dist_info = f"{dist}-{version}.dist-info"
    metadata = [
        "Metadata-Version: 2.1",
        f"Name: {metadata_name or name}",
        f"Version: {metadata_version or version}",
        "Summary: a tiny wheel for wheelbuild's index tests",
    ]
    if requires_python:
        metadata.append(f"Requires-Python: {requires_python}")
    metadata += [f"Requires-Dist: {r}" for r in requires_dist]
    files = {
        **(extra_files or {}),
        f"{module}/__init__.py": f'VERSION = "{version}"\nPAYLOAD = {payload!r}\n'.encode(),
        f"{dist_info}/METADATA": ("\n".join(metadata) + "\n\n").encode(),
        f"{dist_info}/WHEEL": (
            f"Wheel-Version: 1.0\nGenerator: wheelbuild-tests\nRoot-Is-Purelib: true\nTag: {tag}\n\n"
        ).encode(),
    }
    record = "".join(f"{path},{_record_hash(data)},{len(data)}\n" for path, data in files.items())
    record += f"{dist_info}/RECORD,,\n"
    path = directory / f"{dist}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for member, data in files.items():
            archive.writestr(zipfile.ZipInfo(member, date_time=(2026, 1, 1, 0, 0, 0)), data)
        archive.writestr(zipfile.ZipInfo(f"{dist_info}/RECORD", date_time=(2026, 1, 1, 0, 0, 0)), record)
    return path


@dataclass
class Anchor:
    href: str
    text: str = ""
    attrs: dict[str, str | None] = field(default_factory=dict)


class PageParser(HTMLParser):
    """Anchors and meta tags of a PEP 503 page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.anchors: list[Anchor] = []
        self.meta: dict[str, str] = {}
        self._open: Anchor | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "a":
            self._open = Anchor(href=values.get("href") or "", attrs=values)
        elif tag == "meta" and values.get("name"):
            self.meta[values["name"] or ""] = values.get("content") or ""

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._open.text += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._open is not None:
            self.anchors.append(self._open)
            self._open = None


def parse_page(data: bytes) -> PageParser:
    parser = PageParser()
    parser.feed(data.decode("utf-8"))
    parser.close()
    return parser


def _resolve(root: Path, page: str, href: str) -> Path:
    """The file a relative link on *page* (a path relative to root) points at."""
    target = unquote(urljoin(f"http://index/{page}", href.split("#")[0]).removeprefix("http://index/"))
    return root / target


def _check_file(root: Path, page: str, href: str, sha256: str, metadata_sha256: str) -> Path:
    wheel = _resolve(root, page, href)
    assert hashlib.sha256(wheel.read_bytes()).hexdigest() == sha256, wheel
    metadata = wheel.with_name(wheel.name + ".metadata").read_bytes()
    assert hashlib.sha256(metadata).hexdigest() == metadata_sha256, wheel
    return wheel


def _check_html(root: Path, route: str) -> dict[str, list[str]]:
    listing = parse_page((root / f"{route}simple/index.html").read_bytes())
    assert listing.meta == {"pypi:repository-version": "1.1"}
    found: dict[str, list[str]] = {}
    for anchor in listing.anchors:
        assert anchor.href == f"{anchor.text}/", anchor.href
        page = f"{route}simple/{anchor.href}index.html"
        names = []
        for link in parse_page((root / page).read_bytes()).anchors:
            href, _, fragment = link.href.partition("#sha256=")
            metadata = (link.attrs.get("data-core-metadata") or "").removeprefix("sha256=")
            assert link.attrs.get("data-dist-info-metadata") == f"sha256={metadata}"
            wheel = _check_file(root, page, href, fragment, metadata)
            assert wheel.name == link.text
            names.append(link.text)
        found[anchor.text] = names
    return found


def _check_json(root: Path, route: str) -> dict[str, list[str]]:
    listing = json.loads((root / f"{route}simple/index.json").read_bytes())
    assert listing["meta"] == {"api-version": "1.1"}
    found: dict[str, list[str]] = {}
    for project in listing["projects"]:
        page = f"{route}simple/{project['name']}/index.json"
        detail = json.loads((root / page).read_bytes())
        assert detail["meta"] == {"api-version": "1.1"}
        assert detail["name"] == project["name"]
        names = []
        for entry in detail["files"]:
            metadata = entry["core-metadata"]["sha256"]
            assert entry["dist-info-metadata"] == entry["core-metadata"]
            wheel = _check_file(root, page, entry["url"], entry["hashes"]["sha256"], metadata)
            assert wheel.name == entry["filename"]
            assert entry["size"] == wheel.stat().st_size
            names.append(entry["filename"])
        found[project["name"]] = names
    return found


def check_tree(root: Path, *, settled: bool = True, route: str = "") -> dict[str, list[str]]:
    """Check every page under root/simple (or root/<route>/simple, a per-torch route) as a client
    would; return project -> wheel file names (from the HTML pages).

    Each form (HTML, JSON) is followed on its own: the root list parses, every project it lists has
    a page that parses, and every file a page links exists with the sha256 the link names (wheel
    and .metadata alike). When *settled* (no writer was stopped midway), the two forms must also
    list the same; a stopped writer may have replaced one form's page and not yet the other's."""
    prefix = f"{route}/" if route else ""
    from_html = _check_html(root, prefix)
    from_json = _check_json(root, prefix)
    if settled:
        assert from_html == from_json
    return from_html


def set_compression_method(path: Path, member: str, method: int) -> None:
    """Rewrite *member*'s compression method in a zip, in its local header and the central
    directory: how a hostile wheel names a method no reader knows."""
    data = bytearray(path.read_bytes())
    for signature, method_at, name_length_at, name_at in (
        (b"PK\x03\x04", 8, 26, 30),
        (b"PK\x01\x02", 10, 28, 46),
    ):
        at = data.find(signature)
        while at != -1:
            length = struct.unpack_from("<H", data, at + name_length_at)[0]
            if data[at + name_at : at + name_at + length] == member.encode():
                struct.pack_into("<H", data, at + method_at, method)
            at = data.find(signature, at + 4)
    path.write_bytes(bytes(data))


IN_OPEN = 0x20  # inotify: the file was opened


@contextmanager
def lock_held(root: Path) -> Iterator[Callable[[subprocess.Popen[str]], None]]:
    """Hold the tree's lock (root/.lock) as another publish would, and yield a function that
    returns once the process given opens the lock file: a publish that has read its wheels and
    now waits for the lock (inotify, a real kernel event, not a guess at how long that takes),
    or fails when that process ended first. The lock is released on leaving the block."""
    root.mkdir(parents=True, exist_ok=True)
    lock = FileLock(root / ".lock")
    lock.acquire()
    libc = ctypes.CDLL(None, use_errno=True)
    watch = libc.inotify_init1(os.O_CLOEXEC)
    if watch < 0 or libc.inotify_add_watch(watch, os.fsencode(root / ".lock"), IN_OPEN) < 0:
        raise OSError(ctypes.get_errno(), "inotify")

    def waited(publisher: subprocess.Popen[str]) -> None:
        deadline = time.monotonic() + 120  # a guard against a hang, not a timing
        while not select.select([watch], [], [], 0.1)[0]:
            if publisher.poll() is not None:
                out, err = publisher.communicate()
                raise AssertionError(
                    f"it ended (exit {publisher.returncode}) before it took the lock: {out}{err}"
                )
            assert time.monotonic() < deadline, f"nothing opened {root / '.lock'}"

    try:
        yield waited
    finally:
        os.close(watch)
        lock.release()


def python_child(code: str, *args: str) -> subprocess.Popen[str]:
    """This Python running `code` in a child, from the repository (the publish crash tests)."""
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        cwd=Path(__file__).resolve().parents[1],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def temp_files(root: Path) -> list[Path]:
    """The temporary files publish left under root (none, when it finished or cleaned up)."""
    from wheelbuild.index import tree as index_tree

    return sorted(p for p in root.rglob(f"*{index_tree.TEMP_SUFFIX}") if p.name.startswith("."))


def tree_with_one_wheel(tmp_path: Path) -> Path:
    """A tree that already has one published wheel."""
    from wheelbuild.index.publish import publish

    root = tmp_path / "cu130"
    publish([make_wheel(tmp_path / "old", "oldpkg", "1.0")], root)
    return root
