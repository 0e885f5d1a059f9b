"""The one resolution of a build request (pipeline/resolve.py): made once, frozen, and read by the
steps after it. The engine is a fake (no Docker here) that notes every call, so the test sees
which steps asked it for an image; the source is the bundled example and torch's index is
answered without a network (tests/flowkit.py's flow fixture)."""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from pathlib import Path

import pytest
from wheelbuild.image.inputs import Image, ImageInputs
from wheelbuild.image.options import ImageOptions
from wheelbuild.nightly.cell_specs import cell_inputs_key, cell_spec
from wheelbuild.nightly.matrix import Cell
from wheelbuild.pipeline.resolve import plan_of, resolve
from wheelbuild.recipes import resolve_recipe
from wheelbuild.spec.build_spec import BuildSpec

from tests.flowkit import FakeEngine, quiet_console


class NotingEngine(FakeEngine):
    """The flow's fake engine, noting which image calls a resolution made."""

    def __init__(self, pythons: list[str]) -> None:
        super().__init__()
        self.pythons = pythons
        self.calls: list[str] = []

    def local_image_id(self, reference: str) -> str:
        self.calls.append(f"local_image_id {reference}")
        return super().local_image_id(reference)

    def ensure_image(self, inputs: ImageInputs, on_line: object) -> Image:
        self.calls.append("ensure_image")
        return Image(tag=inputs.tag, id="sha256:built", labels={}, reused=True)

    def image_pythons(self, tag: str) -> list[str]:
        self.calls.append("image_pythons")
        return self.pythons


def test_a_dry_run_resolves_everything_but_the_image_and_asks_docker_nothing(
    flow: tuple[BuildSpec, ImageOptions, list[Path]],
) -> None:
    spec, options, _ = flow
    engine = NotingEngine(["cp311"])
    resolved = resolve(replace(spec, pythons=()), options, quiet_console()[0], engine, dry_run=True)
    assert engine.calls == []
    assert resolved.spec.variant.torch_version == "2.11.0"
    assert "2.11.0" in resolved.torch_why
    assert resolved.stage is None and resolved.archs == (100, 120) and resolved.network == "off"
    with pytest.raises(TypeError, match="dry run"):
        _ = resolved.pythons
    assert plan_of(resolved).max_jobs == 2  # the plan is made from the dry run as from a build


def test_a_build_resolves_the_pythons_from_the_images_interpreters_once_into_a_frozen_value(
    flow: tuple[BuildSpec, ImageOptions, list[Path]],
) -> None:
    spec, options, _ = flow
    engine = NotingEngine(["cp311", "cp312", "cp313"])  # torch 2.11.0 has wheels for cp311, cp312
    resolved = resolve(
        replace(spec, pythons=()), options, quiet_console()[0], engine,
        before_image=lambda checked: engine.calls.append(f"before the image: gpus {checked.gpus.value}"),
    )  # fmt: skip
    assert engine.calls == [
        "before the image: gpus none",  # build's own Docker questions (--gpus all fails here)
        "local_image_id wheelbuild-base:fake",
        "ensure_image",
        "image_pythons",
    ]
    assert resolved.pythons == ("cp311", "cp312")
    assert resolved.image.tag == resolved.inputs.tag
    assert len(resolved.key) == 64 and resolved.key != resolve(spec, options, quiet_console()[0], engine).key
    with pytest.raises(dataclasses.FrozenInstanceError):
        resolved.torch_why = "changed"  # type: ignore[misc]


WBCONTRACT = Path(__file__).resolve().parents[1] / "fixtures" / "wbcontract"


def test_a_nightly_cells_inputs_key_is_the_key_its_build_will_have(
    flow: tuple[BuildSpec, ImageOptions, list[Path]],
) -> None:
    """wbcontract's setup.py calls for a switch (WBCONTRACT_FORCE_BUILD=TRUE) that the build sets
    from its survey: the night's key must count it, or a published wheel is never recognised."""
    _, options, _ = flow
    cell = Cell(package=str(WBCONTRACT), version=None, torch="2.11.0+cu130", python="cp311", archs="120")
    night_key = cell_inputs_key(cell, options, None, NotingEngine(["cp311"]), quiet_console()[0])
    built = resolve(cell_spec(cell, None), options, quiet_console()[0], NotingEngine(["cp311"]))
    assert "WBCONTRACT_FORCE_BUILD" in built.spec.recipe.extra_env
    assert night_key == built.key


def test_the_plan_says_when_the_packages_cxx_standard_will_be_raised(
    flow: tuple[BuildSpec, ImageOptions, list[Path]], tmp_path: Path
) -> None:
    spec, options, _ = flow
    project = tmp_path / "cxx17"
    project.mkdir()
    (project / "k.cu").write_text("")  # the source its setup.py names
    (project / "setup.py").write_text(
        "from setuptools import setup\nfrom torch.utils.cpp_extension import CUDAExtension\n"
        'setup(ext_modules=[CUDAExtension("k", ["k.cu"], extra_compile_args={"nvcc": ["-std=c++17"]})])\n'
    )
    request = replace(spec, recipe=resolve_recipe(str(project)))
    resolved = resolve(request, options, quiet_console()[0], NotingEngine(["cp311"]), dry_run=True)
    assert resolved.std_note == (
        "the package's build files give -std=c++17: raised where torch 2.11.0's headers require a newer "
        "standard (read from its ATen.h in the build; --keep-package-std keeps it)"
    )
    kept = resolve(
        replace(request, keep_package_std=True), options, quiet_console()[0], NotingEngine([]), dry_run=True
    )
    assert kept.std_note == "the package's build files give -std=c++17: kept as they say (--keep-package-std)"
    (project / "setup.py").write_text("from setuptools import setup\nsetup()\n")  # gives no -std
    assert resolve(request, options, quiet_console()[0], NotingEngine([]), dry_run=True).std_note is None
