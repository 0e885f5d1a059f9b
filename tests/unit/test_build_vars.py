"""A package whose build reads its CUDA arch list in a form of its own, or its parallelism from
a variable of its own (natten 0.21.7: NATTEN_CUDA_ARCH as `9.0;10.0;12.0`, NATTEN_N_WORKERS for
`make -j`): the survey finds them in its setup.py and CMakeLists.txt (read as text, never run),
the build sets them in that form and at the plan's MAX_JOBS, and the plan says so; a form the
files do not tell is a warning naming `--arch-env NAME:FORM`, the recipe-free way to say it.
Projects are real folders of real files; the plan runs through the real CLI (Docker unreachable)."""

from __future__ import annotations

import io
import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from wheelbuild.errors import BadArgument
from wheelbuild.pipeline.preflight import surveyed
from wheelbuild.progress.console import Console
from wheelbuild.recipes import resolve_recipe
from wheelbuild.recipes.build_vars import ArchForm, arch_form_of_list, parse_arch_env
from wheelbuild.recipes.survey import survey_source
from wheelbuild.spec.build_spec import BuildSpec
from wheelbuild.spec.sources import PreparedSource
from wheelbuild.variants import parse_variant

RunCli = Callable[..., subprocess.CompletedProcess[str]]

# natten's shape (its setup.py before 0.21, abridged): the arch list read dotted, one float()
# and * 10 per arch, split on ";"; the workers for `make -j`; the build driven through CMake.
NATTEN_LIKE = """import os
import subprocess
import multiprocessing
from setuptools import setup
raise SystemExit("setup.py was run")  # the survey reads it; never runs it

DEFAULT_N_WORKERS = max(1, multiprocessing.cpu_count() // 4)
cuda_arch = os.environ.get("NATTEN_CUDA_ARCH", "")
n_workers = os.environ.get("NATTEN_N_WORKERS", DEFAULT_N_WORKERS)

def _check_cuda_arch(arch):
    arch = float(arch)
    arch = arch * 10  # 8.6 => 86
    return str(int(arch))

def get_cuda_arch_list(cuda_arch_list):
    return ";".join(_check_cuda_arch(a) for a in cuda_arch_list.split(";"))

def build():
    subprocess.check_call(["cmake", "csrc", f"-DNATTEN_CUDA_ARCH_LIST={get_cuda_arch_list(cuda_arch)}"])
    subprocess.check_call(["make", f"-j{n_workers}"])

setup(name="natten", version="0.21.7")
"""


def _project(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


# --- the forms ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("form", "spelled"),
    [
        ("plain", "90;100;120"),
        ("dotted", "9.0;10.0;12.0+PTX"),
        ("sm", "sm_90;sm_100;sm_120;compute_120"),
        ("cmake", "90-real;100-real;120-real;120-virtual"),
        ("plain-comma", "90,100,120"),
        ("dotted-space", "9.0 10.0 12.0+PTX"),
    ],
)
def test_each_form_spells_the_archs_as_packages_read_them(form: str, spelled: str) -> None:
    var = parse_arch_env(f"SOME_CUDA_ARCHS:{form}")
    assert var.name == "SOME_CUDA_ARCHS"
    assert var.form.spell((90, 100, 120), ptx=(120,)) == spelled
    assert arch_form_of_list(spelled) == var.form  # what it writes, it reads back as the same form


def test_arch_env_without_a_form_is_plain_except_torchs_own_list() -> None:
    assert parse_arch_env("FOO_ARCHS").form == ArchForm("plain", ";")
    assert parse_arch_env("TORCH_CUDA_ARCH_LIST").form == ArchForm("dotted", ";")


@pytest.mark.parametrize("given", ["NATTEN_CUDA_ARCH:dotty", "NATTEN_CUDA_ARCH:plain-tab", "9X:plain", "A B"])
def test_an_arch_env_wheelbuild_cannot_write_is_refused_with_the_forms(given: str) -> None:
    with pytest.raises(BadArgument) as refused:
        resolve_recipe("causal-conv1d", version="1.7.0", arch_env=given)
    assert "NATTEN_CUDA_ARCH:dotted" in refused.value.remedy


@pytest.mark.parametrize("text", ["", "native", "8.0;sm_90", "all-major", "1;2"])
def test_what_is_no_arch_list_has_no_form(text: str) -> None:
    assert arch_form_of_list(text) is None


# --- the survey --------------------------------------------------------------------------------


def test_the_survey_finds_natten_s_dotted_arch_list_and_its_workers(tmp_path: Path) -> None:
    found = survey_source(_project(tmp_path, {"setup.py": NATTEN_LIKE}), ".")
    ((arch,),) = [found.arch_vars]
    assert (arch.name, arch.form) == ("NATTEN_CUDA_ARCH", ArchForm("dotted", ";"))
    assert "float() and * 10" in arch.why
    assert [v.name for v in found.jobs_vars] == ["NATTEN_N_WORKERS", "CMAKE_BUILD_PARALLEL_LEVEL"]


@pytest.mark.parametrize(
    ("code", "form"),
    [
        ('A = os.getenv("DEMO_CUDA_ARCHS", "sm_80,sm_90")', ArchForm("sm", ",")),
        ('A = os.environ.get("DEMO_CUDA_ARCH_LIST", "80;90")', ArchForm("plain", ";")),
        ('A = os.getenv("DEMO_CUDA_ARCHS", "8.0 9.0+PTX")', ArchForm("dotted", " ")),
        (
            'A = [a.removeprefix("sm_") for a in os.getenv("DEMO_CUDA_ARCHS", "").split(",")]',
            ArchForm("sm", ","),
        ),
        ('A = [int(a) for a in os.environ["DEMO_CUDA_ARCHS"].split(";")]', ArchForm("plain", ";")),
        ('A = os.getenv("DEMO_CUDA_ARCHS", "").replace(".", "")', ArchForm("dotted", ";")),
        ('A = os.getenv("DEMO_CUDA_ARCHS")', None),  # nothing tells its form
    ],
    ids=[
        "default-sm-comma",
        "default-plain",
        "default-dotted-space",
        "strips-sm",
        "int-split",
        "drops-dot",
        "unknown",
    ],
)
def test_the_form_comes_from_the_default_else_from_what_the_file_does_with_it(
    tmp_path: Path, code: str, form: ArchForm | None
) -> None:
    found = survey_source(_project(tmp_path, {"setup.py": f"import os\n{code}\n"}), ".")
    assert [(v.name.startswith("DEMO_CUDA_ARCH"), v.form) for v in found.arch_vars] == [(True, form)]


def test_a_cmake_build_s_environment_reads_are_found_too(tmp_path: Path) -> None:
    cmake = (
        "project(demo LANGUAGES CXX CUDA)\n"
        "set(CMAKE_CUDA_ARCHITECTURES $ENV{DEMO_CUDA_ARCHS})  # $ENV{IGNORED_CUDA_ARCHS} in a comment\n"
        "set(JOBS $ENV{DEMO_BUILD_JOBS})\n"
    )
    files = {"CMakeLists.txt": cmake, "pyproject.toml": '[build-system]\nrequires = ["scikit-build-core"]\n'}
    found = survey_source(_project(tmp_path, files), ".")
    assert [(v.name, v.form) for v in found.arch_vars] == [("DEMO_CUDA_ARCHS", ArchForm("plain", ";"))]
    assert [v.name for v in found.jobs_vars] == ["DEMO_BUILD_JOBS", "CMAKE_BUILD_PARALLEL_LEVEL"]


def test_torch_s_own_variables_and_rocm_s_are_not_taken_for_the_package_s(tmp_path: Path) -> None:
    code = (
        'import os\nA = os.getenv("TORCH_CUDA_ARCH_LIST", "8.0")\nB = os.getenv("MAX_JOBS", "4")\n'
        'C = os.getenv("GPU_ARCHS", "gfx90a").split(";")\n'
    )
    found = survey_source(_project(tmp_path, {"setup.py": code}), ".")
    assert found.arch_vars == () and found.jobs_vars == ()


# --- what the build sets ----------------------------------------------------------------------


def _surveyed_env(
    project: Path, env: dict[str, str], arch_env: str | None = None
) -> tuple[dict[str, str], str]:
    recipe = resolve_recipe(str(project), arch_env=arch_env).with_env(env)
    spec = BuildSpec(recipe=recipe, variant=parse_variant("cu130"), archs=(90, 100, 120), ptx=(120,))
    said = io.StringIO()
    spec, _survey, _lines = surveyed(spec, PreparedSource(project, "."), Console(said))
    return spec.recipe.build_env(spec.archs, max_jobs=3, nvcc_threads=1, ptx=spec.ptx), said.getvalue()


def test_the_build_sets_the_arch_list_in_its_form_and_the_workers_at_max_jobs(tmp_path: Path) -> None:
    env, said = _surveyed_env(_project(tmp_path, {"setup.py": NATTEN_LIKE}), {})
    assert env["NATTEN_CUDA_ARCH"] == "9.0;10.0;12.0+PTX"  # never 90;100;120 (sm_900)
    assert env["NATTEN_N_WORKERS"] == env["MAX_JOBS"] == env["CMAKE_BUILD_PARALLEL_LEVEL"] == "3"
    assert "setting NATTEN_CUDA_ARCH=9.0;10.0;12.0+PTX: the CUDA archs, dotted" in said
    # --env wins over what the survey found, and --arch-env NAME:FORM over its form.
    given, _ = _surveyed_env(tmp_path, {"NATTEN_N_WORKERS": "1", "NATTEN_CUDA_ARCH": "9.0"})
    assert (given["NATTEN_N_WORKERS"], given["NATTEN_CUDA_ARCH"]) == ("1", "9.0")
    told, _ = _surveyed_env(tmp_path, {}, arch_env="NATTEN_CUDA_ARCH:sm-comma")
    assert told["NATTEN_CUDA_ARCH"] == "sm_90,sm_100,sm_120,compute_120"


def test_an_arch_list_of_a_form_nobody_tells_is_not_set_and_said(tmp_path: Path) -> None:
    project = _project(tmp_path, {"setup.py": 'import os\nA = os.getenv("DEMO_CUDA_ARCHS")\n'})
    env, said = _surveyed_env(project, {})
    assert "DEMO_CUDA_ARCHS" not in env
    assert "reads its CUDA archs from DEMO_CUDA_ARCHS, in a form wheelbuild cannot tell" in said
    assert "give --arch-env DEMO_CUDA_ARCHS:FORM" in said


# --- through the CLI: the plan says what is set -------------------------------------------------


def test_plan_says_the_variables_it_sets_in_their_form_and_at_the_plans_max_jobs(
    run_cli: RunCli, tmp_path: Path
) -> None:
    project = _project(tmp_path / "natten-like", {"setup.py": NATTEN_LIKE})
    args = (
        "plan",
        str(project),
        "--archs",
        "90,100,120",
        "--python",
        "3.12",
        "--memory",
        "8g",
        "--cpus",
        "2",
    )
    planned = run_cli(*args)
    assert planned.returncode == 0, planned.stderr
    lines = planned.stdout.splitlines()
    jobs = next(line.split()[1] for line in lines if line.startswith("  MAX_JOBS "))
    sets = [line for line in lines if line.startswith("sets ")]
    assert sets[0].startswith(
        "sets NATTEN_CUDA_ARCH=9.0;10.0;12.0: the CUDA archs, dotted (it reads each arch"
    )
    assert (
        f"sets NATTEN_N_WORKERS={jobs}: setup.py runs that many compiles at once, as the plan's MAX_JOBS"
        in sets
    )
    document = json.loads(run_cli(*args, "--json").stdout)
    assert [s.split(":")[0] for s in document["notes"]["switches"]] == [
        "NATTEN_CUDA_ARCH=9.0;10.0;12.0",
        f"NATTEN_N_WORKERS={document['plan']['max_jobs']}",
        f"CMAKE_BUILD_PARALLEL_LEVEL={document['plan']['max_jobs']}",
    ]
    told = run_cli(*args, "--arch-env", "NATTEN_CUDA_ARCH:plain")
    assert told.returncode == 0, told.stderr
    said = [line for line in told.stdout.splitlines() if line.startswith("sets NATTEN_CUDA_ARCH")]
    assert said == [
        "sets NATTEN_CUDA_ARCH=90;100;120: the CUDA archs, plain (the recipe's arch variable, or --arch-env)"
    ]
    refused = run_cli(*args, "--arch-env", "NATTEN_CUDA_ARCH:dotty")
    assert refused.returncode == 13, refused.stderr
    assert "error: --arch-env form 'dotty' is not one wheelbuild writes" in refused.stderr


def test_plan_says_an_arch_variable_it_leaves_unset_and_how_to_tell_its_form(
    run_cli: RunCli, tmp_path: Path
) -> None:
    setup = 'import os\nfrom setuptools import setup\nA = os.getenv("DEMO_CUDA_ARCHS")\nsetup(name="demo", version="1.0")\n'
    project = _project(tmp_path / "demo", {"setup.py": setup})
    args = ("plan", str(project), "--archs", "100,120", "--python", "3.12", "--memory", "8g", "--cpus", "2")
    planned = run_cli(*args)
    assert planned.returncode == 0, planned.stderr
    unset = [line for line in planned.stdout.splitlines() if line.startswith("not set: ")]
    assert len(unset) == 1 and "give --arch-env DEMO_CUDA_ARCHS:FORM" in unset[0]
    assert "warning: the package's build reads its CUDA archs from DEMO_CUDA_ARCHS" in planned.stderr
    document = json.loads(run_cli(*args, "--json").stdout)
    assert document["notes"]["unset_arch_vars"] == [unset[0].removeprefix("not set: ")]
    told = run_cli(*args, "--arch-env", "DEMO_CUDA_ARCHS:dotted")
    assert told.returncode == 0 and "not set: " not in told.stdout and "warning" not in told.stderr, (
        told.stderr
    )
    assert "sets DEMO_CUDA_ARCHS=10.0;12.0: the CUDA archs, dotted" in told.stdout
