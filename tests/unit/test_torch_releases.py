"""wheelbuild.spec.torch_releases and project_pages without a server: project pages (PEP 691 JSON, PEP 503
HTML) read into files, releases and the Python tags of one torch version; the CUDA a wheel's METADATA
says; the page cache; and which release a variant means, over releases whose CUDA is known without a
request (a label, or a METADATA answer kept from before). tests/local/test_default_pythons.py
reads the same over HTTP from a real `wheelbuild serve`, byte ranges included."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import time
from pathlib import Path

import pytest
from wheelbuild.errors import BadArgument, BadVariant, TorchIndexUnreachable
from wheelbuild.index.project_pages import IndexFile, file_url, files_on_page
from wheelbuild.pipeline import preflight
from wheelbuild.progress.console import Console
from wheelbuild.recipes import resolve_recipe
from wheelbuild.secrets import redact_url
from wheelbuild.spec import torch_releases
from wheelbuild.spec.torch_choice import asked_release, newest_of_any_minor, newest_release
from wheelbuild.spec.torch_releases import (
    TorchIndex,
    cuda_of_metadata,
    python_tags,
    releases_of,
    torch_python_tags,
)
from wheelbuild.variants import CudaCompiler, TorchCeiling, any_minor_tags, parse_variant

SECRET = "s3cr3t-t0ken"

# One torch page with every kind of file an index lists. Relative and absolute links, quoted "+".
FILES = [
    # PyTorch's index: local labels
    ("torch-2.10.0+cu128-cp310-cp310-manylinux_2_28_x86_64.whl", False),
    ("torch-2.10.0+cu128-cp311-cp311-manylinux_2_28_x86_64.whl", False),
    ("torch-2.10.0+cu126-cp312-cp312-manylinux_2_28_x86_64.whl", False),
    ("torch-2.10.0+cu128-cp313-cp313t-manylinux_2_28_x86_64.whl", False),  # free-threaded
    ("torch-2.10.0+cu128-cp314-cp314-manylinux_2_28_x86_64.whl", True),  # yanked
    ("torch-2.10.0+cu128-cp315-cp315-win_amd64.whl", False),  # not linux
    ("torch-2.10.0+cu128-cp315-cp315-manylinux_2_28_aarch64.whl", False),  # not x86_64
    ("torch-2.10.0+cu128-cp315-cp315-musllinux_1_2_x86_64.whl", False),  # not glibc
    ("torch-2.10.0+cu128-cp316-cp316-macosx_11_0_arm64.whl", False),
    ("torch-2.10.0-cp39-abi3-manylinux2014_x86_64.whl", False),  # stable ABI, PyPI-style name
    ("torch-2.10.1+cu128-cp38-cp38-manylinux_2_28_x86_64.whl", False),  # another version
    ("torch-2.10.0.dev20260101+cu128-cp37-cp37m-linux_x86_64.whl", False),  # a pre-release
    ("torch-2.10.0.tar.gz", False),  # an sdist
    ("torchvision-2.10.0-cp36-cp36m-manylinux_2_28_x86_64.whl", False),  # another project
    ("torch-2.10.0-not-a-wheel.whl", False),
]
ALL_OF_2_10_0 = frozenset({"cp310", "cp311", "cp312", "cp313t", "cp39-abi3"})


def _json_page() -> bytes:
    files = []
    for index, (name, yanked) in enumerate(FILES):
        entry: dict[str, object] = {"filename": name, "url": f"../../files/{name}", "hashes": {}}
        if yanked:
            entry["yanked"] = "broken build" if index % 2 else True
        elif index % 3 == 0:
            entry["yanked"] = False
        files.append(entry)
    return json.dumps({"meta": {"api-version": "1.1"}, "name": "torch", "files": files}).encode()


def _html_page() -> bytes:
    links = []
    for index, (name, yanked) in enumerate(FILES):
        quoted = name.replace("+", "%2B")
        href = f"/whl/cu128/{quoted}#sha256=00" if index % 2 else f"../../files/{quoted}"
        links.append(f'<a href="{href}"{" data-yanked=" if yanked else ""}>{name}</a><br/>')
    return (
        "<!DOCTYPE html><html><body><h1>Links for torch</h1>" + "".join(links) + "</body></html>"
    ).encode()


# --- redaction --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://pypi.org/simple", "https://pypi.org/simple"),
        (f"https://user:{SECRET}@host.example/simple/", "https://***@host.example/simple/"),
        (f"https://{SECRET}@host.example:8443/simple", "https://***@host.example:8443/simple"),
        (f"https://user:pa@ss{SECRET}@host.example/x", "https://***@host.example/x"),  # "@" in it
        ("https://host.example/simple?to=a@b", "https://host.example/simple?to=***"),
        (f"user:{SECRET}@host.example/simple", "***@host.example/simple"),  # no scheme
    ],
)
def test_redact_url_hides_credentials_and_keeps_the_rest(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert SECRET not in redact_url(url)


# --- pages and tags ---------------------------------------------------------------------------


def test_json_and_html_pages_list_the_same_files_and_yanks() -> None:
    expected = tuple(IndexFile(name, yanked) for name, yanked in FILES)
    assert files_on_page(_json_page(), "application/vnd.pypi.simple.v1+json") == expected
    assert files_on_page(_html_page(), "text/html; charset=utf-8") == expected
    assert files_on_page(_html_page(), "application/vnd.pypi.simple.v1+html") == expected


@pytest.mark.parametrize("media", ["application/vnd.pypi.simple.v1+json", "text/html"])
def test_the_tags_of_one_version_skip_yanked_foreign_and_other_files(media: str) -> None:
    page = _json_page() if media.endswith("json") else _html_page()
    assert python_tags(files_on_page(page, media), "2.10.0") == ALL_OF_2_10_0


def test_a_local_label_in_the_version_asked_matches_only_that_label() -> None:
    files = files_on_page(_json_page(), "application/vnd.pypi.simple.v1+json")
    assert python_tags(files, "2.10.0+cu128") == {"cp310", "cp311", "cp313t"}
    assert python_tags(files, "2.10.0+cu126") == {"cp312"}
    assert python_tags(files, "2.10.1") == {"cp38"}
    assert python_tags(files, "2.10") == ALL_OF_2_10_0  # PEP 440: 2.10 == 2.10.0
    assert python_tags(files, "2.10.0.dev20260101") == {"cp37"}  # asked for exactly, it counts
    assert python_tags(files, "2.9.0") == frozenset()


def test_a_torch_version_that_is_not_a_version_is_a_bad_argument() -> None:
    with pytest.raises(BadArgument) as caught:
        python_tags((), "cu130")
    assert "'cu130' is not a version" in caught.value.cause


def test_json_that_is_not_a_project_page_is_refused() -> None:
    for body in (b"not json", b"[]", b'{"meta": {}}', b'{"files": 3}'):
        with pytest.raises(ValueError):
            files_on_page(body, "application/vnd.pypi.simple.v1+json")


# --- the cache (no request: the URL cannot be reached) ---------------------------------------

UNREACHABLE = f"http://user:{SECRET}@127.0.0.1:9/simple"  # port 9: refused at once


def _put_in_cache(cache: Path, url: str, files: list[IndexFile], fetched: float) -> Path:
    path = torch_releases._page_cache(cache, url)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "index": redact_url(url).rstrip("/"),
        "fetched": fetched,
        "files": [[f.filename, f.yanked, f.url, f.sha256, f.metadata] for f in files],
    }
    path.write_text(json.dumps(record))
    return path


def _wheel(version: str, python: str, sha256: str = "") -> IndexFile:
    return IndexFile(f"torch-{version}-{python}-{python}-manylinux_2_28_x86_64.whl", False, sha256=sha256)


TORCH_2_11 = [_wheel("2.11.0", "cp311"), _wheel("2.11.0", "cp313")]


def test_a_fresh_cached_page_is_used_without_a_request(tmp_path: Path) -> None:
    path = _put_in_cache(tmp_path, UNREACHABLE, TORCH_2_11, time.time() - 3600)
    said: list[str] = []
    assert torch_python_tags(UNREACHABLE, "2.11.0", cache=tmp_path, on_line=said.append) == {"cp311", "cp313"}
    assert said == ["torch 2.11.0 on http://***@127.0.0.1:9/simple has wheels for cp311, cp313 (cached)"]
    assert SECRET not in path.name and SECRET not in path.read_text()
    # the same index with other credentials shares the entry: the key holds none of them
    assert torch_python_tags("http://other:pw@127.0.0.1:9/simple/", "2.11.0", cache=tmp_path) == {
        "cp311",
        "cp313",
    }


def test_a_version_the_cached_page_lacks_reads_the_page_again(tmp_path: Path) -> None:
    """A release published since the page was kept: the index is asked (here it cannot answer)."""
    _put_in_cache(tmp_path, UNREACHABLE, TORCH_2_11, time.time() - 60)
    with pytest.raises(TorchIndexUnreachable):
        torch_python_tags(UNREACHABLE, "2.12.0", cache=tmp_path)


@pytest.mark.parametrize(
    "spoil",
    [
        lambda record: record.update(fetched=record["fetched"] - 2 * 86400),  # a day old
        lambda record: record.update(fetched=record["fetched"] + 3600),  # from the future
        lambda record: record.update(files="cp311"),
        lambda record: record.update(index="https://elsewhere.example/simple"),
        lambda record: record.pop("fetched"),
    ],
)
def test_a_stale_or_garbled_cache_entry_is_not_trusted(tmp_path: Path, spoil: object) -> None:
    path = _put_in_cache(tmp_path, UNREACHABLE, TORCH_2_11, time.time() - 60)
    record = json.loads(path.read_text())
    spoil(record)  # type: ignore[operator]
    path.write_text(json.dumps(record))
    with pytest.raises(TorchIndexUnreachable) as caught:
        torch_python_tags(UNREACHABLE, "2.11.0", cache=tmp_path)
    assert caught.value.exit_code == 25
    assert "http://***@127.0.0.1:9/simple/torch/" in caught.value.cause
    assert SECRET not in str(caught.value)
    assert "--torch-index-url" in caught.value.remedy and "--python" in caught.value.remedy


def test_garbage_in_the_cache_file_is_not_trusted(tmp_path: Path) -> None:
    path = torch_releases._page_cache(tmp_path, UNREACHABLE)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x00{not json")
    with pytest.raises(TorchIndexUnreachable):
        torch_python_tags(UNREACHABLE, "2.11.0", cache=tmp_path)


# --- releases and their CUDA ------------------------------------------------------------------


def test_releases_are_the_final_versions_newest_first_each_label_its_own() -> None:
    files = files_on_page(_json_page(), "application/vnd.pypi.simple.v1+json")
    found = {r.version: r.pythons for r in releases_of(files)}
    # no pre-release (2.10.0.dev...), no yanked file, no other platform, project or sdist
    assert list(found) == ["2.10.1+cu128", "2.10.0+cu128", "2.10.0+cu126", "2.10.0"]
    assert found["2.10.0+cu128"] == {"cp310", "cp311", "cp313t"}
    assert found["2.10.0"] == {"cp39-abi3"}
    labels = {r.version: r.label_cuda for r in releases_of(files)}
    assert labels == {"2.10.1+cu128": "12.8", "2.10.0+cu128": "12.8", "2.10.0+cu126": "12.6", "2.10.0": None}


# Requires-Dist lines as torch's own METADATA writes them (2.14.1, 2.15.0, 2.10.0, a CPU build).
TORCH_2_14_1 = (
    'Requires-Dist: cuda-toolkit[cublas,cudart,cufft]==13.0.3; platform_system == "Linux"\n'
    'Requires-Dist: nvidia-cudnn-cu13==9.19.0.56; platform_system == "Linux"\n'
)


@pytest.mark.parametrize(
    ("requires", "cuda"),
    [
        (TORCH_2_14_1, "13.0"),
        ('Requires-Dist: cuda-toolkit[cublas,nvtx]==13.2.2; platform_system == "Linux"\n', "13.2"),
        ('Requires-Dist: nvidia-cuda-runtime-cu12==12.8.90; platform_system == "Linux"\n', "12.8"),
        ("Requires-Dist: nvidia-cuda-runtime==13.1.80\n", "13.1"),
        ("Requires-Dist: filelock\nRequires-Dist: sympy>=1.13.3\n", "cpu"),
        ("Requires-Dist: cuda-toolkit>=13\nRequires-Dist: not a requirement ((\n", "cpu"),
    ],
)
def test_the_cuda_of_a_torch_wheel_is_its_runtime_pin(requires: str, cuda: str) -> None:
    metadata = f"Metadata-Version: 2.1\nName: torch\nVersion: 2.14.1\n{requires}\nRequires-Dist: x\n"
    # A line in the description after the headers never counts.
    body = "\n\nRequires-Dist: cuda-toolkit==99.9.0\n"
    assert cuda_of_metadata((metadata + body).encode()) == cuda


def _with_known_cuda(cache: Path, files: list[IndexFile], cudas: dict[str, str]) -> None:
    """What an earlier read of each wheel's METADATA kept (keyed by the wheel's sha256)."""
    store = cache / "torch-cuda"
    store.mkdir(parents=True, exist_ok=True)
    for file in files:
        version = file.filename.split("-")[1]
        (store / f"{file.sha256[:40]}.json").write_text(
            json.dumps({"wheel": file.filename, "cuda": cudas[version]})
        )


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


PYPI_LIKE = [
    _wheel(version, python, _sha(version + python))
    for version, pythons in {
        "2.15.0": ("cp311", "cp313", "cp314"),
        "2.14.1": ("cp310", "cp311", "cp313"),
        "2.14.0": ("cp311",),
        "2.13.0": ("cp311",),
        "2.10.0": ("cp311", "cp313"),
    }.items()
    for python in pythons
]
PYPI_CUDA = {"2.15.0": "13.2", "2.14.1": "13.0", "2.14.0": "13.0", "2.13.0": "13.0", "2.10.0": "12.8"}


def test_the_newest_release_of_the_variants_cuda_is_chosen_and_said_why(tmp_path: Path) -> None:
    _with_known_cuda(tmp_path, PYPI_LIKE, PYPI_CUDA)
    index = TorchIndex(UNREACHABLE, tuple(PYPI_LIKE))  # no request is made: every CUDA is known
    choice = newest_release(index, parse_variant("cu130"), ("cp311", "cp313"), cache=tmp_path)
    assert choice.version == "2.14.1"
    assert choice.why == (
        "torch 2.14.1: newest on http://***@127.0.0.1:9/simple built with CUDA 13.0 with cp311, cp313 "
        "wheels (2.15.0 is CUDA 13.2)"
    )
    assert newest_release(index, parse_variant("cu132"), ("cp311",), cache=tmp_path).version == "2.15.0"
    assert newest_release(index, parse_variant("cu128"), ("cp313",), cache=tmp_path).version == "2.10.0"
    # Only a release with a wheel for the build's Pythons counts.
    assert newest_release(index, parse_variant("cu130"), ("cp310",), cache=tmp_path).version == "2.14.1"
    with pytest.raises(BadVariant) as caught:
        newest_release(index, parse_variant("cu130"), ("cp314",), cache=tmp_path)
    assert "has no torch release built with CUDA 13.0 (cu130) with a wheel for cp314" in caught.value.cause
    assert SECRET not in str(caught.value)


def test_torch_newest_is_the_newest_release_of_any_cuda_13_minor_a_toolkit_compiles(tmp_path: Path) -> None:
    """--torch newest compares each tag's newest release: PyPI's 2.15.0 (CUDA 13.2) beats 2.14.1
    (13.0), and the variant is cu132's, still to be chosen for the build's Pythons."""
    _with_known_cuda(tmp_path, PYPI_LIKE, PYPI_CUDA)
    index = TorchIndex(UNREACHABLE, tuple(PYPI_LIKE))
    asked = parse_variant("newest", UNREACHABLE)
    assert asked.any_minor and asked.tag == "cu132"
    candidates = [(parse_variant(tag, UNREACHABLE), index) for tag in any_minor_tags()]
    assert [v.tag for v, _i in candidates] == ["cu132", "cu130"]
    variant, why = newest_of_any_minor(candidates, ("cp311",), cache=tmp_path)
    assert (variant.tag, variant.newest, variant.any_minor) == ("cu132", True, False)
    assert why.startswith("--torch newest: cu132 (cu132 2.15.0, cu130 2.14.1); torch 2.15.0: newest on ")
    # For a Python 2.15.0 has no wheel for, CUDA 13.0's newest is the newest there is.
    variant, why = newest_of_any_minor(candidates, ("cp310",), cache=tmp_path)
    assert variant.tag == "cu130" and "(cu130 2.14.1)" in why
    with pytest.raises(BadVariant) as caught:
        newest_of_any_minor(candidates, ("cp39",), cache=tmp_path)
    assert (
        "no index has a torch release of any CUDA 13 minor wheelbuild compiles (cu132, cu130)"
        in caught.value.cause
    )


def test_the_plan_says_which_toolkit_compiles_the_torch_and_why() -> None:
    cu132 = parse_variant("2.15.0+cu132")
    assert preflight.toolkit_note(cu132, CudaCompiler.cuda13("13.2")) == (
        "CUDA 13.2, in the wheelbuild-cuda132 image (NVIDIA's PyPI wheels): torch 2.15.0 is a CUDA 13.2 build"
    )
    note = preflight.toolkit_note(parse_variant("2.14.1+cu130"), CudaCompiler.cuda13("13.1"))
    assert note.startswith(
        "CUDA 13.1, in the wheelbuild-cuda131 image (NVIDIA's PyPI wheels): torch 2.14.1 is a CUDA 13.0 build"
    )
    assert "a newer CUDA 13 minor compiles for it (torch warns of the minor only" in note
    cuda12 = preflight.toolkit_note(parse_variant("2.10.0+cu128"), CudaCompiler.cuda12("12.8"))
    assert cuda12.startswith("CUDA 12.8, in the CUDA 12 layer beside the image's CUDA 13: ")


def test_a_labelled_release_needs_no_metadata(tmp_path: Path) -> None:
    files = [
        _wheel("2.11.0+cu130", "cp311"),
        _wheel("2.11.0+cu128", "cp311"),
        _wheel("2.12.0+cu128", "cp311"),
    ]
    index = TorchIndex(UNREACHABLE, tuple(files))
    assert newest_release(index, parse_variant("cu130"), ("cp311",), cache=tmp_path).version == "2.11.0"
    assert newest_release(index, parse_variant("cu128"), ("cp311",), cache=tmp_path).version == "2.12.0"
    assert not (tmp_path / "torch-cuda").exists()


def test_a_release_asked_for_is_checked_against_its_tags_cuda(tmp_path: Path) -> None:
    _with_known_cuda(tmp_path, PYPI_LIKE, PYPI_CUDA)
    index = TorchIndex(UNREACHABLE, tuple(PYPI_LIKE))
    assert asked_release(index, parse_variant("2.13.0+cu130"), cache=tmp_path).version == "2.13.0"
    with pytest.raises(BadVariant) as caught:
        asked_release(index, parse_variant("2.10.0+cu130"), cache=tmp_path, python="cp311")
    assert (
        caught.value.cause
        == "torch 2.10.0 on http://***@127.0.0.1:9/simple is built with CUDA 12.8, not 13.0 (cu130)"
    )
    # One the index does not list is left to the Python choice, which says so.
    assert asked_release(index, parse_variant("2.9.0+cu130"), cache=tmp_path).why == "torch 2.9.0: as asked"


def test_a_files_url_carries_the_index_credentials_to_its_own_host_only() -> None:
    page = f"https://user:{SECRET}@wheels.example/simple/torch/"
    here = IndexFile(
        "torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl", False, url="../../files/t.whl#sha256=ab"
    )
    there = IndexFile("t.whl", False, url="https://files.example/packages/t.whl")
    assert file_url(page, here) == f"https://user:{SECRET}@wheels.example/files/t.whl"
    assert file_url(page, there) == "https://files.example/packages/t.whl"
    assert file_url("https://wheels.example/simple/torch/", here) == "https://wheels.example/files/t.whl"


# A ceiling as a recipe states one where a build under the raised standard was seen to fail.
SEEN_TO_FAIL = TorchCeiling(first="2.14", last_good="2.13.0", why="its kernels fail under C++20 (seen: ...)")


def test_flash_attn_has_no_torch_ceiling_since_its_cxx17_is_raised_to_torchs() -> None:
    assert resolve_recipe("flash-attn").torch_ceiling is None


def test_a_recipes_torch_ceiling_passes_newer_releases_over_and_refuses_one_asked(tmp_path: Path) -> None:
    ceiling = SEEN_TO_FAIL
    capped = dataclasses.replace(resolve_recipe("flash-attn"), torch_ceiling=ceiling)
    _with_known_cuda(tmp_path, PYPI_LIKE, PYPI_CUDA)
    index = TorchIndex(UNREACHABLE, tuple(PYPI_LIKE))
    choice = newest_release(index, parse_variant("cu130"), ("cp311",), cache=tmp_path, ceiling=ceiling)
    assert choice.version == "2.13.0"
    assert f"(2.14 and newer: {ceiling.why}" in choice.why
    with pytest.raises(BadVariant) as caught:
        preflight.resolve_torch(
            parse_variant("2.14.1+cu130"),
            index,
            ("cp311",),
            Console(io.StringIO()),
            capped,
        )
    assert caught.value.exit_code == 11
    assert caught.value.cause == f"flash-attn cannot be built for torch 2.14.1: {ceiling.why}"
    # Offline, a table release past the ceiling gives way to the newest known to compile, said.
    offline = dataclasses.replace(parse_variant("cu130"), torch_version="2.14.1")  # as the table may say
    said = io.StringIO()
    variant, why = preflight.resolve_torch(offline, None, ("cp311",), Console(said), capped)
    assert variant.torch_version == ceiling.last_good == "2.13.0" and not variant.newest
    assert why.startswith(
        "torch 2.13.0: the newest cu130 release flash-attn compiles with that wheelbuild knew of"
    )
    assert why in said.getvalue()
    # A package without a ceiling gets the newest.
    assert newest_release(index, parse_variant("cu130"), ("cp311",), cache=tmp_path).version == "2.14.1"
