"""wheelbuild.spec.config: [tool.wheelbuild] read from files, validated, and each value's source shown."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from wheelbuild.errors import BadArgument, ConfigKeyUnknown, ConfigValueInvalid
from wheelbuild.nightly.matrix import load_matrix
from wheelbuild.spec import config, option_table
from wheelbuild.spec.config import FileConfig, Origin, Resolved, find_project, load_config


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _project(tmp_path: Path, table: str) -> Path:
    _write(
        tmp_path / "ext" / "pyproject.toml",
        f'[project]\nname = "ext"\n\n[tool.black]\nline-length = 99\n\n{table}',
    )
    return tmp_path / "ext"


def test_wheelbuild_toml_ranks_above_the_projects_pyproject_and_each_value_names_its_file(
    tmp_path: Path,
) -> None:
    project = _project(tmp_path, '[tool.wheelbuild]\narchs = [100]\nmemory = "8g"\n')
    _write(tmp_path / "wheelbuild.toml", '[tool.wheelbuild]\nmemory = "64g"\n')
    loaded = load_config(project, None, cwd=tmp_path)
    assert loaded.values["memory"] == ("64g", "wheelbuild.toml")
    assert loaded.values["archs"] == ("100", str(project / "pyproject.toml"))
    assert loaded.files == (str(project / "pyproject.toml"), "wheelbuild.toml")
    assert loaded.default_map() == {"memory": "64g", "archs": ("100",)}  # --archs is repeatable


def test_config_file_replaces_the_current_directorys_wheelbuild_toml(tmp_path: Path) -> None:
    _write(tmp_path / "wheelbuild.toml", '[tool.wheelbuild]\nmemory = "64g"\ncpus = 8\n')
    other = _write(tmp_path / "ci" / "site.toml", '[tool.wheelbuild]\nmemory = "32g"\n')
    loaded = load_config(None, other, cwd=tmp_path)
    assert loaded.values == {"memory": ("32g", str(other))}


def test_a_given_config_file_must_exist(tmp_path: Path) -> None:
    with pytest.raises(BadArgument, match="does not exist"):
        load_config(None, tmp_path / "missing.toml", cwd=tmp_path)


def test_values_become_what_the_command_line_takes(tmp_path: Path) -> None:
    _write(
        tmp_path / "conf" / "wheelbuild.toml",
        "[tool.wheelbuild]\n"
        'archs = [100, "120"]\npython = "3.12"\ncpus = 4\nmax-jobs = 3\n'
        'env = { FLASH_ATTENTION_FORCE_BUILD = "TRUE", A = "1" }\n'
        'output-dir = "out"\nca-bundle = "/etc/ssl/certs/ca-certificates.crt"\ngate = false\ngpus = "none"\n',
    )
    values = load_config(None, tmp_path / "conf" / "wheelbuild.toml").default_map()
    assert values == {
        "archs": ("100,120",),  # the one value of the repeatable --archs
        "pythons": ("3.12",),
        "cpus": 4.0,
        "max_jobs": 3,
        "env_pairs": ("FLASH_ATTENTION_FORCE_BUILD=TRUE", "A=1"),
        "output_dir": str(tmp_path / "conf" / "out"),  # relative to the file's own folder
        "ca_bundle": "/etc/ssl/certs/ca-certificates.crt",
        "gate": False,
        "gpus": "none",
    }


@pytest.mark.parametrize(
    ("key", "nearest"),
    [
        ("memroy", "memory"),
        ("max_jobs", "max-jobs"),
        ("pythons", "python"),
        ("cuda-12-image", "cuda12-image"),
    ],
)
def test_an_unknown_key_names_itself_the_file_and_the_nearest_key(
    tmp_path: Path, key: str, nearest: str
) -> None:
    path = _write(tmp_path / "wheelbuild.toml", f'[tool.wheelbuild]\n{key} = "x"\n')
    with pytest.raises(ConfigKeyUnknown) as raised:
        load_config(None, path)
    assert raised.value.exit_code == 17
    assert raised.value.cause == f"{path}: [tool.wheelbuild] has no key {key!r}"
    assert raised.value.remedy.startswith(f"did you mean {nearest!r}? e.g. {nearest} = ")


def test_an_unknown_key_with_nothing_near_lists_the_keys(tmp_path: Path) -> None:
    path = _write(tmp_path / "wheelbuild.toml", "[tool.wheelbuild]\nzzzzzz = 1\n")
    with pytest.raises(ConfigKeyUnknown) as raised:
        load_config(None, path)
    assert raised.value.remedy == "use one of: " + ", ".join(o.key for o in option_table.OPTIONS)


@pytest.mark.parametrize(
    ("toml", "cause"),
    [
        ('[tool.wheelbiuld]\nmemory = "6g"\n', "[tool] has no key 'wheelbiuld'"),
        ('[wheelbuild]\nmemory = "6g"\n', "the top level has no table [wheelbuild]"),
        ('[biuld]\npackage = "x"\n', "the top level has no key 'biuld'"),
    ],
)
def test_a_misspelt_table_in_wheelbuilds_own_file_is_refused(tmp_path: Path, toml: str, cause: str) -> None:
    path = _write(tmp_path / "wheelbuild.toml", toml)
    with pytest.raises(ConfigKeyUnknown, match=re.escape(cause)):
        load_config(None, path)


def test_other_tools_tables_in_pyproject_are_left_alone(tmp_path: Path) -> None:
    project = _project(tmp_path, '[tool.cibuildwheel]\nbuild = "cp311-*"\n')
    assert load_config(project, None, cwd=tmp_path).values == {}


@pytest.mark.parametrize(
    ("line", "cause"),
    [
        ('max-jobs = "8"', "max-jobs must be an integer, not '8'"),
        ("max-jobs = true", "max-jobs must be an integer, not True"),
        ("cpus = true", "cpus must be a number, not True"),
        ('gate = "no"', "gate must be true or false, not 'no'"),
        ("python = [3.11]", "python must be a string or a list of strings, not [3.11]"),
        ("archs = []", "archs must be a string like"),
        ("memory = 64", "memory must be a string, not 64"),
        ('memory = ""', "memory must be a string, not ''"),
        ("env = { A = 1 }", "env must be a table of strings"),
        ('gpus = "some"', "gpus is 'some', not one of auto, all, none"),
        ('memory = "6x"', "memory = '6x': memory size '6x' is not understood"),
        ('archs = "abc"', "archs = 'abc': CUDA arch list 'abc' is not understood"),
        ('torch = "cu999"', "torch = 'cu999': torch variant 'cu999' names CUDA tag"),
        ('python = ["2.7"]', "python = ['2.7']: Python version '2.7' is not understood"),
        ("nvcc-threads = 0", "nvcc-threads = 0: 0 is not from 1 to 8192"),
        ("cpus = 0", "cpus = 0: --cpus 0 is not a number of CPUs"),
        ('env = { "1A" = "x" }', "env = {'1A': 'x'}: --env '1A=x' is not KEY=VALUE"),
        ("[tool.wheelbuild.memory]", "memory must be a string, not {}"),
    ],
)
def test_a_wrong_type_or_value_names_the_file_and_key(tmp_path: Path, line: str, cause: str) -> None:
    path = _write(tmp_path / "wheelbuild.toml", f"[tool.wheelbuild]\n{line}\n")
    with pytest.raises(ConfigValueInvalid) as raised:
        load_config(None, path)
    assert raised.value.exit_code == 18
    assert raised.value.cause.startswith(f"{path}: [tool.wheelbuild] ")
    assert cause in raised.value.cause
    assert raised.value.remedy


def test_the_table_itself_must_be_a_table(tmp_path: Path) -> None:
    path = _write(tmp_path / "wheelbuild.toml", 'tool = { wheelbuild = "fast" }\n')
    with pytest.raises(ConfigValueInvalid, match=r"\[tool.wheelbuild\] is not a table"):
        load_config(None, path)


@pytest.mark.parametrize(
    "line",
    [
        'torch-index-url = "https://me:s3cret@pypi.example/simple"',
        'torch-index-url = "https://pypi.example/simple?token=s3cret"',
        'env = { HF_TOKEN = "x" }',
        'env = { AWS_SECRET_ACCESS_KEY = "x" }',
        'env = { GIT_CLONE = "ghp_abcdefghijklmnopqrstuvwxyz0123456789" }',
        'base-image = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"',
        'token = "x"',
        'password = "x"',
    ],
)
def test_a_credential_in_a_config_file_is_refused_without_echoing_it(tmp_path: Path, line: str) -> None:
    path = _write(tmp_path / "wheelbuild.toml", f"[tool.wheelbuild]\n{line}\n")
    with pytest.raises(ConfigValueInvalid) as raised:
        load_config(None, path)
    assert "credential" in raised.value.cause
    assert "s3cret" not in str(raised.value) and "ghp_" not in str(raised.value)
    assert "environment variable" in raised.value.remedy and "mounted file" in raised.value.remedy


def test_a_plain_index_url_is_fine(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "wheelbuild.toml", '[tool.wheelbuild]\ntorch-index-url = "https://pypi.org/simple"\n'
    )
    assert load_config(None, path).values["torch-index-url"][0] == "https://pypi.org/simple"


@pytest.mark.parametrize("kind", ["directory", "device", "device-symlink", "binary", "huge", "deep", "fifo"])
def test_a_hostile_config_file_is_refused_not_read(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "wheelbuild.toml"
    if kind == "directory":
        path.mkdir()
    elif kind == "device-symlink":
        path.symlink_to("/dev/zero")
    elif kind == "binary":
        path.write_bytes(b"\xff\xfe\x00" * 100)
    elif kind == "huge":
        path.write_text("# " + "x" * config.MAX_CONFIG + "\n")
    elif kind == "deep":
        path.write_text("x = " + "[" * 100_000)
    elif kind == "fifo":
        os.mkfifo(path)  # an open() for reading would block for ever
    given = Path("/dev/zero") if kind == "device" else path
    with pytest.raises(BadArgument):
        load_config(None, given if kind == "device" else None, cwd=tmp_path)


def test_the_matrix_reads_a_file_that_also_has_tool_wheelbuild(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "wheelbuild.toml",
        '[tool.wheelbuild]\nmemory = "64g"\n\n[[build]]\npackage = "wbdemo"\ntorch = ["cu130"]\n',
    )
    assert [c.package for c in load_matrix(path).cells] == ["wbdemo"]
    assert load_config(None, None, cwd=tmp_path).values == {"memory": ("64g", "wheelbuild.toml")}


def test_the_matrix_refuses_a_deeply_nested_file_instead_of_crashing(tmp_path: Path) -> None:
    path = _write(tmp_path / "wheelbuild.toml", "x = " + "{a=" * 100_000)
    with pytest.raises(BadArgument, match="nests deeper"):
        load_matrix(path)


def test_find_project_is_a_local_folder_with_pyproject_and_never_a_recipe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _project(tmp_path, "")
    _write(tmp_path / "flash-attn" / "pyproject.toml", "")
    recipes = ["flash-attn", "wbdemo"]
    assert find_project("ext", recipes) == Path("ext")
    assert find_project("./ext#subdir", recipes) == Path("ext")
    assert find_project("flash-attn", recipes) is None  # resolve_recipe takes the recipe too
    assert find_project("flash_attn", recipes) is None
    assert find_project(None, recipes) is None
    assert find_project("https://x/ext-1.0.tar.gz#sha256=" + "0" * 64, recipes) is None
    assert find_project("missing", recipes) is None
    assert find_project("x" * 5000, recipes) is None  # a name too long: resolve_recipe's to refuse


def test_env_names_keep_the_variables_that_existed_before() -> None:
    envs = {o.key: o.env for o in option_table.OPTIONS}
    assert envs["torch-index-url"] == "WHEELBUILD_TORCH_INDEX_URL"
    assert envs["base-image"] == "WHEELBUILD_BASE_IMAGE"
    assert envs["ca-bundle"] == "WHEELBUILD_CA_BUNDLE"
    assert envs["cuda12-image"] == "WHEELBUILD_CUDA12_IMAGE"
    assert envs["max-jobs"] == "WHEELBUILD_MAX_JOBS"
    assert len(set(envs.values())) == len(envs)


def test_provenance_names_the_flag_the_variable_the_file_or_the_default() -> None:
    files = FileConfig(
        values={"archs": ("100,120", "wheelbuild.toml"), "env": (("A=secret", "B=1"), "wheelbuild.toml")},
        files=("wheelbuild.toml",),
    )
    by_key = option_table.BY_KEY
    lines = config.provenance(
        [
            Resolved(by_key["memory"], "64g", Origin.ENVIRONMENT),
            Resolved(by_key["archs"], "100,120", Origin.FILE),
            Resolved(by_key["python"], ("3.11",), Origin.COMMAND_LINE),
            Resolved(by_key["cpus"], None, Origin.DEFAULT),
            Resolved(by_key["gate"], False, Origin.ENVIRONMENT),
            Resolved(by_key["env"], ("A=secret", "B=1"), Origin.FILE),
            Resolved(by_key["torch-index-url"], "https://u:pw@h/simple", Origin.ENVIRONMENT),
        ],
        files,
    )
    assert [line.split() for line in lines] == [
        ["memory", "64g", "from", "WHEELBUILD_MEMORY"],
        ["archs", "100,120", "from", "wheelbuild.toml"],
        ["python", "3.11", "from", "--python"],
        ["cpus", "all", "of", "this", "process's", "(default)"],
        ["gate", "false", "from", "WHEELBUILD_GATE"],
        ["env", "A,", "B", "(values", "not", "shown)", "from", "wheelbuild.toml"],
        ["torch-index-url", "https://***@h/simple", "from", "WHEELBUILD_TORCH_INDEX_URL"],
    ]
    assert len({line.index("from") for line in lines if " from " in line}) == 1  # one column


def test_described_groups_keys_by_file() -> None:
    files = FileConfig(
        values={
            "archs": ("100", "wheelbuild.toml"),
            "cpus": (4.0, "ext/pyproject.toml"),
            "memory": ("8g", "wheelbuild.toml"),
        }
    )
    assert files.described() == "archs, memory from wheelbuild.toml; cpus from ext/pyproject.toml"
