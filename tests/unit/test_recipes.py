"""wheelbuild.recipes: what the user typed -> a Recipe, and the env its build reads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from wheelbuild.errors import BadArgument, SourceUnavailable, UnknownPackage
from wheelbuild.plan.memory_model import GIB, flash_attn_model
from wheelbuild.recipes import (
    EXAMPLE_DIR,
    IndexLookup,
    LocalProject,
    LocalSdist,
    Recipe,
    RemoteSdist,
    at_newest_pinned,
    at_release,
    chosen_package,
    known_recipes,
    resolve_recipe,
    source_location,
    source_pin,
)
from wheelbuild.recipes.flash_attn import NEWEST_PINNED, SDISTS

HEX64 = re.compile(r"[0-9a-f]{64}")
PIN = "a" * 64
URL = "https://files.example.invalid/pkgs/myext-1.0.tar.gz"


def test_known_recipes_are_flash_attn_and_wbdemo() -> None:
    assert known_recipes() == ["flash-attn", "wbdemo"]


def test_wbdemo_is_the_bundled_example() -> None:
    recipe = resolve_recipe(chosen_package(None, example=True))
    assert recipe.name == "wbdemo"
    assert recipe.source == LocalProject(EXAMPLE_DIR)
    assert recipe.source.path.is_dir()
    assert (recipe.source.path / "setup.py").is_file()
    assert recipe.arch_env == "WBDEMO_CUDA_ARCHS"
    assert recipe.memory_model.name == "wbdemo"
    assert recipe.memory_model.unit_count == 5
    assert recipe.version is None


@pytest.mark.parametrize("marker", ["pyproject.toml", "setup.py"])
def test_no_package_means_the_project_in_the_folder_when_it_has_one(tmp_path: Path, marker: str) -> None:
    (tmp_path / marker).write_text("")
    assert chosen_package(None, example=False, cwd=tmp_path) == "."
    assert chosen_package("flash-attn", example=False, cwd=tmp_path) == "flash-attn"
    assert chosen_package(None, example=True, cwd=tmp_path) == "wbdemo"


def test_no_package_and_no_project_says_how_to_build_one_and_the_example(tmp_path: Path) -> None:
    (tmp_path / "setup.cfg").write_text("")  # neither pyproject.toml nor setup.py
    with pytest.raises(BadArgument) as refused:
        chosen_package(None, example=False, cwd=tmp_path)
    assert refused.value.exit_code == 39
    assert (
        refused.value.cause
        == f"no PACKAGE given, and {tmp_path} holds no project (no pyproject.toml or setup.py)"
    )
    assert "run it in a project's folder, or name one" in refused.value.remedy
    assert "add --example to build the bundled example, wbdemo" in refused.value.remedy


def test_example_and_another_package_are_refused_together(tmp_path: Path) -> None:
    with pytest.raises(
        BadArgument, match="--example builds the bundled example, wbdemo, but PACKAGE 'flash-attn'"
    ):
        chosen_package("flash-attn", example=True, cwd=tmp_path)
    assert chosen_package("wbdemo", example=True, cwd=tmp_path) == "wbdemo"


def test_wbdemo_source_dir_is_tests_fixtures_wbdemo() -> None:
    assert Path(__file__).resolve().parents[1] / "fixtures" / "wbdemo" == EXAMPLE_DIR


@pytest.mark.parametrize("name", ["flash-attn", "flash_attn", "FLASH-ATTN", "Flash_Attn"])
def test_flash_attn_spellings_resolve_to_the_recipe_of_the_newest_release(name: str) -> None:
    recipe = resolve_recipe(name)
    assert recipe.name == "flash-attn"
    # The newest release is looked up on the index when the build starts (at_release).
    assert recipe.source == IndexLookup("flash-attn", "")
    assert recipe.arch_env == "FLASH_ATTN_CUDA_ARCHS"
    assert dict(recipe.extra_env) == {"FLASH_ATTENTION_FORCE_BUILD": "TRUE"}


@pytest.mark.parametrize("latest", ["latest", "newest", "Latest"])
def test_flash_attn_version_latest_is_the_newest_release(latest: str) -> None:
    assert resolve_recipe("flash-attn", version=latest).source == IndexLookup("flash-attn", "")


def test_flash_attn_at_a_pinned_release_keeps_its_pin_and_takes_its_model() -> None:
    asked = resolve_recipe("flash-attn")
    listed = SDISTS["2.8.3.post2"]
    recipe = at_release(asked, "2.8.3.post2", RemoteSdist(listed.url, listed.sha256))
    assert (recipe.version, recipe.source) == ("2.8.3.post2", listed)
    assert recipe.memory_model.complete and recipe.memory_model.unit_count == 73
    assert "2.8.3.post2 has the same units as 2.8.3" in recipe.memory_model.source


def test_flash_attn_at_a_release_whose_index_hash_differs_from_the_pin_is_refused() -> None:
    listed = SDISTS["2.8.3.post2"]
    with pytest.raises(SourceUnavailable) as caught:
        at_release(resolve_recipe("flash-attn"), "2.8.3.post2", RemoteSdist(listed.url, "0" * 64))
    assert listed.sha256 in caught.value.cause and "0" * 64 in caught.value.cause


def test_flash_attn_at_an_unpinned_release_takes_the_index_pin_and_its_nearest_calibrated_model() -> None:
    listed = RemoteSdist("https://files.example/flash_attn-2.9.0.tar.gz", "a" * 64)
    recipe = at_release(resolve_recipe("flash-attn"), "2.9.0", listed)
    assert (recipe.version, recipe.source) == ("2.9.0", listed)
    model = recipe.memory_model
    assert not model.complete and not model.blind  # 2.8.3's heaviest unit, for every unit
    assert "2.8.3 being the nearest calibrated release" in model.source
    assert model.peak_per_job(1, 1) == flash_attn_model("2.8.3").peak_per_job(1, 1)


def test_a_known_recipe_offline_falls_back_to_its_newest_pin() -> None:
    pinned = at_newest_pinned(resolve_recipe("flash-attn"))
    assert pinned is not None and pinned.version == NEWEST_PINNED and pinned.source == SDISTS[NEWEST_PINNED]
    assert at_newest_pinned(resolve_recipe("causal-conv1d")) is None


@pytest.mark.parametrize("version", sorted(SDISTS))
def test_every_pinned_flash_attn_release_has_a_64_hex_sha256_and_matching_file(version: str) -> None:
    recipe = resolve_recipe("flash-attn", version=version)
    assert recipe.version == version
    assert isinstance(recipe.source, RemoteSdist)
    assert recipe.source.sha256 is not None
    assert HEX64.fullmatch(recipe.source.sha256)
    assert recipe.source.url.endswith(f"/flash_attn-{version}.tar.gz")


def test_flash_attn_build_env_forces_a_source_build_and_names_its_arch_variable() -> None:
    env = resolve_recipe("flash-attn").build_env((100, 120), 4, 2)
    assert env == {
        "MAX_JOBS": "4",
        "NVCC_THREADS": "2",
        "TORCH_CUDA_ARCH_LIST": "10.0;12.0",
        "FLASH_ATTENTION_FORCE_BUILD": "TRUE",
        "FLASH_ATTN_CUDA_ARCHS": "100;120",
    }


def test_flash_attn_gets_the_variants_label_through_its_own_variable() -> None:
    env = resolve_recipe("flash-attn").build_env((100, 120), 4, 2, "cu130torch2.11")
    assert env["FLASH_ATTN_LOCAL_VERSION"] == "cu130torch2.11"  # setup.py: 2.8.3+cu130torch2.11
    assert resolve_recipe("wbdemo").build_env((100,), 1, 1, "cu130torch2.11")["WBDEMO_LOCAL_VERSION"] == (
        "cu130torch2.11"
    )


def test_newest_flash_attn_release_seen_on_pypi_is_pinned_and_plans_with_the_measured_profile() -> None:
    newest = resolve_recipe("flash-attn", version="2.8.3.post2")
    assert source_pin(newest.source) == "d0f9f0b08a986cdeadbffcf5ec8b3a8f514366c68ad1853d3ab061bc83cc340b"
    assert newest.memory_model == resolve_recipe("flash-attn").memory_model


def test_a_flash_attn_release_not_in_the_table_is_looked_up_when_the_build_starts() -> None:
    recipe = resolve_recipe("flash-attn", version="2.8.1")
    assert recipe.source == IndexLookup("flash-attn", "2.8.1") and source_pin(recipe.source) is None
    assert source_location(recipe.source) == "pypi:flash-attn==2.8.1"
    # Unmeasured: the planner falls back to the conservative model.
    assert recipe.memory_model != resolve_recipe("flash-attn").memory_model


def test_a_flash_attn_version_that_is_no_version_is_a_bad_argument() -> None:
    with pytest.raises(BadArgument) as caught:
        resolve_recipe("flash-attn", version="latest-please")
    assert caught.value.exit_code == 37
    assert "is not a version" in caught.value.cause and "2.8.3" in caught.value.remedy


def test_version_with_a_local_path_is_a_bad_argument(tmp_path: Path) -> None:
    (tmp_path / "setup.py").write_text("")
    with pytest.raises(BadArgument) as caught:
        resolve_recipe(str(tmp_path), version="1.0")
    assert caught.value.exit_code == 37
    assert caught.value.cause.startswith("--version applies to a recipe or a name on the index")


def test_version_with_a_name_on_the_index_is_that_release_and_latest_the_newest() -> None:
    assert resolve_recipe("causal-conv1d", version="1.7.0").source == IndexLookup("causal-conv1d", "1.7.0")
    assert resolve_recipe("Causal_Conv1d", version="latest").source == IndexLookup("causal-conv1d", "")
    with pytest.raises(BadArgument) as both:
        resolve_recipe("causal-conv1d>=1.6", version="1.7.0")
    assert "two answers" in both.value.cause and "causal-conv1d==1.7.0" in both.value.remedy


def test_url_without_sha256_pin_is_a_bad_argument() -> None:
    with pytest.raises(BadArgument) as caught:
        resolve_recipe(URL)
    assert caught.value.exit_code == 32
    assert caught.value.cause == f"sdist URL {URL} carries no #sha256= pin"
    assert caught.value.remedy == f"append the file's hash: {URL}#sha256=<64 hex digits>"


@pytest.mark.parametrize("fragment", ["sha256=abc", "md5=" + PIN, "sha256=" + PIN + "0", "", PIN])
def test_url_with_a_malformed_pin_is_a_bad_argument(fragment: str) -> None:
    with pytest.raises(BadArgument):
        resolve_recipe(f"{URL}#{fragment}")


def test_url_with_sha256_pin_is_a_pinned_generic_source() -> None:
    recipe = resolve_recipe(f"{URL}#sha256={PIN}", arch_env="MYEXT_ARCHS")
    assert (recipe.name, recipe.source, recipe.arch_env) == (
        "myext-1.0.tar.gz",
        RemoteSdist(url=URL, sha256=PIN),
        "MYEXT_ARCHS",
    )
    # An unknown extension is planned with the conservative default: 4 GiB per arch per job.
    assert recipe.memory_model.peak_per_job(1, 2) == 4 * GIB  # one arch at a time, per job
    assert isinstance(recipe.source, RemoteSdist)  # a URL, and an sdist


def test_local_project_dir_is_a_generic_recipe(tmp_path: Path) -> None:
    project = tmp_path / "myext"
    project.mkdir()
    (project / "setup.py").write_text("")
    recipe = resolve_recipe(str(project))
    assert recipe.name == "myext"
    assert recipe.source == LocalProject(project.resolve())
    assert source_pin(recipe.source) is None
    assert recipe.arch_env is None
    assert recipe.version is None
    assert recipe.memory_model.unit_count is None
    assert dict(recipe.extra_env) == {}


def test_local_sdist_keeps_its_sha256_pin(tmp_path: Path) -> None:
    sdist = tmp_path / "myext-1.0.tar.gz"
    sdist.write_bytes(b"not really a tarball")
    recipe = resolve_recipe(f"{sdist}#sha256={PIN}")
    assert recipe.name == "myext-1.0.tar.gz"
    assert recipe.source == LocalSdist(sdist.resolve(), sha256=PIN)  # not a URL; an sdist


def test_what_is_no_recipe_no_path_and_no_name_is_an_unknown_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve_recipe("foo-bar").source == IndexLookup("foo-bar", "")  # a name: the index says
    with pytest.raises(UnknownPackage) as caught:
        resolve_recipe("foo bar!")
    assert caught.value.exit_code == 10
    assert caught.value.cause == (
        "unknown package 'foo bar!': not a known recipe, no such path, and no package name as pip takes one"
    )
    assert "flash-attn, wbdemo" in caught.value.remedy


@pytest.mark.parametrize("name", ["setup.py", "myext-1.0.whl", "myext-1.0.tar.bz2", "notes.txt"])
def test_local_file_that_is_not_a_tar_gz_or_zip_is_a_bad_argument(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_text("x")
    with pytest.raises(BadArgument) as caught:
        resolve_recipe(str(path))
    assert caught.value.exit_code == 39
    assert caught.value.cause == f"{path} is neither a project directory nor an sdist (.tar.gz or .zip)"


def test_local_zip_sdist_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "myext-1.0.zip"
    path.write_bytes(b"PK")
    assert resolve_recipe(str(path)).source == LocalSdist(path.resolve())


def test_build_env_carries_jobs_threads_and_both_arch_spellings() -> None:
    recipe = Recipe(name="x", source=LocalProject(Path("/x")), arch_env="X_ARCHS")
    assert recipe.build_env((100, 120), 3, 1) == {
        "MAX_JOBS": "3",
        "NVCC_THREADS": "1",
        "TORCH_CUDA_ARCH_LIST": "10.0;12.0",
        "X_ARCHS": "100;120",
    }


def test_build_env_without_arch_env_sets_only_torch_arch_list() -> None:
    recipe = Recipe(name="x", source=LocalProject(Path("/x")))
    assert recipe.build_env((86, 90), 1, 2) == {
        "MAX_JOBS": "1",
        "NVCC_THREADS": "2",
        "TORCH_CUDA_ARCH_LIST": "8.6;9.0",
    }


def test_build_env_marks_the_archs_whose_ptx_is_asked_for_in_torchs_spelling() -> None:
    recipe = Recipe(name="x", source=LocalProject(Path("/x")), arch_env="X_ARCHS")
    env = recipe.build_env((100, 120), 1, 1, ptx=(120,))
    # torch's cpp_extension reads 12.0+PTX; a package's own variable knows no PTX spelling.
    assert (env["TORCH_CUDA_ARCH_LIST"], env["X_ARCHS"]) == ("10.0;12.0+PTX", "100;120")


def test_url_with_a_64_char_non_hex_pin_is_a_bad_argument() -> None:
    with pytest.raises(BadArgument):
        resolve_recipe(f"{URL}#sha256={'z' * 64}")


@pytest.mark.parametrize(
    ("package", "project", "wanted"),
    [
        ("causal-conv1d", "causal-conv1d", ""),  # the newest final release with an sdist
        ("mamba_ssm==2.3.2.post1", "mamba-ssm", "==2.3.2.post1"),  # as pip spells it, normalised
        ("Causal_Conv1d>=1.6,<2", "causal-conv1d", "<2,>=1.6"),
    ],
)
def test_a_package_named_as_pip_names_it_is_looked_up_on_the_index(
    package: str, project: str, wanted: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no folder of that name here
    recipe = resolve_recipe(package)
    assert recipe.name == project and recipe.source == IndexLookup(project, wanted)


def test_a_folder_of_that_name_wins_over_the_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "causal-conv1d").mkdir()
    (tmp_path / "causal-conv1d" / "setup.py").write_text("")
    assert isinstance(resolve_recipe("causal-conv1d").source, LocalProject)


def test_a_recipe_named_with_one_release_takes_it_as_pep_440_compares_versions() -> None:
    assert resolve_recipe("flash-attn==2.8.3.post2").version == "2.8.3.post2"
    assert resolve_recipe("flash-attn", version="2.8.3post2").source == SDISTS["2.8.3.post2"]
    with pytest.raises(BadArgument, match="one release"):
        resolve_recipe("flash-attn>=2.8")
    with pytest.raises(BadArgument, match="one release"):
        resolve_recipe("flash-attn==2.8.3", version="2.8.2")


@pytest.mark.parametrize("package", ["torch-cluster[full]", "pkg; python_version > '3'", "no such/pkg"])
def test_what_is_no_name_as_pip_takes_one_is_an_unknown_package(
    package: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UnknownPackage, match="no package name as pip takes one"):
        resolve_recipe(package)


def test_a_name_too_long_for_the_file_system_is_a_name_not_an_error() -> None:
    """Path.exists() raises ENAMETOOLONG for it; found by the CLI fuzz test (calibrate --version)."""
    long_name = "x" * 300
    assert resolve_recipe(long_name, version="1.0").source == IndexLookup(long_name, "1.0")
