"""wheelbuild.wheel.contents.inspect_wheel, wheelbuild.wheel.stamp and wheelbuild.pipeline.check on wheels holding real CUDA
shared objects, compiled here by nvcc (no GPU needed to compile)."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import subprocess
import sys
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest
from wheelbuild.errors import ArchMissing, InvalidWheel, TorchNotPinned, VersionLabelWrong
from wheelbuild.pipeline.check import Expectation, check_wheel, first_problem
from wheelbuild.variants import parse_variant
from wheelbuild.wheel.contents import inspect_wheel
from wheelbuild.wheel.stamp import stamp_wheel, stamped_metadata

from tests import toolchain
from tests.indexkit import lock_held, make_wheel

NVCC = toolchain.require("nvcc")
WHEELBUILD = Path(sys.executable).parent / "wheelbuild"

KERNEL = '__global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }\nextern "C" void l(float* x) { k<<<1, 32>>>(x); }\n'
STAMP = parse_variant("2.11.0+cu130")  # label cu130torch2.11, torch pinned to 2.11.*
EXPECT = Expectation(archs=(100, 120), variant=STAMP)
SO = "wbtiny/_C.cpython-311-x86_64-linux-gnu.so"


@pytest.fixture(scope="module")
def shared_objects(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """Two real extension modules linking the shared CUDA runtime: sm_100 + sm_120, and sm_100 only."""
    d = tmp_path_factory.mktemp("so")
    (d / "k.cu").write_text(KERNEL)
    gencode = {"both": ["100", "120"], "sm100": ["100"]}
    link = toolchain.cuda_link_flags(d / "lib")
    procs = {
        name: subprocess.Popen(
            [
                NVCC,
                "-shared",
                "-Xcompiler",
                "-fPIC",
                "-cudart",
                "shared",
                str(d / "k.cu"),
                "-o",
                str(d / f"{name}.so"),
            ]
            + link
            + [f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for name, archs in gencode.items()
    }
    for proc in procs.values():
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, out.decode(errors="replace")
    return {name: (d / f"{name}.so").read_bytes() for name in gencode}


def _wheel(directory: Path, so: bytes, **kwargs: object) -> Path:
    return make_wheel(
        directory,
        tag="cp311-cp311-manylinux_2_34_x86_64",
        extra_files={SO: so},
        **kwargs,  # type: ignore[arg-type]
    )


def _record_is_consistent(path: Path) -> None:
    with zipfile.ZipFile(path) as wheel:
        (record_name,) = [n for n in wheel.namelist() if n.endswith(".dist-info/RECORD")]
        rows = {row[0]: row for row in csv.reader(io.StringIO(wheel.read(record_name).decode())) if row}
        assert set(rows) == set(wheel.namelist())
        for member, (_, digest, size) in rows.items():
            if member == record_name:
                continue
            data = wheel.read(member)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert digest == f"sha256={expected}" and int(size) == len(data), member


def test_inspect_reads_name_version_tags_hash_torch_cudart_and_archs(
    shared_objects: dict[str, bytes], tmp_path: Path
) -> None:
    path = _wheel(
        tmp_path, shared_objects["both"], version="0.1.0+cu130torch2.11", requires_dist=("torch==2.11.*",)
    )
    info = inspect_wheel(path)
    assert (info.name, info.version, info.metadata_version) == (
        "wbtiny",
        "0.1.0+cu130torch2.11",
        "0.1.0+cu130torch2.11",
    )
    assert info.tags == ("cp311-cp311-manylinux_2_34_x86_64",)
    assert info.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert info.torch_requirements == ("torch==2.11.*",)
    assert info.local_label == "cu130torch2.11"
    (module,) = info.modules
    assert module.member == SO and module.cudart == ("libcudart.so.13",)
    assert (sorted(module.archs.sass), sorted(module.archs.ptx)) == ([100, 120], [])
    modules = info.to_json()["extension_modules"]
    assert isinstance(modules, dict)
    assert modules[SO] == {"sass": [100, 120], "ptx": [], "cudart": ["libcudart.so.13"]}


def test_inspect_refuses_what_is_not_a_wheel(tmp_path: Path) -> None:
    bad = tmp_path / "wbtiny-0.1.0-py3-none-any.whl"
    bad.write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="not a zip"):
        inspect_wheel(bad)
    with pytest.raises(ValueError, match="not a wheel filename"):
        inspect_wheel(tmp_path / "wbtiny.whl")


def test_stamp_sets_label_and_pin_consistently_and_keeps_every_other_byte(
    shared_objects: dict[str, bytes], tmp_path: Path
) -> None:
    original = _wheel(
        tmp_path, shared_objects["both"], version="0.1.0", requires_dist=("numpy", "torch>=2.0")
    )
    before = {i.filename: i for i in zipfile.ZipFile(original).infolist()}
    so_bytes = zipfile.ZipFile(original).read(SO)

    stamped = stamp_wheel(original, STAMP)

    assert stamped.name == "wbtiny-0.1.0+cu130torch2.11-cp311-cp311-manylinux_2_34_x86_64.whl"
    assert not original.exists()  # replaced, not duplicated
    info = inspect_wheel(stamped)
    assert info.metadata_version == info.version == "0.1.0+cu130torch2.11"
    assert info.requires_dist == ("numpy", "torch==2.11.*")
    assert check_wheel(info, EXPECT) == []
    _record_is_consistent(stamped)
    with zipfile.ZipFile(stamped) as wheel:
        assert wheel.read(SO) == so_bytes
        assert {n.split("/")[0] for n in wheel.namelist() if ".dist-info" in n} == {
            "wbtiny-0.1.0+cu130torch2.11.dist-info"
        }
        for info_after in wheel.infolist():
            old_name = info_after.filename.replace("0.1.0+cu130torch2.11.dist-info", "0.1.0.dist-info")
            old = before[old_name]
            assert (info_after.date_time, info_after.external_attr, info_after.compress_type) == (
                old.date_time,
                old.external_attr,
                old.compress_type,
            )


def test_stamping_twice_changes_nothing(shared_objects: dict[str, bytes], tmp_path: Path) -> None:
    stamped = stamp_wheel(_wheel(tmp_path, shared_objects["both"], version="0.1.0"), STAMP)
    data = stamped.read_bytes()
    assert stamp_wheel(stamped, STAMP) == stamped and stamped.read_bytes() == data


def test_stamp_replaces_another_variants_label(shared_objects: dict[str, bytes], tmp_path: Path) -> None:
    stamped = stamp_wheel(_wheel(tmp_path, shared_objects["both"], version="2.8.3+cu12torch2.6"), STAMP)
    assert inspect_wheel(stamped).version == "2.8.3+cu130torch2.11"


def test_stamped_metadata_keeps_markers_extras_and_the_body() -> None:
    metadata = (
        b"Metadata-Version: 2.1\nName: x\nVersion: 1.0\nRequires-Dist: torch[opt]>=2; extra == 'gpu'\n"
        b"Description-Content-Type: text/markdown\n\n# x\nRequires-Dist: torch is prose here\n"
    )
    out = stamped_metadata(metadata, "1.0+cu130torch2.11", STAMP).decode()
    head, _, body = out.partition("\n\n")
    assert "Version: 1.0+cu130torch2.11" in head
    assert 'Requires-Dist: torch[opt]==2.11.*; extra == "gpu"' in head
    assert "Requires-Dist: torch==2.11.*" in head.split("\n")  # a marker-only pin is no pin
    assert body == "# x\nRequires-Dist: torch is prose here\n"


def test_check_refuses_a_wheel_with_an_arch_stripped(
    shared_objects: dict[str, bytes], tmp_path: Path
) -> None:
    stamped = stamp_wheel(_wheel(tmp_path, shared_objects["sm100"], version="0.1.0"), STAMP)
    (problem,) = check_wheel(inspect_wheel(stamped), EXPECT)
    assert isinstance(problem, ArchMissing) and problem.exit_code == 44
    assert "no SASS for sm_120 (it has sm_100)" in problem.cause


def test_check_refuses_a_wrong_label(shared_objects: dict[str, bytes], tmp_path: Path) -> None:
    path = _wheel(
        tmp_path, shared_objects["both"], version="0.1.0+cu128torch2.10", requires_dist=("torch==2.11.*",)
    )
    (problem,) = check_wheel(inspect_wheel(path), EXPECT)
    assert isinstance(problem, VersionLabelWrong) and "cu128torch2.10" in problem.cause


def test_check_refuses_no_label_and_no_pin_and_names_both(
    shared_objects: dict[str, bytes], tmp_path: Path
) -> None:
    path = _wheel(tmp_path, shared_objects["both"], version="0.1.0", requires_dist=("torch",))
    problems = check_wheel(inspect_wheel(path), EXPECT)
    assert [type(p) for p in problems] == [VersionLabelWrong, TorchNotPinned]
    first = first_problem(problems)
    assert (
        isinstance(first, VersionLabelWrong) and "also:" in first.details and "torch==2.11.*" in first.details
    )


@pytest.mark.parametrize(
    ("requirement", "pinned"),
    [
        ("torch==2.11.*", True),
        ("torch>=2.11,<2.12", True),
        ("torch~=2.11.0", True),
        ("torch>=2.11", False),
        ("torch==2.11.0", False),  # refuses 2.11.1, which is ABI-compatible: not the pin we write
        ("torch==2.10.*", False),
        ("torch", False),
    ],
)
def test_what_counts_as_a_torch_pin(
    shared_objects: dict[str, bytes], tmp_path: Path, requirement: str, pinned: bool
) -> None:
    path = _wheel(
        tmp_path, shared_objects["both"], version="0.1.0+cu130torch2.11", requires_dist=(requirement,)
    )
    problems = check_wheel(inspect_wheel(path), EXPECT)
    assert (problems == []) == pinned, problems
    assert all(isinstance(p, TorchNotPinned) for p in problems)


def test_check_refuses_metadata_that_disagrees_with_the_file_name(
    shared_objects: dict[str, bytes], tmp_path: Path
) -> None:
    path = _wheel(
        tmp_path,
        shared_objects["both"],
        version="0.1.0+cu130torch2.11",
        metadata_version="0.1.0",
        requires_dist=("torch==2.11.*",),
    )
    (problem,) = check_wheel(inspect_wheel(path), EXPECT)
    assert isinstance(problem, InvalidWheel) and "METADATA says version 0.1.0" in problem.cause


def test_check_refuses_a_wheel_without_device_code(tmp_path: Path) -> None:
    path = make_wheel(tmp_path, version="0.1.0+cu130torch2.11", requires_dist=("torch==2.11.*",))
    (problem,) = check_wheel(inspect_wheel(path), EXPECT)
    assert isinstance(problem, ArchMissing) and "no extension module holds CUDA code" in problem.cause


def test_check_refuses_a_wheel_without_the_ptx_asked_for_and_allows_it_with_it(
    shared_objects: dict[str, bytes], tmp_path: Path
) -> None:
    stamped = stamp_wheel(_wheel(tmp_path, shared_objects["both"], version="0.1.0"), STAMP)
    (problem,) = check_wheel(inspect_wheel(stamped), replace(EXPECT, ptx=(120,)))
    assert isinstance(problem, ArchMissing)
    assert problem.cause.endswith("has no PTX for compute_120")


def test_publish_judges_the_copy_it_serves_so_a_wheel_replaced_midway_is_refused(
    shared_objects: dict[str, bytes], tmp_path: Path
) -> None:
    labelled = {"version": "0.1.0+cu130torch2.11", "requires_dist": ("torch==2.11.*",)}
    wheel = _wheel(tmp_path / "in", shared_objects["both"], **labelled)
    stripped = _wheel(tmp_path / "other", shared_objects["sm100"], **labelled)  # no sm_120: refused
    tree = tmp_path / "tree"
    torch, archs = "2.11.0+cu130", "100,120"  # what it was built for (cu130 alone: the newest torch)
    command = [str(WHEELBUILD), "publish", str(wheel), "--torch", torch, "--archs", archs, "--to", str(tree)]
    with lock_held(tree) as waited:
        child = subprocess.Popen(
            command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        waited(child)  # publish checked the wheel it was given, and now waits for the tree's lock
        os.replace(stripped, wheel)
    out, err = child.communicate(timeout=300)
    assert child.returncode == 44, out + err
    assert "no SASS for sm_120" in err
    assert not list(tree.rglob("*.whl"))
