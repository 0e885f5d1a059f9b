"""`wheelbuild plan` is the dry run of `wheelbuild build` (issue 30, item 2): it refuses what
build refuses before its first container, with build's exit code (both resolve the request in resolve.py); its
summary is the plan that runs, each number of which a "why" line states; the static and the
admission plan are labelled; and a predicted peak over the limit is a warning, or with --strict
an error (exit 28).

Build runs with Docker unreachable (run_cli's DOCKER_HOST), so a valid build stops at exit 20:
any other code is a check of its own that came before Docker. torch's pages come from run_cli's
cache (FAKE_TORCH); a release lookup goes to a local PEP 691 index; no test reaches the network,
except tests/sdists.py's one download of flash-attn's sdist per machine.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

from tests.sdists import make_sdist

RunCli = Callable[..., subprocess.CompletedProcess[str]]


def test_control_what_build_takes_plan_plans(run_cli: RunCli) -> None:
    built = run_cli("build", "wbdemo", "--memory", "6g")
    assert built.returncode == 20, built.stderr  # past every check: it needed Docker
    planned = run_cli("plan", "wbdemo", "--memory", "6g")
    assert planned.returncode == 0, planned.stderr
    assert planned.stdout.startswith("plan for wbdemo")


# --- the summary is the plan that runs, and every number of it is said -------------------------


# --- a peak over the limit: a warning, and with --strict an error -----------------------------


# --- the wheels it would make, and the whole dry run as JSON ---------------------------------------


def test_plan_lists_the_wheels_a_build_would_make_one_line_each(run_cli: RunCli) -> None:
    planned = run_cli("plan", "wbdemo", "--python", "3.11,3.13", "--archs", "100,120")
    assert planned.returncode == 0, planned.stderr
    lines = planned.stdout.splitlines()
    start = lines.index("wheels (2; Pythons as named):")
    torch = next(line for line in lines if line.startswith("torch: ")).split()[2].removesuffix(":")
    minor = ".".join(torch.split(".")[:2])
    # wbdemo's version is an environment variable's default in its setup.py, read without running it.
    assert lines[0] == "plan for wbdemo 0.1.0"
    assert lines[start + 1 : start + 3] == [
        f"  wbdemo 0.1.0+cu130torch{minor}  cp311  torch {torch}+cu130  sm_100 sm_120",
        f"  wbdemo 0.1.0+cu130torch{minor}  cp313  torch {torch}+cu130  sm_100 sm_120",
    ]


def _heldext(folder: Path) -> Path:
    """A setup.py-only project in a folder named for nothing in it; run, its setup.py would fail."""
    folder.mkdir(parents=True)
    (folder / "setup.py").write_text(
        "raise SystemExit('run')\n"
        "from setuptools import setup\n"
        "setup(name='HeldExt', version='0.3.1', python_requires='>=3.11')\n"
    )
    return folder


def test_plan_of_a_folder_names_the_project_and_version_its_setup_py_states(
    run_cli: RunCli, tmp_path: Path
) -> None:
    folder = _heldext(tmp_path / "tmp.Klro3Y3zsS")
    planned = run_cli("plan", str(folder), "--python", "3.12", "--archs", "120")
    assert planned.returncode == 0, planned.stderr
    lines = planned.stdout.splitlines()
    assert lines[0] == "plan for heldext 0.3.1"
    assert lines[1] == f"source: {folder}"  # the folder is where it is, not what it is
    wheel = lines[lines.index("wheels (1; Pythons as named):") + 1]
    assert wheel.split()[:3] == ["heldext", "0.3.1+cu130torch2.14", "cp312"]


def test_plan_of_an_sdist_names_the_project_its_pkg_info_states(run_cli: RunCli, tmp_path: Path) -> None:
    pkg_info = b"Metadata-Version: 2.1\nName: heldext\nVersion: 0.4.0\nRequires-Python: >=3.10\n\n"
    sdist = make_sdist(
        tmp_path / "upload.tar.gz",
        [("heldext-0.4.0/PKG-INFO", pkg_info), ("heldext-0.4.0/setup.py", b"raise SystemExit('run')\n")],
    )
    planned = run_cli("plan", str(sdist), "--python", "3.12", "--archs", "120", "--json")
    assert planned.returncode == 0, planned.stderr
    document = json.loads(planned.stdout)
    assert document["package"]["name"] == "heldext" and document["package"]["version"] == "0.4.0"
    assert [w["version"] for w in document["wheels"]] == ["0.4.0+cu130torch2.14"]


def test_plan_fits_a_screen_and_says_the_torch_line_once_the_why_lines_behind_verbose(
    run_cli: RunCli,
) -> None:
    args = ("plan", "--example", "--torch", "cu130", "--memory", "6g", "--cpus", "2")
    short = run_cli(*args)
    assert short.returncode == 0, short.stderr
    lines = short.stdout.splitlines()
    assert len(lines) + len(short.stderr.splitlines()) <= 24, short.stdout + short.stderr
    said = [line for line in (*lines, *short.stderr.splitlines()) if "newest on" in line]
    assert len(said) == 1 and said[0].startswith("torch: torch 2.14.1: newest on "), said
    assert lines[0] == "plan for wbdemo 0.1.0"
    summary = {
        line.split()[0] for line in lines[1:] if line.startswith("  ") and not line.startswith("  wbdemo")
    }
    assert {"runs", "memory", "CPUs", "MAX_JOBS", "NVCC_THREADS", "predicted", "model"} <= summary
    assert any(line.startswith("toolkit: CUDA 13.1") for line in lines)
    assert any(line.startswith("C++ standard: ") for line in lines)
    assert not any(line.startswith(("why", "options (", "  - ")) for line in lines)
    assert lines[-1].startswith("(-v: ")
    verbose = run_cli(*args, "-v")
    assert verbose.returncode == 0, verbose.stderr
    long = verbose.stdout.splitlines()
    assert any(line.startswith("why, 2 of 2 (the admission plan") for line in long)
    assert any(line.startswith("options (command line > ") for line in long)
    assert any(line.split()[:3] == ["memory", "6g", "from"] for line in long)
    # What the short plan says, the long one says too.
    assert set(lines[:-1]) - {line for line in lines if line.startswith("  model")} <= set(long)


def _text_rows(lines: list[str]) -> dict[str, str]:
    return {line[2:18].strip(): line[18:] for line in lines[1:] if line.startswith("  ") and line[2:3] != " "}


def test_plan_json_is_one_object_holding_what_plan_prints(run_cli: RunCli) -> None:
    args = ("plan", "wbdemo", "--python", "3.11", "--archs", "120", "--memory", "6g", "--cpus", "2")
    planned = run_cli(*args, "--json")
    assert planned.returncode == 0, planned.stderr
    document = json.loads(planned.stdout)  # the whole of stdout: one object, nothing else
    assert document["schema"] == 1
    assert document["package"]["name"] == "wbdemo" and document["package"]["version"] == "0.1.0"
    assert document["package"]["requires_python"] == ">=3.9"  # its setup.py's python_requires
    assert document["torch"]["variant"].endswith("+cu130") and document["toolkit"]["cuda"] == "13.1"
    assert document["archs"] == [120] and document["pythons"] == {"tags": ["cp311"], "from": "as named"}
    (wheel,) = document["wheels"]
    assert wheel["python"] == "cp311" and wheel["archs"] == [120] and wheel["project"] == "wbdemo"
    assert wheel["version"] == f"0.1.0+cu130torch{'.'.join(document['torch']['variant'].split('.')[:2])}"
    plan = document["plan"]
    assert plan["memory"] == 6 * 1024**3 and plan["max_jobs"] >= 1 and plan["over_budget"] is None
    options = {o["key"]: o for o in document["options"]}
    assert options["memory"] == {"key": "memory", "value": "6g", "from": "--memory"}
    assert options["gate"]["from"] == ""  # the default
    # Every value the text shows is the JSON's: the same plan, printed both ways.
    text = run_cli(*args, "-v")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    rows = _text_rows(lines)
    assert rows["runs"] == plan["runs"]
    assert (int(rows["MAX_JOBS"]), int(rows["NVCC_THREADS"])) == (plan["max_jobs"], plan["nvcc_threads"])
    assert rows["model"] == plan["model"]["described"]
    why = [line for line in lines if line.startswith(("why", "  - "))]
    parts = plan["why"]
    expected = []
    for number, part in enumerate(parts, 1):
        counted = f", {number} of {len(parts)}" if len(parts) > 1 else ""
        expected += [f"why{counted} ({part['label']}):", *(f"  - {reason}" for reason in part["reasons"])]
    assert why == expected and len(parts) == 2
    assert f"torch: {document['torch']['why']}" in lines and f"toolkit: {document['toolkit']['why']}" in lines
    assert f"C++ standard: {document['notes']['cxx_standard']}" in lines
    assert f"network while building: {document['network']}" in lines
    start = next(i for i, line in enumerate(lines) if line.startswith("options ("))
    shown = {line.split()[0]: line.split()[-1] for line in lines[start + 1 :]}
    assert (
        shown.pop("verbose") == "--verbose"
    )  # the one option the text's run was given and the JSON's was not
    assert shown == {o["key"]: o["from"] or "(default)" for o in document["options"] if o["key"] != "verbose"}
