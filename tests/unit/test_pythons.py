"""wheelbuild.spec.pythons without network: which Pythons a torch's tags serve, Requires-Python read from a
real sdist and a project directory, and choose_pythons checked exhaustively over a small world of
images, indexes, Requires-Python values and --python requests against an independent oracle."""

from __future__ import annotations

import gzip
import itertools
from pathlib import Path

import pytest
from wheelbuild.errors import BadArgument, SourceUnavailable
from wheelbuild.spec import requires_python
from wheelbuild.spec.pythons import LeftOut, PythonChoice, choose_pythons, has_wheel
from wheelbuild.spec.requires_python import requires_python_of

from tests.sdists import make_sdist


def test_abi3_covers_every_later_cpython_but_not_free_threaded_ones() -> None:
    tags = frozenset({"cp310-abi3", "cp313t"})
    assert [p for p in ("cp39", "cp310", "cp311", "cp314", "cp313t", "cp314t") if has_wheel(tags, p)] == [
        "cp310",
        "cp311",
        "cp314",
        "cp313t",
    ]
    assert not has_wheel(frozenset({"cp311"}), "cp312")
    assert not has_wheel(frozenset({"cp311"}), "pp311")


# --- Requires-Python --------------------------------------------------------------------------


def _pkg_info(requires: str | None, description: str = "A package.\n") -> bytes:
    lines = ["Metadata-Version: 2.1", "Name: demo", "Version: 1.0"]
    if requires is not None:
        lines.append(f"Requires-Python: {requires}")
    return ("\n".join(lines) + "\n\n" + description).encode()


def test_requires_python_of_an_sdist_is_its_top_level_pkg_info(tmp_path: Path) -> None:
    sdist = make_sdist(
        tmp_path / "demo-1.0.tar.gz",
        [
            ("demo-1.0/demo.egg-info/PKG-INFO", _pkg_info(">=3.6")),  # not the top-level one
            ("demo-1.0/setup.py", b"from setuptools import setup\nsetup()\n"),
            ("demo-1.0/PKG-INFO", _pkg_info(">=3.10, <3.14")),
        ],
    )
    assert requires_python_of(sdist) == ">=3.10, <3.14"


def test_an_sdist_without_requires_python_says_none(tmp_path: Path) -> None:
    assert (
        requires_python_of(make_sdist(tmp_path / "a-1.tar.gz", [("a-1/PKG-INFO", _pkg_info(None))])) is None
    )
    assert requires_python_of(make_sdist(tmp_path / "b-1.tar.gz", [("b-1/setup.py", b"")])) is None


def test_a_long_description_is_not_read_past_the_cap(tmp_path: Path) -> None:
    big = _pkg_info(">=3.11", "x" * (3 << 20))  # 3 MiB of README after the headers
    assert requires_python_of(make_sdist(tmp_path / "c-1.tar.gz", [("c-1/PKG-INFO", big)])) == ">=3.11"
    endless = b"Metadata-Version: 2.1\n" + b"X-Filler: y\n" * (200_000) + b"Requires-Python: >=3.9\n\n"
    assert requires_python_of(make_sdist(tmp_path / "d-1.tar.gz", [("d-1/PKG-INFO", endless)])) is None


def test_a_pkg_info_that_is_a_link_is_not_followed(tmp_path: Path) -> None:
    assert requires_python_of(make_sdist(tmp_path / "e-1.tar.gz", [("e-1/PKG-INFO", None)])) is None


def test_an_sdist_that_decompresses_past_the_cap_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(requires_python, "SDIST_LIMIT", 64 << 10)
    sdist = make_sdist(
        tmp_path / "f-1.tar.gz", [("f-1/data.bin", b"\0" * (1 << 20)), ("f-1/PKG-INFO", _pkg_info(">=3.9"))]
    )
    with pytest.raises(SourceUnavailable) as caught:
        requires_python_of(sdist)
    assert "decompressed" in caught.value.cause


def test_a_file_that_is_not_a_tarball_is_source_unavailable(tmp_path: Path) -> None:
    (tmp_path / "g-1.tar.gz").write_bytes(b"\x1f\x8b pretend sdist bytes")
    (tmp_path / "h-1.tar.gz").write_bytes(gzip.compress(b"not a tar archive" * 100))
    for name in ("g-1.tar.gz", "h-1.tar.gz"):
        with pytest.raises(SourceUnavailable) as caught:
            requires_python_of(tmp_path / name)
        assert caught.value.exit_code == 15 and name in caught.value.cause


def test_requires_python_of_a_project_dir(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "demo"\nrequires-python = ">=3.10"\n')
    (tmp_path / "PKG-INFO").write_bytes(_pkg_info(">=3.6"))
    assert requires_python_of(tmp_path) == ">=3.10"  # pyproject.toml first


def test_a_project_dir_without_it_in_pyproject_falls_back_to_pkg_info(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools"]\n')
    assert requires_python_of(tmp_path) is None
    (tmp_path / "PKG-INFO").write_bytes(_pkg_info(">=3.12"))
    assert requires_python_of(tmp_path) == ">=3.12"


def test_a_setup_py_says_its_literal_python_requires_and_nothing_it_computes(tmp_path: Path) -> None:
    assert requires_python_of(Path(__file__).parents[1] / "fixtures" / "wbdemo") == ">=3.9"
    (tmp_path / "setup.py").write_text("from setuptools import setup\nsetup(python_requires='>=3.9')\n")
    assert requires_python_of(tmp_path) == ">=3.9"
    (tmp_path / "setup.py").write_text("from setuptools import setup\nsetup(python_requires=floor())\n")
    assert requires_python_of(tmp_path) is None
    assert requires_python_of(tmp_path / "missing") is None
    (tmp_path / "demo.zip").write_bytes(b"PK")
    assert requires_python_of(tmp_path / "demo.zip") is None


@pytest.mark.parametrize(
    "text", ['[project\nrequires-python = ">=3.10"\n', "[project]\nrequires-python = 3.10\n"]
)
def test_a_broken_pyproject_is_source_unavailable(tmp_path: Path, text: str) -> None:
    (tmp_path / "pyproject.toml").write_text(text)
    with pytest.raises(SourceUnavailable):
        requires_python_of(tmp_path)


# --- choose_pythons: the examples -------------------------------------------------------------

SECRET = "s3cr3t-t0ken"
IMAGE = ("cp39", "cp310", "cp311", "cp312", "cp313", "cp314")
TORCH = frozenset({"cp310", "cp311", "cp312", "cp313", "cp313t"})
INDEX = f"https://user:{SECRET}@example.invalid/whl/cu130"


def _choose(
    image: tuple[str, ...] = IMAGE,
    torch: frozenset[str] | None = TORCH,
    requires: str | None = ">=3.10",
    asked: tuple[str, ...] | None = None,
) -> PythonChoice:
    return choose_pythons(
        image, torch, requires, asked, package="flash-attn", torch_version="2.11.0", index_url=INDEX
    )


def test_the_default_is_the_images_pythons_torch_and_the_package_admit_with_reasons() -> None:
    choice = _choose()
    assert choice.pythons == ("cp310", "cp311", "cp312", "cp313")
    assert [str(x) for x in choice.left_out] == [
        "cp39: torch 2.11.0 has no cp39 wheel on https://***@example.invalid/whl/cu130, "
        "and flash-attn requires Python >=3.10",
        "cp314: torch 2.11.0 has no cp314 wheel on https://***@example.invalid/whl/cu130",
    ]
    assert choice.left_out[1] == LeftOut("cp314", choice.left_out[1].why)


def test_requires_python_alone_leaves_a_python_out() -> None:
    choice = _choose(requires=">=3.10,<3.13")
    assert choice.pythons == ("cp310", "cp311", "cp312")
    assert "cp313: flash-attn requires Python >=3.10,<3.13" in [str(x) for x in choice.left_out]


def test_requires_python_is_met_by_some_patch_release_of_the_python() -> None:
    # the tag does not say the patch release: >=3.11.4 admits cp311 (the image's 3.11 is newer)
    assert _choose(requires=">=3.11.4").pythons == ("cp311", "cp312", "cp313")
    assert _choose(requires="~=3.12.0").pythons == ("cp312",)
    assert _choose(requires="!=3.12.*,>=3.10").pythons == ("cp310", "cp311", "cp313")
    assert _choose(requires=None).pythons == ("cp310", "cp311", "cp312", "cp313")


def test_unchecked_torch_only_applies_requires_python() -> None:
    assert _choose(torch=None).pythons == ("cp310", "cp311", "cp312", "cp313", "cp314")


def test_abi3_and_free_threaded_wheels_in_the_choice() -> None:
    image = ("cp310", "cp311", "cp313", "cp313t", "cp314t")
    choice = _choose(image=image, torch=frozenset({"cp311-abi3", "cp313t"}), requires=None)
    assert choice.pythons == ("cp311", "cp313", "cp313t")
    assert [x.python for x in choice.left_out] == ["cp310", "cp314t"]


def test_duplicates_are_dropped_and_the_order_kept() -> None:
    assert _choose(image=("cp312", "cp310", "cp312")).pythons == ("cp312", "cp310")
    assert _choose(asked=("cp312", "cp311", "cp312")).pythons == ("cp312", "cp311")


def test_asked_pythons_that_can_be_built_are_built_as_asked() -> None:
    assert _choose(asked=("cp313", "cp311")) == PythonChoice(pythons=("cp313", "cp311"))
    assert _choose(asked=()).pythons == _choose().pythons  # empty: the default (BuildSpec's way)


def test_asked_pythons_that_cannot_work_are_a_bad_argument_naming_each() -> None:
    with pytest.raises(BadArgument) as caught:
        _choose(asked=("cp39", "cp311", "cp314", "cp315"))
    error = caught.value
    assert error.exit_code == 36
    assert error.cause == (
        "--python cp39, cp314, cp315 cannot be built: "
        "cp39: torch 2.11.0 has no cp39 wheel on https://***@example.invalid/whl/cu130, "
        "and flash-attn requires Python >=3.10; "
        "cp314: torch 2.11.0 has no cp314 wheel on https://***@example.invalid/whl/cu130; "
        "cp315: the image has no cp315 interpreter, "
        "and torch 2.11.0 has no cp315 wheel on https://***@example.invalid/whl/cu130"
    )
    assert error.remedy == "pick --python from cp310, cp311, cp312, cp313"
    assert SECRET not in str(error)


def test_no_python_left_is_an_error() -> None:
    with pytest.raises(BadArgument) as caught:
        _choose(torch=frozenset({"cp315"}))
    assert caught.value.cause.startswith("no Python in the image can build flash-attn: cp39: ")
    assert "--torch-index-url" in caught.value.remedy
    with pytest.raises(BadArgument) as caught:
        _choose(torch=None, requires=">=4")
    assert "--torch" not in caught.value.remedy and "base image" in caught.value.remedy
    with pytest.raises(BadArgument) as caught:
        _choose(image=())
    assert caught.value.cause == "the image has no CPython interpreter to build with"
    with pytest.raises(BadArgument) as caught:
        _choose(asked=("cp311",), torch=frozenset())
    assert caught.value.remedy.startswith("no Python in the image can be built: ")


def test_a_requires_python_that_is_not_a_specifier_is_a_bad_argument() -> None:
    with pytest.raises(BadArgument) as caught:
        _choose(requires="python3 please")
    assert caught.value.cause == "flash-attn's Requires-Python 'python3 please' is not a version specifier"


def test_the_reasons_have_plain_wording_without_context() -> None:
    choice = choose_pythons(("cp311", "cp312"), frozenset({"cp311"}), None, None)
    assert [str(x) for x in choice.left_out] == ["cp312: torch has no cp312 wheel on its index"]


# --- choose_pythons: every case of a small world, against an oracle ---------------------------

WORLD = ("cp39", "cp310", "cp312", "cp313", "cp313t")
TORCHES: tuple[frozenset[str] | None, ...] = (
    None,
    frozenset(),
    frozenset({"cp310", "cp313"}),
    frozenset({"cp310-abi3"}),
    frozenset({"cp39", "cp313t"}),
)
REQUIRES = (None, ">=3.10", "<3.13", "==3.9.*")
MINOR = {"cp39": 9, "cp310": 10, "cp312": 12, "cp313": 13, "cp313t": 13}
ADMITS = {
    None: lambda minor: True,
    ">=3.10": lambda minor: minor >= 10,
    "<3.13": lambda minor: minor < 13,
    "==3.9.*": lambda minor: minor == 9,
}


def _oracle_ok(
    python: str, image: tuple[str, ...], torch: frozenset[str] | None, requires: str | None
) -> bool:
    if python not in image or not ADMITS[requires](MINOR[python]):
        return False
    if torch is None or python in torch:
        return True
    return "cp310-abi3" in torch and not python.endswith("t") and MINOR[python] >= 10


def _subsets(items: tuple[str, ...]) -> list[tuple[str, ...]]:
    return [s for n in range(len(items) + 1) for s in itertools.combinations(items, n)]


@pytest.mark.parametrize("torch", TORCHES, ids=repr)
@pytest.mark.parametrize("requires", REQUIRES, ids=repr)
def test_choose_pythons_over_every_image_and_request(
    torch: frozenset[str] | None, requires: str | None
) -> None:
    requests: list[tuple[str, ...] | None] = [None, ("cp310",), ("cp313t",), ("cp39", "cp312"), WORLD]
    for image, asked in itertools.product(_subsets(WORLD), requests):
        usable = tuple(p for p in image if _oracle_ok(p, image, torch, requires))
        try:
            choice = choose_pythons(image, torch, requires, asked, package="demo", torch_version="2.11.0")
        except BadArgument as error:
            if asked is None:
                assert not usable, (image, error)
                assert error.cause.startswith(("no Python in the image", "the image has no CPython"))
            else:
                refused = [p for p in asked if not _oracle_ok(p, image, torch, requires)]
                assert refused, (image, asked, error)
                assert error.cause.startswith(f"--python {', '.join(refused)} cannot be built: ")
                for python in refused:
                    assert f"{python}: " in error.cause
                if usable:
                    assert error.remedy == f"pick --python from {', '.join(usable)}"
            continue
        if asked is None:
            assert choice.pythons == usable and usable, (image, choice)
            assert [x.python for x in choice.left_out] == [p for p in image if p not in usable]
            for left in choice.left_out:
                has_torch = torch is None or _oracle_ok(left.python, image, torch, None)
                assert ("has no" in left.why) is (not has_torch), left
                assert ("demo requires Python" in left.why) is (not ADMITS[requires](MINOR[left.python]))
        else:
            assert choice == PythonChoice(pythons=asked), (image, asked)
            assert all(_oracle_ok(p, image, torch, requires) for p in asked)
