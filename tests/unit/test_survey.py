"""The survey of a package's build files (builder/recipes/survey.py): what real sdists from PyPI
say about building here (switches and their values, the archs they name, prebuilt downloads,
GPU-gated CUDA, missing sources), the patterns one at a time, and hostile archives, each
refused or ignored without a crash, without extracting or running anything."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from wheelbuild.recipes import survey
from wheelbuild.recipes.survey import Survey, Switch, survey_source

from tests.sdists import make_sdist

# --- the patterns, one at a time, in a project directory --------------------------------------


def _project(tmp_path: Path, files: dict[str, str]) -> Survey:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return survey_source(tmp_path, ".")


def _switches(tmp_path: Path, setup_py: str) -> dict[str, str]:
    found = _project(tmp_path, {"setup.py": "import os\n" + setup_py + "\n"})
    return {s.name: s.value for s in found.switches}


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ('F = os.getenv("DEMO_FORCE_BUILD", "FALSE") == "TRUE"', {"DEMO_FORCE_BUILD": "TRUE"}),
        ('if os.environ.get("FORCE_CUDA", "0") == "1":\n    pass', {"FORCE_CUDA": "1"}),
        # mmcv: `== "0"` guards the branch that skips the ops
        ('if os.getenv("MMCV_WITH_OPS", "1") == "0":\n    exts = []', {"MMCV_WITH_OPS": "1"}),
        ('on = os.environ.get("DEMO_FORCE_BUILD", "").lower() in ("yes", "1")', {"DEMO_FORCE_BUILD": "yes"}),
        ('on = bool(int(os.getenv("BUILD_CUDA_EXT", "0")))', {"BUILD_CUDA_EXT": "1"}),
        ('on = int(os.environ.get("BUILD_CUDA_EXT", "1")) == 1', {"BUILD_CUDA_EXT": "1"}),
        # torchmd-net: checked for validity first, then compared through the variable
        (
            'v = os.getenv("WITH_CUDA")\nif v not in ("0", "1"):\n    raise ValueError\nuse = v == "1"',
            {"WITH_CUDA": "1"},
        ),
        ('from os import environ\nif environ["FORCE_CUDA"] == "true":\n    pass', {"FORCE_CUDA": "true"}),
        ('if "FORCE_CUDA" in os.environ:\n    pass', {"FORCE_CUDA": "1"}),
        # deepspeed: through a helper that reads the parameter it is given
        (
            'def get_env(key, default=""):\n    return os.environ.get(key, None) or default\n'
            'OPS = int(get_env("DS_BUILD_OPS", 0))',
            {"DS_BUILD_OPS": "1"},
        ),
        ('F = os.getenv("CUROPE_FORCE_CUDA", "off") != "off"', {"CUROPE_FORCE_CUDA": "on"}),
        (
            'F = os.getenv("DEMO_FORCE_BUILD", "False")\nif F == "True":\n    pass',
            {"DEMO_FORCE_BUILD": "True"},
        ),
        ('on = os.getenv("APEX_CUDA_EXT", "0") == "1"', {"APEX_CUDA_EXT": "1"}),
    ],
)
def test_a_switch_takes_the_value_the_file_compares_it_against(
    tmp_path: Path, code: str, expected: dict[str, str]
) -> None:
    assert _switches(tmp_path, code) == expected


def test_a_switch_that_skips_disables_or_changes_the_abi_is_never_set(tmp_path: Path) -> None:
    code = "\n".join(
        f'x{i} = os.getenv("{name}", "0") == "1"'
        for i, name in enumerate(
            (
                "DEMO_SKIP_CUDA_BUILD",
                "DEMO_FORCE_CXX11_ABI",
                "FORCE_ONLY_CPU",
                "PYTORCH3D_FORCE_NO_CUDA",
                "BUILD_DOCS",
                "DEMO_NO_FORCE_BUILD",
                "NVCC_THREADS",
            )
        )
    )
    assert _switches(tmp_path, code) == {}


def test_force_only_cuda_is_set_only_where_force_cuda_is_not_read(tmp_path: Path) -> None:
    only = 'if os.getenv("FORCE_ONLY_CUDA", "0") == "1":\n    suffices = ["cuda"]'
    assert _switches(tmp_path / "a", only) == {"FORCE_ONLY_CUDA": "1"}
    both = 'if os.getenv("FORCE_CUDA", "0") == "1":\n    suffices = ["cuda", "cpu"]\n' + only
    assert _switches(tmp_path / "b", both) == {"FORCE_CUDA": "1"}


def test_archs_come_from_nvcc_flags_not_from_comments_messages_or_f_strings(tmp_path: Path) -> None:
    found = _project(
        tmp_path,
        {
            "setup.py": "\n".join(
                (
                    "flags = ['--generate-code=arch=compute_90a,code=sm_90a', '-arch=sm_89', '-arch', 'sm_86']",
                    "flags += ['-gencode=arch=compute_100a,code=[sm_100a,compute_100a]']",
                    "# flags += ['-gencode', 'arch=compute_70,code=sm_70']",
                    "message = 'this needs sm_75 or newer'",
                    "flags += [f'arch=compute_{a},code=sm_{a}' for a in archs]",
                )
            )
        },
    )
    assert found.package_archs == (86, 89, 90, 100)


def test_cmake_archs_count_where_cmake_builds_the_package(tmp_path: Path) -> None:
    cmake = '# set(CMAKE_CUDA_ARCHITECTURES 70)\nset(CMAKE_CUDA_ARCHITECTURES "80-real;90a-real")\n'
    built = _project(
        tmp_path / "skbuild",
        {
            "pyproject.toml": '[build-system]\nbuild-backend = "scikit_build_core.build"\n'
            '[tool.scikit-build.cmake.define]\nCMAKE_CUDA_ARCHITECTURES = "75;120"\n',
            "CMakeLists.txt": cmake,
        },
    )
    assert built.package_archs == (75, 80, 90, 120)
    assert built.files_read == ("pyproject.toml", "CMakeLists.txt")
    # torch-scatter's CMakeLists.txt builds its C++ library; its setup.py never runs it
    beside = _project(
        tmp_path / "setup", {"setup.py": "from setuptools import setup\n", "CMakeLists.txt": cmake}
    )
    assert beside.package_archs == () and beside.files_read == ("setup.py",)


@pytest.mark.parametrize(
    ("code", "gated"),
    [
        # pytorch3d
        ("if (torch.cuda.is_available() and CUDA_HOME) or force_cuda:\n    extension = CUDAExtension", True),
        # torch-scatter & co
        ("WITH_CUDA = False\nif torch.cuda.is_available():\n    WITH_CUDA = CUDA_HOME is not None", True),
        ("use_cuda = torch.cuda.is_available() or _force_cuda", True),
        ("def _with_cuda():\n    return torch.cuda.is_available() and CUDA_HOME is not None", True),
        ("Ext = CUDAExtension if torch.cuda.is_available() else CppExtension", True),
        # apex and deepspeed: a warning and a default TORCH_CUDA_ARCH_LIST, the build goes on
        (
            'if not torch.cuda.is_available():\n    print("no GPU")\n    os.environ["TORCH_CUDA_ARCH_LIST"] = "8.0"',
            False,
        ),
        ("if torch.cuda.is_available():\n    bf16_support = torch.cuda.is_bf16_supported()", False),
    ],
)
def test_cuda_needs_gpu_when_the_gpu_check_decides_the_cuda_build(
    tmp_path: Path, code: str, gated: bool
) -> None:
    assert _project(tmp_path, {"setup.py": "import os, torch\n" + code + "\n"}).cuda_needs_gpu is gated


@pytest.mark.parametrize(
    ("code", "downloads"),
    [
        ('urllib.request.urlretrieve(url, f"{name}-{version}-{tag}.whl")', True),
        ('requests.get("https://example.invalid/releases/download/v1/libdemo.so")', True),
        ('urllib.request.urlopen("https://example.invalid/version.txt")', False),
        ('name = f"{name}-{version}.whl"', False),
    ],
)
def test_downloads_prebuilt_needs_a_download_of_a_binary(tmp_path: Path, code: str, downloads: bool) -> None:
    assert _project(tmp_path, {"setup.py": code + "\n"}).downloads_prebuilt is downloads


def test_missing_sources_are_the_literal_ones_the_tree_lacks(tmp_path: Path) -> None:
    found = _project(
        tmp_path,
        {
            "setup.py": "\n".join(
                (
                    "import glob, os",
                    'sources = ["csrc/here.cpp", "csrc/gone.cu", os.path.join("csrc", "joined.cu")]',
                    'sources += glob.glob("csrc/*.cu") + [f"csrc/{name}_cuda.cu"]',
                    'copied = ["csrc/twin.cu"]  # made from csrc/twin.cpp by the build',
                    'exclude_files = ["never.cu"]',
                    'relative = ["ops.cu"]  # joined to kernels/ by the build',
                    'sources = [s.replace(".cpp", ".cu") for s in sources]',
                )
            ),
            "csrc/here.cpp": "",
            "csrc/twin.cpp": "",
            "kernels/ops.cu": "",
        },
    )
    assert found.missing_sources == ("csrc/gone.cu", "csrc/joined.cu")


# --- hostile sources: each refused or ignored, none crashes, nothing extracted or run ---------


def _zip(path: Path, members: list[tuple[str, bytes]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members:
            archive.writestr(name, data)
    return path


SETUP = b'import os\nF = os.getenv("DEMO_FORCE_BUILD", "FALSE") == "TRUE"\nsources = ["csrc/demo.cu"]\n'


def _survey(path: Path) -> Survey:
    return survey_source(path.parent, path.name)


def test_an_sdist_that_decompresses_past_the_cap_is_read_no_further(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(survey, "SDIST_LIMIT", 256 << 10)
    bomb = ("demo-1.0/data.bin", b"\0" * (8 << 20))
    after = _survey(make_sdist(tmp_path / "a" / "demo-1.0.tar.gz", [bomb, ("demo-1.0/setup.py", SETUP)]))
    assert after.files_read == () and after.switches == ()
    assert "decompressed" in after.refused[0]
    # What came before the cap still counts, but not every file was seen: none is called missing.
    before = _survey(make_sdist(tmp_path / "b" / "demo-1.0.tar.gz", [("demo-1.0/setup.py", SETUP), bomb]))
    assert [s.name for s in before.switches] == ["DEMO_FORCE_BUILD"]
    assert before.missing_sources == ()


def test_an_sdist_with_too_many_members_is_read_no_further(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(survey, "SDIST_MEMBERS", 50)
    members = [(f"demo-1.0/f{i}.txt", b"") for i in range(100)] + [("demo-1.0/setup.py", SETUP)]
    for found in (
        _survey(make_sdist(tmp_path / "demo-1.0.tar.gz", [(n, d) for n, d in members])),
        _survey(_zip(tmp_path / "demo-1.0.zip", members)),
    ):
        assert found.files_read == () and found.switches == ()
        assert "more than 50 members" in found.refused[0]


def test_a_setup_py_over_the_cap_is_not_read(tmp_path: Path) -> None:
    huge = SETUP + b"#" * (survey.FILE_LIMIT + 1)
    for found in (
        _survey(make_sdist(tmp_path / "demo-1.0.tar.gz", [("demo-1.0/setup.py", huge)])),
        _survey(_zip(tmp_path / "demo-1.0.zip", [("demo-1.0/setup.py", huge)])),
        _project(tmp_path / "dir", {"setup.py": huge.decode()}),
    ):
        assert found.files_read == () and found.switches == ()
        assert found.refused == ("setup.py is over 1.0 MiB: not read",)


@pytest.mark.parametrize(
    "text",
    [
        'print "python 2"\n',  # does not parse
        "x = " + "+".join(["1"] * 200_000) + "\n",  # RecursionError in the parser
        "x = " + "-" * 100_000 + "1\n",  # MemoryError in the parser
        "x = 1\0\n",  # a null byte
    ],
)
def test_a_setup_py_that_does_not_parse_is_read_with_regexes(tmp_path: Path, text: str) -> None:
    found = _survey(make_sdist(tmp_path / "demo-1.0.tar.gz", [("demo-1.0/setup.py", text.encode() + SETUP)]))
    assert found.switches == (
        Switch("DEMO_FORCE_BUILD", "TRUE", "setup.py builds from source only when it is TRUE"),
    )
    assert found.missing_sources == ("csrc/demo.cu",)
    assert found.refused == ("setup.py does not parse: read with regexes",)


def test_members_that_climb_out_or_are_links_are_ignored_and_nothing_is_extracted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work" / "deep"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    members: list[tuple[str, bytes | None]] = [
        ("demo-1.0/PKG-INFO", b"Metadata-Version: 2.1\n"),
        ("../setup.py", SETUP),
        ("demo-1.0/../../setup.py", SETUP),
        (str(tmp_path / "abs" / "setup.py"), SETUP),
        ("demo-1.0/setup.py", None),
    ]
    sdist = make_sdist(tmp_path / "in" / "demo-1.0.tar.gz", members)
    zipped = _zip(tmp_path / "in" / "demo-1.0.zip", [(n, d) for n, d in members if d is not None])
    before = sorted(tmp_path.rglob("*"))
    found = _survey(sdist)
    assert found.files_read == () and found.switches == ()
    assert found.refused == ("setup.py is not a regular file: not followed",)
    assert _survey(zipped).files_read == ()
    assert sorted(tmp_path.rglob("*")) == before


def test_a_setup_py_is_read_and_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    setup = f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n".encode() + SETUP
    for found in (
        _survey(make_sdist(tmp_path / "demo-1.0.tar.gz", [("demo-1.0/setup.py", setup)])),
        _survey(_zip(tmp_path / "demo-1.0.zip", [("demo-1.0/setup.py", setup)])),
        _project(tmp_path / "dir", {"setup.py": setup.decode()}),
    ):
        assert [s.name for s in found.switches] == ["DEMO_FORCE_BUILD"]
    assert not marker.exists()


def test_a_file_that_is_no_readable_sdist_is_refused_without_raising(tmp_path: Path) -> None:
    (tmp_path / "a-1.tar.gz").write_bytes(b"\x1f\x8b pretend sdist bytes")
    (tmp_path / "b-1.zip").write_bytes(b"PK not a zip")
    (tmp_path / "c-1.whl").write_bytes(b"")
    for name in ("a-1.tar.gz", "b-1.zip"):
        found = survey_source(tmp_path, name)
        assert found.files_read == () and found.refused[0].startswith("cannot read the sdist")
    assert survey_source(tmp_path, "c-1.whl").refused == (
        "c-1.whl is not an sdist the survey reads (.tar.gz, .zip)",
    )
    assert survey_source(tmp_path, "missing-1.tar.gz").refused[0].startswith("cannot read missing-1.tar.gz")


def test_a_zip_sdist_reads_as_a_tar_gz_does(tmp_path: Path) -> None:
    members = [("demo-1.0/setup.py", SETUP), ("demo-1.0/csrc/other.cu", b"")]
    zipped = _survey(_zip(tmp_path / "demo-1.0.zip", members))
    assert zipped == _survey(make_sdist(tmp_path / "demo-1.0.tar.gz", [(n, d) for n, d in members]))
    assert zipped.missing_sources == ("csrc/demo.cu",) and zipped.files_read == ("setup.py",)


def test_build_requirements_that_are_urls_or_no_requirements_are_refused_not_installed(
    tmp_path: Path,
) -> None:
    (tmp_path / "setup.py").write_text("from setuptools import setup\nsetup()\n")
    (tmp_path / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["scikit-build-core>=0.10", "evil @ https://example.invalid/x.whl", "!!", '
        '"ninja; python_version < \\"3.20\\""]\n'
    )
    found = survey_source(tmp_path, ".")
    assert found.build_requires == ("scikit-build-core>=0.10", 'ninja; python_version < "3.20"')
    assert found.refused == (
        "build requirement evil names a URL: not installed",
        "build requirement '!!' is not a requirement: not installed",
    )


def test_the_cxx_standards_the_build_files_give_are_found_each_once(tmp_path: Path) -> None:
    setup_py = (
        '"""Its docstring\'s prose (torch adds -std=c++20 where none is given) names nothing."""\n'
        "from torch.utils.cpp_extension import CUDAExtension\n"
        "# -std=c++11 in a comment names nothing\n"
        'ext = CUDAExtension("k", ["k.cu"], extra_compile_args={"cxx": ["-O3", "-std=c++17"],\n'
        '    "nvcc": ["-O3", "-std=c++17", "--use_fast_math"]})\n'
    )
    assert _project(tmp_path / "setup", {"setup.py": setup_py}).cxx_standards == ("-std=c++17",)
    cmake = {
        "setup.py": "import subprocess\nsubprocess.check_call(['cmake', '..'])\n",
        "CMakeLists.txt": "set(CMAKE_CXX_STANDARD 17)  # C++17\nset(CMAKE_CUDA_STANDARD 17)\n",
    }
    assert _project(tmp_path / "cmake", cmake).cxx_standards == ("CMAKE_CXX_STANDARD 17",)
    assert (
        _project(tmp_path / "none", {"setup.py": "from setuptools import setup\nsetup()\n"}).cxx_standards
        == ()
    )
