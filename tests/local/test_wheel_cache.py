"""images/wheelbuild-wheel-cache with real pip against a real local HTTP index: the first run
downloads and locks the exact files, a later run installs them with the index gone, and a
damaged file is downloaded again. The wheels are tiny ones made here; torch's are ~3 GB."""

from __future__ import annotations

import base64
import hashlib
import http.server
import os
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
from wheelbuild.run.image import IMAGES_DIR

SCRIPT = str(IMAGES_DIR / "wheelbuild-wheel-cache")


def _wheel(folder: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> Path:
    """A minimal pure wheel: a module, METADATA, WHEEL and RECORD."""
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f"VERSION = {version!r}\n",
        f"{info}/METADATA": "Metadata-Version: 2.1\n"
        f"Name: {name}\nVersion: {version}\n" + "".join(f"Requires-Dist: {r}\n" for r in requires),
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    with zipfile.ZipFile(path, "w") as archive:
        for arcname, text in files.items():
            data = text.encode()
            archive.writestr(arcname, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{arcname},sha256={digest},{len(data)}")
        archive.writestr(f"{info}/RECORD", "\n".join([*record, f"{info}/RECORD,,"]) + "\n")
    return path


class _Index:
    """A PEP 503 simple index on localhost, counting the wheel downloads it served."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.downloads: list[str] = []
        index = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.endswith(".whl"):
                    index.downloads.append(self.path.rsplit("/", 1)[1])
                super().do_GET()

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(root)))
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple/"

    def publish(self, wheel: Path) -> None:
        project = self.root / "simple" / wheel.name.split("-")[0]
        project.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        (self.root / "files").mkdir(exist_ok=True)
        (self.root / "files" / wheel.name).write_bytes(wheel.read_bytes())
        (project / "index.html").write_text(
            f'<a href="../../files/{wheel.name}#sha256={digest}">{wheel.name}</a>\n'
        )

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def index(tmp_path: Path) -> Iterator[_Index]:
    made = tmp_path / "made"
    made.mkdir()
    served = _Index(tmp_path / "index")
    served.publish(_wheel(made, "wbcachedemo", "1.0", requires=("wbcachedep",)))
    served.publish(_wheel(made, "wbcachedep", "2.0"))
    yield served
    served.stop()


def _venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=120)
    return path / "bin" / "python"


def _cache(python: Path, cache: Path, index_file: Path, *tree: str) -> subprocess.CompletedProcess[str]:
    # Nothing but PATH and HOME: the index reaches pip only through the file.
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), "PIP_NO_CACHE_DIR": "1"}
    return subprocess.run(
        [str(python), SCRIPT, str(cache), "demo-key", "--index-file", str(index_file), *tree, "wbcachedemo"],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def _imports(python: Path) -> str:
    code = "import wbcachedemo, wbcachedep; print(wbcachedemo.VERSION, wbcachedep.VERSION)"
    return subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()


def _imported_from(python: Path) -> Path:
    code = "import wbcachedemo; print(wbcachedemo.__file__)"
    found = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True)
    return Path(found.stdout.strip())


def test_first_run_downloads_and_locks_then_installs_with_the_index_gone(
    tmp_path: Path, index: _Index
) -> None:
    cache = tmp_path / "cache"
    index_file = tmp_path / "torch-index-url"
    index_file.write_text(index.url)
    first = _venv(tmp_path / "venv1")
    done = _cache(first, cache, index_file)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(index.downloads) == ["wbcachedemo-1.0-py3-none-any.whl", "wbcachedep-2.0-py3-none-any.whl"]
    assert _imports(first) == "1.0 2.0"
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    lock = (cache / "locks" / f"demo-key-{tag}.txt").read_text()
    for name in ("wbcachedemo-1.0-py3-none-any.whl", "wbcachedep-2.0-py3-none-any.whl"):
        digest = hashlib.sha256((tmp_path / "index" / "files" / name).read_bytes()).hexdigest()
        assert (cache / "files" / digest / name).is_file()  # stored under the index's own hash
        assert f"=={name.split('-')[1]} --hash=sha256:{digest}" in lock
    assert index.url not in lock

    index.stop()  # no network from here on
    second = _venv(tmp_path / "venv2")
    done = _cache(second, cache, index_file)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "from the machine's cache, no download" in done.stdout
    assert _imports(second) == "1.0 2.0"


def test_a_damaged_cached_file_is_downloaded_again(tmp_path: Path, index: _Index) -> None:
    cache = tmp_path / "cache"
    index_file = tmp_path / "torch-index-url"
    index_file.write_text(index.url)
    assert _cache(_venv(tmp_path / "venv1"), cache, index_file).returncode == 0
    (damaged,) = cache.glob("files/*/wbcachedep-2.0-py3-none-any.whl")
    damaged.write_bytes(b"not a wheel")
    index.downloads.clear()
    python = _venv(tmp_path / "venv2")
    done = _cache(python, cache, index_file)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no longer matches its hash; downloading again" in done.stdout
    assert "wbcachedep-2.0-py3-none-any.whl" in index.downloads
    assert _imports(python) == "1.0 2.0"


def test_tree_is_installed_once_and_each_python_then_gets_a_pth_file(tmp_path: Path, index: _Index) -> None:
    """--tree: the first Python's run installs the locked files into CACHE/trees/TAG/KEY.DIGEST
    and links CACHE/trees/TAG/KEY to it; every Python then imports from the link through a .pth
    file, with nothing installed into its own site-packages, and the index gone."""
    cache = tmp_path / "cache"
    index_file = tmp_path / "torch-index-url"
    index_file.write_text(index.url)
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    link = cache / "trees" / tag / "demo-key"
    first = _venv(tmp_path / "venv1")
    done = _cache(first, cache, index_file, "--tree")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "into the machine's installed tree, once" in done.stdout
    assert link.is_symlink() and link.resolve().name.startswith("demo-key.")
    assert _imports(first) == "1.0 2.0"
    # Imported through the link's path, the one wheelbuild-site-packages gives sccache.
    assert _imported_from(first) == link / "wbcachedemo" / "__init__.py"
    assert not list((tmp_path / "venv1").glob("lib/python3*/site-packages/wbcachedemo"))

    index.stop()
    second = _venv(tmp_path / "venv2")
    done = _cache(second, cache, index_file, "--tree")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "installing" not in done.stdout  # the tree is there: nothing unpacked, no pip run
    assert f"using the machine's installed tree {link}" in done.stdout
    assert _imports(second) == "1.0 2.0"


def test_a_damaged_tree_is_installed_again(tmp_path: Path, index: _Index) -> None:
    cache = tmp_path / "cache"
    index_file = tmp_path / "torch-index-url"
    index_file.write_text(index.url)
    assert _cache(_venv(tmp_path / "venv1"), cache, index_file, "--tree").returncode == 0
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    module = cache / "trees" / tag / "demo-key" / "wbcachedep" / "__init__.py"
    module.write_text("VERSION = 'damaged: longer than the RECORD says'\n")
    index.stop()  # reinstalled from the cached files, not downloaded
    python = _venv(tmp_path / "venv2")
    done = _cache(python, cache, index_file, "--tree")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "differs from its RECORD; installing it again" in done.stdout
    assert _imports(python) == "1.0 2.0"


@pytest.mark.parametrize("tree", [(), ("--tree",)], ids=["installed", "tree"])
def test_each_file_used_is_printed_with_its_hash_and_the_host_reads_them(
    tmp_path: Path, index: _Index, tree: tuple[str, ...]
) -> None:
    """The lines the host keeps as the build's inputs (the wheel's provenance statement): one
    per locked file, with the lock's name and the sha256 the lock holds, on the run that fills
    the cache and on one that only reads it."""
    from wheelbuild.run.buildlog import BuildLog

    cache = tmp_path / "cache"
    index_file = tmp_path / "torch-index-url"
    index_file.write_text(index.url)
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    lock = cache / "locks" / f"demo-key-{tag}.txt"
    for venv in ("venv1", "venv2"):
        done = _cache(_venv(tmp_path / venv), cache, index_file, *tree)
        assert done.returncode == 0, done.stdout + done.stderr
        log = BuildLog()
        for line in done.stdout.splitlines():
            log.feed(line)
        locked = [
            line.split(" ", 3)[2:] for line in lock.read_text().splitlines() if line.startswith("# file ")
        ]
        assert len(locked) == 2
        assert sorted(log.locked_files) == sorted(
            (f"demo-key-{tag}", digest, name) for digest, name in locked
        )
