"""The record of which torch the machine's wheel cache holds (spec/held_torch.py): written from a
build's lock lines, read by variant, forgotten by gc's prune, and harmless when garbled."""

from __future__ import annotations

from pathlib import Path

from wheelbuild.spec import held_torch
from wheelbuild.variants import parse_variant

INDEX = "https://pypi.org/simple"
SHA = "a" * 64


def _locks(variant_text: str, *tags: str, index: str = INDEX) -> list[tuple[str, str, str]]:
    variant = parse_variant(variant_text, index)
    lines = []
    for tag in tags:
        lock = f"{variant.cache_key}-{tag}"
        lines.append(
            (lock, SHA, f"torch-{variant.torch_version}+cu130-{tag}-{tag}-manylinux_2_28_x86_64.whl")
        )
        lines.append((lock, "b" * 64, "nvidia_cublas-13.0.0.19-py3-none-manylinux_2_27_x86_64.whl"))
    return lines


def test_a_build_records_each_python_whose_torch_it_locked(tmp_path: Path) -> None:
    variant = parse_variant("2.13.0+cu130", INDEX)
    locks = [
        *_locks("2.13.0+cu130", "cp311"),
        ("0123456789abcdef-cp311", SHA, "setuptools-80.0.0-py3-none-any.whl"),
    ]
    assert held_torch.record(tmp_path, variant, locks, "run-1") == ("cp311",)
    assert held_torch.held(tmp_path, variant) == (held_torch.HeldTorch("cp311", "run-1", locks[0][2]),)
    # A later build adds its Python; the first stays.
    assert held_torch.record(tmp_path, variant, _locks("2.13.0+cu130", "cp313"), "run-2") == ("cp313",)
    assert [h.python for h in held_torch.held(tmp_path, variant)] == ["cp311", "cp313"]


def test_another_release_or_index_holds_nothing_of_the_first(tmp_path: Path) -> None:
    held_torch.record(tmp_path, parse_variant("2.13.0+cu130", INDEX), _locks("2.13.0+cu130", "cp311"), "r")
    assert held_torch.held(tmp_path, parse_variant("2.14.1+cu130", INDEX)) == ()
    assert held_torch.held(tmp_path, parse_variant("2.13.0+cu130", "https://example.org/simple")) == ()
    # A bare tag names no release.
    assert held_torch.held(tmp_path, parse_variant("cu130", INDEX)) == ()
    # What the same tag and index hold, for a remedy to name.
    assert held_torch.releases_held(tmp_path, parse_variant("2.14.1+cu130", INDEX)) == ("2.13.0",)
    assert (
        held_torch.releases_held(tmp_path, parse_variant("2.13.0+cu130", "https://example.org/simple")) == ()
    )


def test_a_lock_of_another_variant_or_no_torch_wheel_is_not_recorded(tmp_path: Path) -> None:
    variant = parse_variant("2.14.1+cu130", INDEX)
    assert held_torch.record(tmp_path, variant, _locks("2.13.0+cu130", "cp311"), "r") == ()
    only_tools = [(f"{variant.cache_key}-cp311", SHA, "ninja-1.13.0-py3-none-manylinux_2_12_x86_64.whl")]
    assert held_torch.record(tmp_path, variant, only_tools, "r") == ()
    assert not (tmp_path / held_torch.FOLDER).exists()


def test_gc_forgets_the_pythons_whose_locks_it_pruned(tmp_path: Path) -> None:
    variant = parse_variant("2.13.0+cu130", INDEX)
    held_torch.record(tmp_path, variant, _locks("2.13.0+cu130", "cp311", "cp313"), "r")
    held_torch.forget(tmp_path, [f"{variant.cache_key}-cp311", "not a lock", "0123456789abcdef-cp312"])
    assert [h.python for h in held_torch.held(tmp_path, variant)] == ["cp313"]
    held_torch.forget(tmp_path, [f"{variant.cache_key}-cp313"])
    assert held_torch.held(tmp_path, variant) == ()
    assert list((tmp_path / held_torch.FOLDER).glob("*")) == []


def test_a_garbled_or_huge_record_holds_nothing(tmp_path: Path) -> None:
    variant = parse_variant("2.13.0+cu130", INDEX)
    folder = tmp_path / held_torch.FOLDER
    folder.mkdir()
    path = folder / f"{variant.cache_key}.json"
    for garbage in (b"{not json", b'{"pythons": ["cp311"]}', b"[]", b" " * (2 << 20)):
        path.write_bytes(garbage)
        assert held_torch.held(tmp_path, variant) == ()
        assert held_torch.releases_held(tmp_path, variant) == ()
    # A build's record replaces it.
    held_torch.record(tmp_path, variant, _locks("2.13.0+cu130", "cp311"), "r")
    assert [h.python for h in held_torch.held(tmp_path, variant)] == ["cp311"]
