"""The import gate's plan and verdicts on real shared objects compiled here with g++: which modules
and packages a wheel asks to be imported, which symbols the container must find, and what a
container's answer means (the typed error, the first undefined symbol demangled). The pure cases
are in tests/unit/test_gate.py; the container itself in tests/integration/test_gate.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from wheelbuild.errors import ImportGateFailed, SmokeTestFailed
from wheelbuild.wheel.abi import check_wheel_abi
from wheelbuild.wheel.gate import failure, gate_checks, read_result

from tests.indexkit import make_wheel

TAG = "cp311-cp311-manylinux_2_34_x86_64"


def _so(tmp_path: Path, source: str) -> bytes:
    (tmp_path / "m.cpp").write_text(source)
    subprocess.run(
        ["g++", "-shared", "-fPIC", "-o", str(tmp_path / "m.so"), str(tmp_path / "m.cpp")], check=True
    )
    return (tmp_path / "m.so").read_bytes()


@pytest.fixture
def wheel(tmp_path: Path) -> Path:
    so = _so(
        tmp_path, 'namespace wb { int missing(int); }\nextern "C" int use(int x) { return wb::missing(x); }\n'
    )
    return make_wheel(
        tmp_path / "w", "demo", "0.1.0+cu130torch2.11", tag=TAG,
        extra_files={
            "demo/_C.cpython-311-x86_64-linux-gnu.so": so,
            "demo/sub/__init__.py": b"",
            "flat_ext.cpython-311-x86_64-linux-gnu.so": so,
            "demo.libs/libvendored-1a2b3c.so.1": so,
            "other/__init__.py": b"",
        },
    )  # fmt: skip


def test_plan_asks_for_every_extension_module_and_top_level_package(wheel: Path) -> None:
    plan = gate_checks(wheel, check_wheel_abi(wheel), (100, 120), "wbdemo.py")
    assert plan.python == "cp311"
    assert plan.modules == ("demo._C", "flat_ext")  # not the vendored library
    assert "demo" in plan.packages and "other" in plan.packages and "demo.sub" not in plan.packages
    # The symbol nothing in the wheel defines is asked of torch, Python and the system.
    assert "_ZN2wb7missingEi" in plan.undefined["demo/_C.cpython-311-x86_64-linux-gnu.so"]
    assert plan.to_json("torch==2.11.0")["torch_requirement"] == "torch==2.11.0"


def test_a_recipe_may_name_its_packages(wheel: Path) -> None:
    assert gate_checks(wheel, check_wheel_abi(wheel), (100,), None, ("demo",)).packages == ("demo",)


def test_an_undefined_symbol_at_import_is_refused_naming_it_demangled(wheel: Path) -> None:
    answer = {
        "python": "cp311",
        "install_error": None,
        "torch": {"version": "2.11.0+cu130", "cuda": "13.0"},
        "imports": [
            {"module": "demo._C", "ok": False,
             "error": "ImportError: /x/demo/_C.cpython-311-x86_64-linux-gnu.so: undefined symbol: _ZN2wb7missingEi"},
            {"module": "demo", "ok": True, "error": ""},
        ],
        "unresolved": {"demo/_C.cpython-311-x86_64-linux-gnu.so": {"load_error": "", "symbols": ["_ZN2wb7missingEi"]}},
        "smoke": None,
    }  # fmt: skip
    result = read_result(wheel.name, answer, check_wheel_abi(wheel))
    assert not result.passed
    error = failure(result)
    assert isinstance(error, ImportGateFailed) and error.exit_code == 48
    assert "import demo._C fails with undefined symbol wb::missing(int) (_ZN2wb7missingEi)" in error.cause
    unresolved = result.to_json()["unresolved"]
    assert isinstance(unresolved, dict)
    assert unresolved["demo/_C.cpython-311-x86_64-linux-gnu.so"] == [
        {"symbol": "_ZN2wb7missingEi", "demangled": "wb::missing(int)"}
    ]


def test_symbols_nothing_provides_fail_the_gate_even_when_the_import_worked(wheel: Path) -> None:
    answer = {
        "imports": [{"module": "demo._C", "ok": True, "error": ""}],
        "torch": {"version": "2.11.0", "cuda": "13.0"},
        "unresolved": {"demo/_C.so": {"load_error": "", "symbols": ["_ZN2wb7missingEi"]}},
    }
    error = failure(read_result(wheel.name, answer, check_wheel_abi(wheel)))
    assert isinstance(error, ImportGateFailed) and "symbols nothing provides: wb::missing(int)" in error.cause


def test_an_install_failure_and_a_failed_smoke_test_are_their_own_errors(wheel: Path) -> None:
    abi = check_wheel_abi(wheel)
    install = failure(read_result(wheel.name, {"install_error": "pip: no matching torch\nERROR: x"}, abi))
    assert isinstance(install, ImportGateFailed) and "could not be installed" in install.cause
    smoke = {"status": "failed", "reason": "bf16 causal=True off on sm_100"}
    ok_imports = [{"module": "demo._C", "ok": True, "error": ""}]
    error = failure(read_result(wheel.name, {"imports": ok_imports, "smoke": smoke}, abi))
    assert isinstance(error, SmokeTestFailed) and error.exit_code == 49 and "bf16" in error.cause


def test_a_passing_answer_passes_and_a_skipped_smoke_test_is_not_a_failure(wheel: Path) -> None:
    answer = {
        "imports": [{"module": "demo._C", "ok": True, "error": ""}],
        "torch": {"version": "2.11.0", "cuda": "13.0"},
        "smoke": {"status": "skipped", "reason": "no GPU"},
    }
    result = read_result(wheel.name, answer, check_wheel_abi(wheel))
    assert result.passed and failure(result) is None
    assert "GPU smoke test skipped: no GPU" in result.summary


def test_an_answer_with_no_import_at_all_does_not_pass(wheel: Path) -> None:
    assert not read_result(wheel.name, {"imports": []}, check_wheel_abi(wheel)).passed
