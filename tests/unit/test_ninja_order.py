"""images/wheelbuild-ninja and the launcher before-build writes for it, run with the real ninja
(the build image's version, from the test extras): the build file's compiles start longest
predicted first, as builder.plan.memory_model.launch_order predicts them."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

from cibuildwheel.environment import parse_environment
from wheelbuild.attempt.config import AttemptConfig, cibuildwheel_env
from wheelbuild.image.inputs import IMAGES_DIR
from wheelbuild.plan.admission import with_admission
from wheelbuild.plan.memory_model import flash_attn_model, launch_order, ninja_order
from wheelbuild.plan.planner import GIB, ninja_order_file, plan_build
from wheelbuild.variants import parse_variant

from tests.scriptkit import script_module

SCRIPT = IMAGES_DIR / "wheelbuild-ninja"


def _shim() -> ModuleType:
    return script_module(SCRIPT)


def test_continued_lines_bindings_and_escaped_paths_move_whole() -> None:
    text = (
        "rule cc\n  command = cc $in\n"
        "build a.o: cc src/a$ b.cu\n"
        "build long.o: $\n    cc src/long.cu | dep.h\n  flags = -O3\n"
        "build c.o: cc src/c.cu"  # no newline at the end of the file
    )
    ordered = _shim().reorder(text, {"a b.cu": 1.0, "long.cu": 5.0, "c.cu": 3.0})
    assert ordered == (
        "rule cc\n  command = cc $in\n"
        "build long.o: $\n    cc src/long.cu | dep.h\n  flags = -O3\n"
        "build c.o: cc src/c.cu\n"
        "build a.o: cc src/a$ b.cu\n"
    )


def test_the_shims_order_is_the_order_the_planner_predicted_with() -> None:
    """The flash-attn model's 73 units in setup.py's order, each a build statement: reordered by
    the order file the build writes, they come out as launch_order() has them, at both threads."""
    model = flash_attn_model()
    text = "".join(f"build {i}.o: cuda_compile /project/{u.name}\n" for i, u in enumerate(model.units))
    shim = _shim()
    for threads in (1, 2):
        seconds = ninja_order(model.units, threads, 2)["seconds"]
        assert isinstance(seconds, dict)
        ordered = [line.rsplit("/", 1)[-1] for line in shim.reorder(text, seconds).splitlines()]
        expected = [model.units[i].name.rsplit("/", 1)[-1] for i in launch_order(model.units, threads, 2)]
        assert ordered == expected
        assert ordered != [u.name.rsplit("/", 1)[-1] for u in model.units]  # it did reorder


def test_every_attempt_carries_its_plans_order_into_the_container() -> None:
    plan = with_admission(plan_build(budget=64 * GIB, cpus=16, archs=2, model=flash_attn_model()))
    text = ninja_order_file(plan)
    assert text is not None
    assert json.loads(text) == ninja_order(plan.model.units, plan.nvcc_threads, 2)
    config = AttemptConfig(
        run_id="r",
        attempt=1,
        image="img",
        project_dir=Path("/p"),
        package=".",
        identifiers=("cp311-manylinux_x86_64",),
        memory=plan.memory,
        cpus=16,
        gpus=False,
        build_env={},
        cuda_home="/usr/local/cuda",
        torch=parse_variant("cu128"),
        output_dir=Path("/o"),
        log_path=Path("/o/log"),
        ninja_order=text,
        compiler_cache=False,  # its SCCACHE_BASEDIRS runs a script of the image when evaluated
    )
    env = cibuildwheel_env(config)
    # cibuildwheel's own parser, as it evaluates the setting in the container
    inside = parse_environment(env["CIBW_ENVIRONMENT_LINUX"]).as_dictionary({"PATH": "/usr/bin"})
    assert inside["WHEELBUILD_NINJA_ORDER"] == text
    assert "/wheelbuild-ninja:" in env["CIBW_CONTAINER_ENGINE"]  # the script is mounted
