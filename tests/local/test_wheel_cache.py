"""images/wheelbuild-wheel-cache with real pip against a real local HTTP index: the first run
downloads and locks the exact files, a later run installs them with the index gone, and a
damaged file is downloaded again; a second lock or Python downloads and unpacks only what it
adds, its tree shares the others' inodes, and past its bound the least recently used tree goes
with what only it needed. The wheels are tiny ones made here; torch's are ~3 GB."""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
from wheelbuild.image.inputs import IMAGES_DIR

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

    def publish(self, wheel: Path, with_hash: bool = True) -> None:
        project = self.root / "simple" / wheel.name.split("-")[0]
        project.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        (self.root / "files").mkdir(exist_ok=True)
        (self.root / "files" / wheel.name).write_bytes(wheel.read_bytes())
        fragment = f"#sha256={digest}" if with_hash else ""
        # Its METADATA beside it (PEP 658), as PyPI serves it: pip resolves without the wheel.
        name, version = wheel.name.split("-")[:2]
        with zipfile.ZipFile(wheel) as archive:
            metadata = archive.read(f"{name}-{version}.dist-info/METADATA")
        (self.root / "files" / f"{wheel.name}.metadata").write_bytes(metadata)
        meta = hashlib.sha256(metadata).hexdigest()
        with (project / "index.html").open("a") as page:  # a project's releases, one line each
            page.write(
                f'<a href="../../files/{wheel.name}{fragment}" data-dist-info-metadata="sha256={meta}" '
                f'data-core-metadata="sha256={meta}">{wheel.name}</a>\n'
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


_RESOLVER: list[Path] = []


def _resolver_into(cache: Path) -> None:
    """The pip that resolves from PEP 658 metadata, kept in the cache as the script would keep
    the one it downloads (the venvs' own pip 23 downloads every wheel to resolve): this test
    environment's pip 26, zipped as a wheel-like file that `python pip.whl/pip` runs."""
    import pip

    if not _RESOLVER:
        made = Path(tempfile.mkdtemp(prefix="wb-resolver-")) / f"pip-{pip.__version__}-py3-none-any.whl"
        package = Path(pip.__file__).parent
        with zipfile.ZipFile(made, "w", zipfile.ZIP_DEFLATED) as archive:
            for path in package.rglob("*"):
                if path.is_file() and "__pycache__" not in path.parts:
                    archive.write(path, str(path.relative_to(package.parent)))
        _RESOLVER.append(made)
    kept = cache / "resolver"
    if not kept.is_dir():
        kept.mkdir(parents=True)
        shutil.copy(_RESOLVER[0], kept / _RESOLVER[0].name)


def _venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=120)
    return path / "bin" / "python"


def _cache(
    python: Path,
    cache: Path,
    index_file: Path,
    *tree: str,
    key: str = "demo-key",
    requirement: str = "wbcachedemo",
    bound: str | None = None,
) -> subprocess.CompletedProcess[str]:
    # Nothing but PATH and HOME: the index reaches pip only through the file.
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), "PIP_NO_CACHE_DIR": "1"}
    if bound is not None:
        env["WHEELBUILD_WHEEL_CACHE_BOUND"] = bound
    _resolver_into(cache)
    return subprocess.run(
        [str(python), SCRIPT, str(cache), key, "--index-file", str(index_file), *tree, requirement],
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
    assert "composed the tree" in done.stdout
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
    assert "differs from its RECORD; composing it again" in done.stdout
    # The file was written in place, so the unpacked wheel it is linked to is damaged too.
    assert "the unpacked wbcachedep-2.0-py3-none-any.whl differs from its RECORD" in done.stdout
    assert _imports(python) == "1.0 2.0"


@pytest.mark.parametrize("tree", [(), ("--tree",)], ids=["installed", "tree"])
def test_each_file_used_is_printed_with_its_hash_and_the_host_reads_them(
    tmp_path: Path, index: _Index, tree: tuple[str, ...]
) -> None:
    """The lines the host keeps as the build's inputs (the wheel's provenance statement): one
    per locked file, with the lock's name and the sha256 the lock holds, on the run that fills
    the cache and on one that only reads it."""
    from wheelbuild.attempt.buildlog import BuildLog

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


# ---------------------------------------------------------------------------------------------
# Shared downloads, wheels unpacked once, trees of hard links, the bound


@pytest.fixture
def two_releases(tmp_path: Path) -> Iterator[_Index]:
    """wbcachedemo 1.0 and 1.1, each requiring wbcachedep 2.0: two locks that share one wheel,
    as two torch releases share their NVIDIA wheels."""
    made = tmp_path / "made"
    made.mkdir()
    served = _Index(tmp_path / "index")
    served.publish(_wheel(made, "wbcachedemo", "1.0", requires=("wbcachedep",)))
    served.publish(_wheel(made, "wbcachedemo", "1.1", requires=("wbcachedep",)))
    served.publish(_wheel(made, "wbcachedep", "2.0"))
    yield served
    served.stop()


def _tree(cache: Path, key: str, python: Path | None = None) -> Path:
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    if python is not None:
        found = subprocess.run([str(python), "-c", "import sys; print(sys.version_info[1])"],
                               capture_output=True, text=True, check=True)  # fmt: skip
        tag = f"cp3{found.stdout.strip()}"
    return (cache / "trees" / tag / key).resolve()


def _index_file(tmp_path: Path, index: _Index) -> Path:
    index_file = tmp_path / "torch-index-url"
    index_file.write_text(index.url)
    return index_file


def _first_tree(tmp_path: Path, index: _Index) -> tuple[Path, Path, Path]:
    """A venv and a cache holding the tree of wbcachedemo 1.0 (key demo-10): (cache, index file, python)."""
    cache = tmp_path / "cache"
    index_file = _index_file(tmp_path, index)
    python = _venv(tmp_path / "venv")
    done = _cache(python, cache, index_file, "--tree", key="demo-10", requirement="wbcachedemo==1.0")
    assert done.returncode == 0, done.stdout + done.stderr
    return cache, index_file, python


def test_a_second_lock_downloads_and_unpacks_only_what_it_adds_and_shares_inodes(
    tmp_path: Path, two_releases: _Index
) -> None:
    """Two locks (two torch releases) that share a wheel: the second downloads only its own
    top wheel (counted at the server: pip was offered the cached one and took it), unpacks only
    that, and its tree holds the shared wheel's files as the same inodes as the first's."""
    cache = tmp_path / "cache"
    index_file = _index_file(tmp_path, two_releases)
    python = _venv(tmp_path / "venv")
    first = _cache(python, cache, index_file, "--tree", key="demo-10", requirement="wbcachedemo==1.0")
    assert first.returncode == 0, first.stdout + first.stderr
    assert sorted(two_releases.downloads) == [
        "wbcachedemo-1.0-py3-none-any.whl",
        "wbcachedep-2.0-py3-none-any.whl",
    ]

    two_releases.downloads.clear()
    second = _cache(python, cache, index_file, "--tree", key="demo-11", requirement="wbcachedemo==1.1")
    assert second.returncode == 0, second.stdout + second.stderr
    assert two_releases.downloads == ["wbcachedemo-1.1-py3-none-any.whl"]
    assert "1 of its 2 files are here; downloading 1" in second.stdout
    assert "unpacking wbcachedemo-1.1-py3-none-any.whl" in second.stdout
    assert "unpacking wbcachedep" not in second.stdout
    assert _imports(python) == "1.1 2.0"
    shared = [_tree(cache, key) / "wbcachedep" / "__init__.py" for key in ("demo-10", "demo-11")]
    assert shared[0].stat().st_ino == shared[1].stat().st_ino
    own = [_tree(cache, key) / "wbcachedemo" / "__init__.py" for key in ("demo-10", "demo-11")]
    assert own[0].stat().st_ino != own[1].stat().st_ino
    assert len(list((cache / "unpacked").iterdir())) == 3  # one per distinct wheel


def test_a_second_python_downloads_nothing_it_shares_and_unpacks_nothing_again(
    tmp_path: Path, two_releases: _Index
) -> None:
    """Another Python's lock of the same requirement: its files are all cached (py3 wheels,
    as NVIDIA's are), so the server serves no wheel, and its tree is the first's inodes."""
    other = next(
        (p for p in (Path(f"/root/.pyenv/versions/3.{m}.0/bin/python3") for m in (13, 12)) if p.is_file()),
        None,
    )
    if other is None or sys.version_info[:2] in ((3, 13), (3, 12)):
        pytest.skip(
            "needs a second CPython (3.12 or 3.13 under /root/.pyenv) beside the one running the tests"
        )
    cache = tmp_path / "cache"
    index_file = _index_file(tmp_path, two_releases)
    first = _venv(tmp_path / "venv1")
    assert _cache(first, cache, index_file, "--tree").returncode == 0
    two_releases.downloads.clear()
    subprocess.run([str(other), "-m", "venv", str(tmp_path / "venv2")], check=True, timeout=120)
    second = tmp_path / "venv2" / "bin" / "python"
    done = _cache(second, cache, index_file, "--tree")
    assert done.returncode == 0, done.stdout + done.stderr
    assert two_releases.downloads == []
    assert "2 of its 2 files are here; downloading 0" in done.stdout
    assert "unpacking" not in done.stdout
    assert _imports(second) == "1.1 2.0"
    trees = [_tree(cache, "demo-key", python) for python in (first, second)]
    assert trees[0] != trees[1]
    for module in ("wbcachedemo", "wbcachedep"):
        assert (trees[0] / module / "__init__.py").stat().st_ino == (
            trees[1] / module / "__init__.py"
        ).stat().st_ino


@pytest.mark.parametrize("with_hash", [True, False], ids=["index-hash", "no-index-hash"])
def test_a_damaged_cached_file_is_downloaded_again_where_it_is_needed(
    tmp_path: Path, with_hash: bool
) -> None:
    """A cached file damaged in place, then needed by a lock installed from its files: where the
    index lists a hash the script finds the file does not match it, drops it and downloads it
    again with the lock's new file only; where the index lists none, nothing can be told from
    another, so both are downloaded (once each)."""
    made = tmp_path / "made"
    made.mkdir()
    index = _Index(tmp_path / "index")
    for version in ("1.0", "1.1"):
        index.publish(_wheel(made, "wbcachedemo", version, requires=("wbcachedep",)), with_hash)
    index.publish(_wheel(made, "wbcachedep", "2.0"), with_hash)
    try:
        cache = tmp_path / "cache"
        index_file = _index_file(tmp_path, index)
        python = _venv(tmp_path / "venv")
        first = _cache(python, cache, index_file, "--tree", key="demo-10", requirement="wbcachedemo==1.0")
        assert first.returncode == 0
        (damaged,) = cache.glob("files/*/wbcachedep-2.0-py3-none-any.whl")
        good = damaged.read_bytes()
        damaged.write_bytes(b"not a wheel")
        index.downloads.clear()
        done = _cache(python, cache, index_file, key="demo-11", requirement="wbcachedemo==1.1")
        assert done.returncode == 0, done.stdout + done.stderr
        assert sorted(index.downloads) == [
            "wbcachedemo-1.1-py3-none-any.whl",
            "wbcachedep-2.0-py3-none-any.whl",
        ]
        if with_hash:
            assert "the cached wbcachedep-2.0-py3-none-any.whl no longer matches its hash" in done.stdout
        assert damaged.read_bytes() == good  # stored again under its own hash
        assert _imports(python) == "1.1 2.0"
    finally:
        index.stop()


def test_a_damaged_unpacked_wheel_is_installed_again_alone(tmp_path: Path, two_releases: _Index) -> None:
    cache, index_file, python = _first_tree(tmp_path, two_releases)
    (dep,) = cache.glob("unpacked/*/wbcachedep/__init__.py")
    (demo,) = cache.glob("unpacked/*/wbcachedemo/__init__.py")
    demo_inode = demo.stat().st_ino
    dep.unlink()  # a new inode, so no tree sees it: only the unpacked wheel is damaged
    dep.write_text("VERSION = 'damaged: longer than its RECORD says'\n")
    shutil.rmtree(_tree(cache, "demo-10"))  # composed again, from the unpacked wheels
    two_releases.stop()
    done = _cache(python, cache, index_file, "--tree", key="demo-10", requirement="wbcachedemo==1.0")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "the unpacked wbcachedep-2.0-py3-none-any.whl differs from its RECORD" in done.stdout
    assert "unpacking wbcachedep-2.0-py3-none-any.whl" in done.stdout
    assert "unpacking wbcachedemo" not in done.stdout
    assert demo.stat().st_ino == demo_inode
    assert _imports(python) == "1.0 2.0"


def _age(cache: Path, key: str, seconds: float) -> None:
    stamp = _tree(cache, key)
    stamp = stamp.with_name(stamp.name + ".used")
    then = time.time() - seconds
    os.utime(stamp, (then, then))


def _housekeeping(python: Path, cache: Path, mode: str, bound: str) -> dict[str, object]:
    done = subprocess.run([str(python), SCRIPT, str(cache), mode, "--bound", bound],
                          capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    answer: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return answer


def test_past_its_bound_the_least_recently_used_tree_goes_with_what_only_it_needed(
    tmp_path: Path, two_releases: _Index
) -> None:
    """Two trees sharing wbcachedep, the older used three hours ago, the other just now: past a
    one-byte bound, --report says the older goes and why the other stays, and --prune removes
    the older tree, its lock, its own unpacked wheel and file, and keeps the shared ones and the
    recent tree whole (importable, no download)."""
    cache = tmp_path / "cache"
    index_file = _index_file(tmp_path, two_releases)
    python = _venv(tmp_path / "venv")
    for key, version in (("demo-10", "1.0"), ("demo-11", "1.1")):
        done = _cache(python, cache, index_file, "--tree", key=key, requirement=f"wbcachedemo=={version}")
        assert done.returncode == 0, done.stdout + done.stderr
    old, recent = _tree(cache, "demo-10"), _tree(cache, "demo-11")
    _age(cache, "demo-10", 3 * 3600)
    tag = old.parent.name

    report = _housekeeping(python, cache, "--report", "1")
    assert report["pruned"] is False and old.is_dir()
    trees = {t["name"]: t for t in report["trees"]}  # type: ignore[attr-defined]
    assert trees[f"{tag}/{old.name}"]["drop"] is True
    assert trees[f"{tag}/{recent.name}"]["drop"] is False
    assert "used in the last hour" in trees[f"{tag}/{recent.name}"]["why"]

    pruned = _housekeeping(python, cache, "--prune", "1")
    assert pruned["pruned"] is True
    assert pruned["gone"]["trees"] == [f"{tag}/{old.name}"]  # type: ignore[index]
    assert pruned["gone"]["locks"] == [f"demo-10-{tag}"]  # type: ignore[index]
    assert not old.exists() and not (cache / "trees" / tag / "demo-10").is_symlink()
    assert not (cache / "locks" / f"demo-10-{tag}.txt").exists()
    assert not list(cache.glob("files/*/wbcachedemo-1.0-*.whl"))
    assert list(cache.glob("files/*/wbcachedemo-1.1-*.whl"))
    assert len(list(cache.glob("files/*/wbcachedep-2.0-*.whl"))) == 1
    assert {p.name for p in (cache / "unpacked").glob("*/wbcachedemo-1.0.dist-info")} == set()
    assert len(list((cache / "unpacked").iterdir())) == 2  # wbcachedemo 1.1 and wbcachedep
    assert pruned["bytes_after"] < pruned["bytes"]  # type: ignore[operator]

    two_releases.stop()
    again = _cache(python, cache, index_file, "--tree", key="demo-11", requirement="wbcachedemo==1.1")
    assert again.returncode == 0 and "unpacking" not in again.stdout and "downloading" not in again.stdout
    assert _imports(python) == "1.1 2.0"


def test_a_run_that_adds_past_the_bound_prunes_the_old_tree_and_never_its_own(
    tmp_path: Path, two_releases: _Index
) -> None:
    """The bound holds after every run that adds to the cache, not only in gc: the new tree is
    in use (kept even past the bound), the old one goes."""
    cache, index_file, python = _first_tree(tmp_path, two_releases)
    old = _tree(cache, "demo-10")
    _age(cache, "demo-10", 2 * 3600)
    done = _cache(
        python, cache, index_file, "--tree", key="demo-11", requirement="wbcachedemo==1.1", bound="1k"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        "past its bound of 0.0 GiB" in done.stdout and "removed 1 least recently used tree(s)" in done.stdout
    )
    assert not old.exists()
    assert _tree(cache, "demo-11").is_dir()
    assert _imports(python) == "1.1 2.0"
