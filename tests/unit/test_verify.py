"""A wheel's statement from its run folder to the tree and back, through the real CLI: `publish
--sign-key` signs it into files/<wheel>.intoto.jsonl, `serve` serves it beside the wheel and the
project pages link it, and `wheelbuild verify`, with no network at all (its own network
namespace), passes the published wheel and refuses, each with its own exit code, a wheel with one
byte changed (73), a statement signed by another key (72), a statement of another wheel (74),
inputs other than this checkout's (75), no statement (71) and a key it cannot use (76).
`publish --require-signed` refuses an unsigned statement and a missing one."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from wheelbuild.errors import StatementUnusable
from wheelbuild.pipeline.verify import local_materials
from wheelbuild.provenance.statement import Material, Statement

from tests.provenancekit import PUBLISH_CHECKS, cuda_wheel, run_folder, ssh_key

Run = Callable[..., subprocess.CompletedProcess[str]]


def test_require_signed_refuses_an_unsigned_statement_and_a_missing_one(tmp_path: Path, run_cli: Run) -> None:
    wheel = run_folder(tmp_path)
    key = ssh_key(tmp_path / "keys", "id_ed25519")
    tree = tmp_path / "tree"
    unsigned = run_cli(
        "publish", str(wheel), *PUBLISH_CHECKS, "--to", str(tree), "--require-signed", "--key", f"{key}.pub"
    )
    assert unsigned.returncode == 72, unsigned.stderr
    assert not tree.exists()  # refused before anything was published
    alone = cuda_wheel(tmp_path / "alone", "wbalone")
    missing = run_cli(
        "publish", str(alone), *PUBLISH_CHECKS, "--to", str(tree), "--require-signed", "--sign-key", str(key)
    )
    assert missing.returncode == 71 and "no provenance statement" in missing.stderr
    signed = run_cli(
        "publish", str(wheel), *PUBLISH_CHECKS, "--to", str(tree), "--require-signed", "--sign-key", str(key)
    )
    assert signed.returncode == 0, signed.stderr
    assert (tree / "files" / f"{wheel.name}.intoto.jsonl").is_file()


def test_publish_refuses_a_statement_that_is_not_the_wheels_and_publishes_nothing(
    tmp_path: Path, run_cli: Run
) -> None:
    wheel = run_folder(tmp_path)
    changed = cuda_wheel(tmp_path / "changed", payload="other bytes")  # the same name, other bytes
    shutil.copy(wheel.with_name(wheel.name + ".intoto.json"), changed.parent)
    done = run_cli("publish", str(changed), *PUBLISH_CHECKS, "--to", str(tmp_path / "tree"))
    assert done.returncode == 73, done.stderr
    assert not list((tmp_path / "tree").glob("files/*.whl"))


def test_a_rebuild_is_built_from_the_statements_own_arguments_and_a_difference_is_located(
    tmp_path: Path,
) -> None:
    """verify --rebuild's spec is `build`'s arguments read back (the compiler cache off, a new
    build forced), and a rebuilt wheel with other bytes is exit 70 naming the member that differs.
    The build itself stands in here (tests/integration/test_provenance.py runs the real one)."""
    from wheelbuild.errors import WheelsDiffer
    from wheelbuild.image.options import ImageOptions
    from wheelbuild.pipeline.verify import rebuild, verify_wheel
    from wheelbuild.recipes import LocalProject

    wheel = run_folder(tmp_path)
    verdict = verify_wheel(wheel)
    asked = []

    def build(spec, options):  # what run_build would make: a wheel of the same name, other bytes
        asked.append((spec, options))
        return [cuda_wheel(tmp_path / "rebuilt", payload="a byte of difference")]

    with pytest.raises(WheelsDiffer) as differs:
        rebuild(verdict, ImageOptions(base_image=None, ca_bundle=None), tmp_path / "out", None, build)
    assert differs.value.exit_code == 70
    assert "wbtiny/__init__.py" in differs.value.cause  # the first member that differs
    ((spec, options),) = asked
    assert spec.recipe.source == LocalProject(tmp_path / "src-wbtiny")
    assert (str(spec.variant), spec.archs, spec.pythons) == ("2.11.0+cu130", (120,), ("cp311",))
    assert spec.rebuild and not spec.compiler_cache and not spec.gate
    assert options.base_image == "wheelbuild-base:test"  # the statement's base image

    same = rebuild(verdict, ImageOptions(None, None), tmp_path / "out", None, lambda _s, _o: [wheel])
    assert same == wheel


@pytest.mark.parametrize(
    ("field", "value", "code"),
    [("pin", "sideways", 71), ("archs", ["120; rm -rf /"], 71), ("pythons", ["cp311 && true"], 36)],
)
def test_a_rebuild_refuses_parameters_no_build_would_be_given(
    tmp_path: Path, field: str, value: object, code: int
) -> None:
    """A statement is read as hostile: a parameter `build` would refuse is refused before any
    build, with one line and its own exit code (the statement's own, or a bad argument's)."""
    from wheelbuild.errors import WheelbuildError
    from wheelbuild.pipeline.verify import rebuild_spec, verify_wheel

    found = verify_wheel(run_folder(tmp_path)).statement_of
    external = {**found.external, field: value}
    with pytest.raises(WheelbuildError) as refused:
        rebuild_spec(replace(found, external=external), tmp_path / "out", None, {})
    assert refused.value.exit_code == code


def _hostile(source: Material) -> Statement:
    return Statement(subjects=(), external={}, internal={}, materials=(source,), builder_version={}, raw=b"")


@pytest.mark.parametrize("target", ["/dev/zero", "fifo"])
def test_a_statement_naming_a_device_or_a_fifo_as_its_source_is_refused_not_read(
    tmp_path: Path, target: str
) -> None:
    """An unsigned statement from anywhere: its source URI file:///dev/zero used to be read until
    MemoryError, a FIFO to hang."""
    if target == "fifo":
        os.mkfifo(tmp_path / "fifo")
        target = str(tmp_path / "fifo")
    statement = _hostile(Material("source", {"sha256": "0" * 64}, f"file://{target}"))
    with pytest.raises(StatementUnusable, match="is not a regular file"):
        local_materials(statement, None)


def test_a_statements_source_hash_that_is_a_path_never_leaves_the_sdist_cache(
    tmp_path: Path, own_cache_dir: Path
) -> None:
    outside = own_cache_dir / ("a" * 61)  # beside sdists/, out of it
    outside.mkdir(parents=True)
    (outside / "evil.tar.gz").write_bytes(b"not the sdist")
    statement = _hostile(Material("source", {"sha256": "../" + "a" * 61}))  # 64 characters, not hex
    assert "source" not in local_materials(statement, None)
