"""The fixture wheel from the real build pipeline, checked, published, served and installed by
real pip and real uv (torch from PyPI, the extension from our index), then imported (no GPU
here, so nothing runs a kernel; import loads libtorch and libcudart)."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import socket
import struct
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from wheelbuild.variants import parse_variant
from wheelbuild.wheel.stamp import stamp_wheel

from tests.integration.conftest import FIXTURE_TORCH, UV_CACHE, FixtureBuild, wheelbuild
from tests.serving import clean_env, read_log, run_ok, running_server, uv_binary

SO = "wbdemo/_C.cpython-311-x86_64-linux-gnu.so"


def _pin() -> str:
    """The fixture wheel by name, as pip and uv ask for it."""
    return f"wbdemo==0.1.0+{FIXTURE_TORCH.label}"


# One uv cache for these tests, kept between runs: torch and its CUDA wheels are ~3 GB.


def _relabel_sass(so: bytes, old: int, new: int) -> bytes:
    """The .so with its sm_<old> cubin entry claiming sm_<new>: a wheel built without sm_<old>,
    as far as the fatbin's entry headers say (layout: builder/wheel/contents.py)."""
    section = ELFFile(io.BytesIO(so)).get_section_by_name(".nv_fatbin")
    assert section is not None
    data, start = bytearray(so), section["sh_offset"]
    pos, end, relabelled = start, start + section["sh_size"], 0
    while pos < end:
        if data[pos] == 0:
            pos += 1
            continue
        _magic, _version, header_size, fat_size = struct.unpack_from("<IHHQ", data, pos)
        entry, container_end = pos + header_size, pos + header_size + fat_size
        while entry < container_end:
            kind, _v, entry_header, payload = struct.unpack_from("<HHIQ", data, entry)
            if kind == 2 and struct.unpack_from("<I", data, entry + 28)[0] == old:
                struct.pack_into("<I", data, entry + 28, new)
                relabelled += 1
            entry += entry_header + payload
        pos = container_end
    assert relabelled, f"no sm_{old} cubin found"
    return bytes(data)


def _with_member(wheel: Path, member: str, data: bytes, dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / wheel.name
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            target.writestr(info, data if info.filename == member else source.read(info))
    return out


def test_fixture_wheel_passes_inspect_and_its_checks(fixture_build: FixtureBuild) -> None:
    done = wheelbuild("inspect", "--json", str(fixture_build.wheel))
    assert done.returncode == 0, done.stderr
    (info,) = json.loads(done.stdout)
    assert info["version"] == info["metadata"]["version"] == f"0.1.0+{FIXTURE_TORCH.label}"
    assert info["torch_requirement"] == [f"torch=={FIXTURE_TORCH.minor}.*"]
    assert info["extension_modules"][SO] == {"sass": [100, 120], "ptx": [], "cudart": ["libcudart.so.13"]}


def test_publish_refuses_the_fixture_wheel_with_an_arch_stripped(
    fixture_build: FixtureBuild, tmp_path: Path
) -> None:
    so = zipfile.ZipFile(fixture_build.wheel).read(SO)
    stripped = _with_member(fixture_build.wheel, SO, _relabel_sass(so, 120, 90), tmp_path / "in")
    done = wheelbuild(
        "publish", str(stripped), "--torch", FIXTURE_TORCH.variant, "--to", str(tmp_path / "tree")
    )
    assert done.returncode == 44, done.stdout + done.stderr
    assert "no SASS for sm_120 (it has sm_90, sm_100)" in done.stderr
    assert not (tmp_path / "tree" / "files").exists()  # nothing published


def test_publish_refuses_the_fixture_wheel_with_another_variants_label(
    fixture_build: FixtureBuild, tmp_path: Path
) -> None:
    (tmp_path / "in").mkdir()
    copy = Path(shutil.copy2(fixture_build.wheel, tmp_path / "in" / fixture_build.wheel.name))
    relabelled = stamp_wheel(copy, parse_variant("2.10.0+cu128"))
    done = wheelbuild(
        "publish", str(relabelled), "--torch", FIXTURE_TORCH.variant, "--to", str(tmp_path / "tree")
    )
    assert done.returncode == 45, done.stdout + done.stderr
    assert (
        f"local version label is cu128torch2.10, but the wheel was built for {FIXTURE_TORCH.label}"
        in done.stderr
    )
    assert "also:" in done.stderr and "torch==2.10.*" in done.stderr  # the pin is wrong too


@pytest.fixture(scope="module")
def published(fixture_build: FixtureBuild, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tree = tmp_path_factory.mktemp("wheelhouse") / "cu130"
    # No --torch: the build report beside the wheel says what it was built for.
    done = wheelbuild("publish", str(fixture_build.wheel), "--to", str(tree))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"added {fixture_build.wheel.name}" in done.stdout
    return tree


def test_pip_installs_the_fixture_by_name_from_the_served_index_and_imports_it(
    published: Path, tmp_path: Path
) -> None:
    env = clean_env(tmp_path, uv_cache=UV_CACHE)
    venv = tmp_path / "pip-venv"
    run_ok([shutil.which("python3.11") or "python3", "-m", "venv", str(venv)], env, tmp_path)
    python = str(venv / "bin" / "python")
    # torch (~3 GB with its CUDA wheels) from PyPI through uv's cache; then pip, from our index
    # only, finds the fixture by name and sees its torch pin satisfied.
    torch = FIXTURE_TORCH
    run_ok(
        [uv_binary(), "pip", "install", "--python", python, f"torch=={torch.version}"],
        env,
        tmp_path,
        timeout=900,
    )
    log = tmp_path / "access.log"
    with running_server(published, access_log=log) as url:
        run_ok(
            [python, "-m", "pip", "install", "--index-url", url, f"wbdemo==0.1.0+{torch.label}"],
            env,
            tmp_path,
            timeout=300,
        )
    done = run_ok(
        [python, "-c", "import wbdemo, importlib.metadata as m; print(m.version('wbdemo'))"], env, tmp_path
    )
    assert done.stdout.strip() == f"0.1.0+{torch.label}"
    paths = [hit.path for hit in read_log(log, at_least=3)]
    assert paths[0] == "/simple/wbdemo/" and paths[-1].endswith("manylinux_2_34_x86_64.whl")


def test_uv_project_takes_the_fixture_from_our_index_and_torch_from_pypi(
    published: Path, tmp_path: Path
) -> None:
    """docs/guides/publish.md's uv setup: our index explicit, pinned to the package by [tool.uv.sources]."""
    env = clean_env(tmp_path, uv_cache=UV_CACHE)
    log = tmp_path / "access.log"
    with running_server(published, access_log=log) as url:
        project = tmp_path / "consumer"
        project.mkdir()
        (project / "pyproject.toml").write_text(
            f"""[project]
name = "consumer"
version = "0"
requires-python = ">=3.11,<3.12"
dependencies = ["{_pin()}"]

[tool.uv]
environments = ["sys_platform == 'linux' and platform_machine == 'x86_64'"]

[[tool.uv.index]]
name = "wheelbuild"
url = "{url}"
explicit = true

[tool.uv.sources]
wbdemo = {{ index = "wheelbuild" }}
"""
        )
        python = ["--python", shutil.which("python3.11") or "python3"]
        run_ok([uv_binary(), "lock", *python], env, project, timeout=300)
        resolved = read_log(log, at_least=2)
        # uv resolved from the index page and the 0.2 KiB metadata file: no byte of the wheel.
        assert [h.path.rsplit(".", 1)[-1] for h in resolved] == ["/simple/wbdemo/", "metadata"], resolved
        wheel_size = next((published / "files").glob("*.whl")).stat().st_size
        assert sum(h.bytes for h in resolved) < wheel_size / 100
        run_ok([uv_binary(), "sync", *python], env, project, timeout=900)
    done = run_ok(
        [str(project / ".venv" / "bin" / "python"), "-c", "import wbdemo, torch; print(torch.__version__)"],
        env,
        project,
    )
    assert done.stdout.strip().startswith(f"{FIXTURE_TORCH.minor}.")
    lock = (project / "uv.lock").read_text()
    assert 'name = "wbdemo"' in lock and url in lock  # from our index; torch from PyPI


# --- upload to a PyPI-compatible server (a real pypiserver, in its own venv: its passlib does
# not work with the bcrypt 5 that wheelbuild serve uses) --------------------------------------

PYPISERVER_VENV = Path.home() / ".cache" / "wheelbuild-tests" / "pypiserver-2.4.2"


@pytest.fixture(scope="module")
def pypiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    with _pypiserver(tmp_path_factory.mktemp("env"), tmp_path_factory.mktemp("pypiserver")) as served:
        yield served


@contextlib.contextmanager
def _pypiserver(env_dir: Path, work: Path) -> Iterator[tuple[str, Path]]:
    """A real pypiserver on a free port, user ci / ci-secret-pw: its URL and packages folder."""
    python = PYPISERVER_VENV / "bin" / "python"
    env = clean_env(env_dir)
    if not python.exists():
        run_ok([sys.executable, "-m", "venv", str(PYPISERVER_VENV)], env, Path.home())
        run_ok(
            [str(python), "-m", "pip", "install", "pypiserver==2.4.2", "passlib==1.7.4"],
            env,
            Path.home(),
            300,
        )
    packages = work / "packages"
    packages.mkdir()
    htpasswd = work / "htpasswd"
    make_user = "from passlib.apache import HtpasswdFile as H; h = H(sys.argv[1], new=True); h.set_password('ci', 'ci-secret-pw'); h.save()"
    run_ok([str(python), "-c", f"import sys; {make_user}", str(htpasswd)], env, work)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [str(PYPISERVER_VENV / "bin" / "pypi-server"), "run", "-i", "127.0.0.1", "-p", str(port),
         "-P", str(htpasswd), "-a", "update", "--disable-fallback", str(packages)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            break
        time.sleep(0.2)
    try:
        yield url, packages
    finally:
        server.terminate()
        server.wait(timeout=10)


def _upload(wheel: Path, url: str, password: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**clean_env(tmp_path), "TWINE_USERNAME": "ci", "TWINE_PASSWORD": password}
    return subprocess.run(
        [str(Path(sys.executable).parent / "wheelbuild"), "publish", str(wheel), "--to", url],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def test_publish_uploads_to_a_pypi_compatible_server_with_credentials_from_env(
    fixture_build: FixtureBuild, pypiserver: tuple[str, Path], tmp_path: Path
) -> None:
    url, packages = pypiserver
    wrong = _upload(fixture_build.wheel, url, "not-the-password", tmp_path)
    assert wrong.returncode == 58, wrong.stdout + wrong.stderr
    assert re.search(r"upload to \S+ refused: the server answered HTTP 40[13]", wrong.stderr), wrong.stderr
    assert "not-the-password" not in wrong.stdout + wrong.stderr
    assert list(packages.iterdir()) == []

    done = _upload(fixture_build.wheel, url, "ci-secret-pw", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ci-secret-pw" not in done.stdout + done.stderr
    assert [p.name for p in packages.iterdir()] == [fixture_build.wheel.name]
    assert (packages / fixture_build.wheel.name).read_bytes() == fixture_build.wheel.read_bytes()

    # Installable by name from the server it went to.
    env = clean_env(tmp_path)
    run_ok(
        [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(tmp_path / "got"),
         "--index-url", f"{url}simple/", _pin()],
        env, tmp_path,
    )  # fmt: skip
    assert [p.name for p in (tmp_path / "got").iterdir()] == [fixture_build.wheel.name]

    again = _upload(fixture_build.wheel, url, "ci-secret-pw", tmp_path)
    # pypiserver answers 400 "... already exists", devpi and warehouse 409: the same remedy.
    assert again.returncode == 58 and "already exists" in again.stderr, again.stdout + again.stderr
    assert "never replaced" in again.stderr


def _passed_cell(night: Path, cell_id: str, build: FixtureBuild) -> None:
    """A cell that passed, as `nightly build-cell` leaves it: the real build's run (wheel and
    report) and its cell.json."""
    run = night / cell_id / "runs" / build.run_dir.name
    run.mkdir(parents=True)
    for name in (build.wheel.name, "build-report.json"):
        shutil.copy2(build.run_dir / name, run / name)
    record = {
        "id": cell_id,
        "torch": "cu130",
        "status": "passed",
        "run": f"runs/{run.name}",
        "wheels": [build.wheel.name],
    }
    (night / cell_id / "cell.json").write_text(json.dumps(record))


def test_a_nightly_to_an_upload_url_never_uploads_again_what_its_index_holds(
    fixture_build: FixtureBuild, tmp_path: Path
) -> None:
    # An upload server keeps no inputs keys, so each night builds its cells again and finds the
    # same file names; it refuses a name it holds. Before, that failed the whole variant (exit 60).
    config = tmp_path / "wheelbuild.toml"
    config.write_text('[[build]]\npackage = "wbdemo"\ntorch = ["cu130"]\n')
    with _pypiserver(tmp_path / "env", tmp_path) as (url, packages):
        env = {**clean_env(tmp_path), "TWINE_USERNAME": "ci", "TWINE_PASSWORD": "ci-secret-pw"}
        nights = []
        for n in (1, 2):
            night = tmp_path / f"night{n}"
            _passed_cell(night, "wbdemo-cu130-cp311-100.120", fixture_build)
            args = ["nightly", "publish-night", str(night), "--config-file", str(config), "--to", url]
            nights.append(wheelbuild(*args, "--index", f"{url}simple/", env=env, timeout=300))
        without_index = wheelbuild(*args, env=env, timeout=300)
        assert [p.name for p in packages.iterdir()] == [fixture_build.wheel.name]
    first, second = nights
    assert first.returncode == 0, first.stdout + first.stderr
    assert f"| wbdemo-cu130-cp311-100.120 | published | tonight: {fixture_build.wheel.name} |" in first.stdout
    assert second.returncode == 0, second.stdout + second.stderr
    assert (
        f"| wbdemo-cu130-cp311-100.120 | published | earlier: the index already holds {fixture_build.wheel.name} "
        "(an upload server keeps no inputs keys, so the cell was built again; a published file is never replaced) |"
    ) in second.stdout
    # Without the index it cannot know: it stops before uploading anything (exit 16).
    assert without_index.returncode == 16 and "NIGHTLY_INDEX_URL" in without_index.stderr, (
        without_index.stderr
    )


def test_upload_url_with_credentials_in_it_is_refused(fixture_build: FixtureBuild) -> None:
    done = wheelbuild("publish", str(fixture_build.wheel), "--to", "http://ci:pw@127.0.0.1:9/")
    assert done.returncode == 13
    assert "carries credentials" in done.stderr and "pw@" not in done.stderr
