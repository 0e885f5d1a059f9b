"""wheelbuild.pipeline.results: finished builds kept by the hash of their inputs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from wheelbuild.errors import SourceUnavailable
from wheelbuild.pipeline.results import code_digest, lookup, result_key, save, source_digest, source_key
from wheelbuild.recipes import LocalSdist

# result_key's keyword arguments, each test varying one of them
BASE: dict[str, Any] = {
    "source": "s" * 64,
    "image_inputs": "i" * 64,
    "variant": "2.11.0+cu130",
    "index_url": "https://user:secret@example.invalid/simple",
    "archs": (100, 120),
    "pythons": ("cp311",),
    "env": {"MAX_JOBS": "4", "NVCC_THREADS": "2", "WBDEMO_CUDA_ARCHS": "100;120"},
    "tools": {"wheelbuild": "0.1.0", "cibuildwheel": "4.3.5"},
    "contract": {"keep_package_archs": False, "build_network": False},
}


def test_parallelism_does_not_change_the_key() -> None:
    other: dict[str, Any] = {**BASE, "env": {**BASE["env"], "MAX_JOBS": "1", "NVCC_THREADS": "1"}}
    assert result_key(**BASE) == result_key(**other)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("source", "t" * 64),
        ("image_inputs", "j" * 64),
        ("variant", "2.10.0+cu128"),
        ("index_url", "https://pypi.org/simple"),
        ("archs", (100,)),
        ("pythons", ("cp311", "cp312")),
        ("env", {"WBDEMO_CUDA_ARCHS": "100;120", "WBDEMO_BLOB_SALT": "x"}),
        ("tools", {"wheelbuild": "0.2.0", "cibuildwheel": "4.3.5"}),
        # The package's own arch list, or the network while it builds, changes what it holds.
        ("contract", {"keep_package_archs": True, "build_network": False}),
        ("contract", {"keep_package_archs": False, "build_network": True}),
    ],
)
def test_every_input_changes_the_key(field: str, value: object) -> None:
    assert result_key(**{**BASE, field: value}) != result_key(**BASE)


def test_credentials_are_no_input_of_the_key() -> None:
    # The same index read with another (rotated) token builds the same wheels.
    rotated = {**BASE, "index_url": "https://user:rotated@example.invalid/simple"}
    anonymous = {**BASE, "index_url": "https://example.invalid/simple"}
    assert result_key(**BASE) == result_key(**rotated) == result_key(**anonymous)


def test_code_digest_follows_wheelbuilds_own_code(tmp_path: Path) -> None:
    package = tmp_path / "wheelbuild"
    (package / "recipes").mkdir(parents=True)
    (package / "build.py").write_text("STEP = 1\n")
    (package / "recipes" / "flash_attn.py").write_text("FLAGS = ()\n")
    before = code_digest(package)
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "build.cpython-311.pyc").write_bytes(b"\0")
    (package / "_example").mkdir()
    (package / "_example" / "setup.py").write_text("setup()\n")  # keyed as the source instead
    code_digest.cache_clear()
    assert code_digest(package) == before
    (package / "recipes" / "flash_attn.py").write_text("FLAGS = ('-O3',)\n")
    code_digest.cache_clear()
    assert code_digest(package) != before


def test_code_digest_follows_the_scripts_the_build_container_runs(tmp_path: Path) -> None:
    package = tmp_path / "wheelbuild"
    package.mkdir()
    (package / "build.py").write_text("STEP = 1\n")
    script = tmp_path / "wheelbuild-before-build"
    script.write_text("pip install torch\n")
    before = code_digest(package, (script,))
    assert before != code_digest(package)
    script.write_text("pip install --no-deps torch\n")
    code_digest.cache_clear()
    assert code_digest(package, (script,)) != before


def _project(root: Path) -> Path:
    (root / "csrc").mkdir(parents=True)
    (root / "setup.py").write_text("setup()\n")
    (root / "csrc" / "a.cu").write_text("__global__ void k() {}\n")
    return root


def test_source_digest_ignores_build_output_but_not_sources(tmp_path: Path) -> None:
    project = _project(tmp_path / "p")
    before = source_digest(project)
    for junk in ("build/temp/a.o", "x.egg-info/PKG-INFO", "__pycache__/m.pyc", ".git/HEAD"):
        (project / junk).parent.mkdir(parents=True, exist_ok=True)
        (project / junk).write_text("junk")
    assert source_digest(project) == before
    (project / "csrc" / "a.cu").write_text("__global__ void k2() {}\n")
    assert source_digest(project) != before


def test_saved_build_is_found_and_an_unknown_key_is_not(tmp_path: Path) -> None:
    wheel = tmp_path / "wbdemo-0.1.0-cp311-cp311-manylinux_2_34_x86_64.whl"
    wheel.write_bytes(b"PK wheel")
    report = tmp_path / "build-report.json"
    report.write_text('{"run_id": "r1"}')
    store = tmp_path / "store"
    assert lookup(store, "k" * 64) is None
    save(store, "k" * 64, [wheel], report)
    (found,) = lookup(store, "k" * 64) or []
    assert found.read_bytes() == b"PK wheel"
    assert not [p for p in store.iterdir() if p.name.startswith(".")]  # no staging left behind


def test_an_entry_without_its_report_is_not_a_finished_build(tmp_path: Path) -> None:
    entry = tmp_path / "store" / ("k" * 64)
    entry.mkdir(parents=True)
    (entry / "x-0.1-cp311-cp311-linux_x86_64.whl").write_bytes(b"half")
    assert lookup(tmp_path / "store", "k" * 64) is None


def test_a_rebuild_replaces_the_entry(tmp_path: Path) -> None:
    report = tmp_path / "build-report.json"
    report.write_text("{}")
    old, new = (
        tmp_path / "old" / "x-1-cp311-cp311-linux_x86_64.whl",
        tmp_path / "new" / "x-1-cp311-cp311-linux_x86_64.whl",
    )
    for wheel, data in ((old, b"old"), (new, b"new")):
        wheel.parent.mkdir()
        wheel.write_bytes(data)
    save(tmp_path / "store", "k" * 64, [old], report)
    save(tmp_path / "store", "k" * 64, [new], report)
    (found,) = lookup(tmp_path / "store", "k" * 64) or []
    assert found.read_bytes() == b"new"
    assert [p.name for p in (tmp_path / "store").iterdir()] == ["k" * 64]


def test_a_project_holding_a_link_to_a_device_or_a_fifo_is_keyed_without_reading_them(tmp_path: Path) -> None:
    """A source folder with a link to /dev/zero and a FIFO (a hostile project, or an unpacked CI
    artifact): the key is computed at once, by where the link points and what the FIFO is, and
    moves when the link does. A FIFO given as the sdist itself is refused, not waited on."""
    (tmp_path / "setup.py").write_text("")
    (tmp_path / "zero").symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "pipe")
    first = source_digest(tmp_path)
    assert first == source_digest(tmp_path)
    (tmp_path / "zero").unlink()
    (tmp_path / "zero").symlink_to("/dev/null")
    assert source_digest(tmp_path) != first
    with pytest.raises(SourceUnavailable, match="is not a regular file"):
        source_key(LocalSdist(tmp_path / "pipe", None))
