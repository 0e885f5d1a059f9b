"""wheelbuild.spec.build_spec: memory sizes, arch lists, Python versions and the CA bundle."""

from __future__ import annotations

from pathlib import Path

import pytest
from wheelbuild.errors import BadArgument, BadMemory, CaBundleMissing
from wheelbuild.host import ca_bundle
from wheelbuild.host.ca_bundle import resolve_ca_bundle
from wheelbuild.spec.build_spec import format_archs, parse_archs, parse_ptx, parse_python
from wheelbuild.units import format_bytes, parse_memory

GIB = 1024**3
MIB = 1024**2


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("6g", 6 * GIB),
        ("6G", 6 * GIB),
        ("6GiB", 6 * GIB),
        ("6gib", 6 * GIB),
        ("6gb", 6 * GIB),
        (" 6g ", 6 * GIB),
        ("512m", 512 * MIB),
        ("512M", 512 * MIB),
        ("256m", 256 * MIB),
        ("1.5g", 1610612736),
        ("0.5g", 512 * MIB),
        ("1t", 1024**4),
        ("1048576k", GIB),
        ("1073741824", GIB),
    ],
)
def test_parse_memory_reads_docker_binary_units(text: str, expected: int) -> None:
    assert parse_memory(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1073741825", 1073741824),  # one byte over a page boundary
        ("1073745919", 1073741824),  # one byte short of the next page
        ("1073745920", 1073745920),  # exactly the next page
        ("0.3g", 322121728),  # 322122547.2 bytes, rounded down to pages
    ],
)
def test_parse_memory_rounds_down_to_whole_pages_like_the_kernel(text: str, expected: int) -> None:
    assert parse_memory(text) == expected
    assert expected % 4096 == 0


@pytest.mark.parametrize("text", ["6x", "-1g", "abc", "", "   ", "g", "6 gigs", "1e9", "6g6"])
def test_parse_memory_rejects_what_docker_would_not_read(text: str) -> None:
    with pytest.raises(BadMemory) as caught:
        parse_memory(text)
    assert caught.value.exit_code == 12
    assert caught.value.cause == f"memory size {text!r} is not understood"


@pytest.mark.parametrize("text", ["100m", "255m", "268435455", "0", "0g"])
def test_parse_memory_rejects_sizes_below_256_mib(text: str) -> None:
    with pytest.raises(BadMemory) as caught:
        parse_memory(text)
    assert caught.value.exit_code == 12
    bare = " (a number without a unit is bytes)" if text.isdigit() else ""
    assert caught.value.cause == f"memory size {text!r} is below the 256 MiB a build container needs{bare}"


@pytest.mark.parametrize(
    ("size", "expected"),
    [
        (6 * GIB, "6.0 GiB"),
        (1536 * MIB, "1.5 GiB"),
        (512 * MIB, "512.0 MiB"),
        (2048, "2.0 KiB"),
        (10, "10 B"),
    ],
)
def test_format_bytes_picks_the_largest_binary_unit(size: int, expected: str) -> None:
    assert format_bytes(size) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("100,120", (100, 120)),
        ("100;120", (100, 120)),
        ("sm_100, sm_120", (100, 120)),
        ("SM_100;sm120", (100, 120)),
        ("120 100", (100, 120)),
        ("120,100,120,100", (100, 120)),
        ("90", (90,)),
    ],
)
def test_parse_archs_accepts_separators_prefixes_and_duplicates_and_sorts(
    text: str, expected: tuple[int, ...]
) -> None:
    assert parse_archs(text) == expected


@pytest.mark.parametrize("text", [",100", "100,", "100,,120", ",", "100;"])
def test_parse_archs_refuses_an_empty_entry(text: str) -> None:
    """A list cut short or an unset variable (--archs "$A,100") is a mistake, never a smaller list."""
    with pytest.raises(BadArgument) as caught:
        parse_archs(text)
    assert caught.value.cause == f"CUDA arch list {text!r} has an empty entry"


@pytest.mark.parametrize("text", ["", "abc", "100,abc", "sm_", "30", "1000", "compute_100", "sm_90a", "-100"])
def test_parse_archs_rejects_anything_but_sm_numbers(text: str) -> None:
    with pytest.raises(BadArgument) as caught:
        parse_archs(text)
    assert caught.value.exit_code == 38
    assert caught.value.cause == f"CUDA arch list {text!r} is not understood"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("3.11", "cp311"),
        ("cp311", "cp311"),
        ("3.9", "cp39"),
        ("3.13", "cp313"),
        ("311", "cp311"),
        (" 3.12 ", "cp312"),
    ],
)
def test_parse_python_gives_cibuildwheel_tags(text: str, expected: str) -> None:
    assert parse_python(text) == expected


@pytest.mark.parametrize("text", ["2.7", "python3.11", "3.", "", "cp2", "3.111", "3.11.4", "pp311"])
def test_parse_python_rejects_other_spellings(text: str) -> None:
    with pytest.raises(BadArgument) as caught:
        parse_python(text)
    assert caught.value.exit_code == 36


def test_missing_ca_bundle_raises_ca_bundle_missing(tmp_path: Path) -> None:
    missing = tmp_path / "nope.crt"
    with pytest.raises(CaBundleMissing) as caught:
        resolve_ca_bundle(missing)
    assert caught.value.exit_code == 14
    assert caught.value.cause == f"CA bundle {missing} does not exist"


def test_a_directory_is_not_a_ca_bundle(tmp_path: Path) -> None:
    with pytest.raises(CaBundleMissing):
        resolve_ca_bundle(tmp_path)


def test_given_ca_bundle_that_exists_is_returned_as_is(tmp_path: Path) -> None:
    bundle = tmp_path / "corp.crt"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    assert resolve_ca_bundle(bundle) == bundle


def test_no_ca_bundle_given_uses_the_host_default_when_it_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = tmp_path / "ca-certificates.crt"
    host.write_text("-----BEGIN CERTIFICATE-----\n")
    monkeypatch.setattr(ca_bundle, "DEFAULT_CA_BUNDLE", host)
    assert resolve_ca_bundle(None) == host


def test_no_ca_bundle_given_and_no_host_default_gives_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ca_bundle, "DEFAULT_CA_BUNDLE", tmp_path / "absent.crt")
    assert resolve_ca_bundle(None) is None


def test_host_default_ca_bundle_is_the_debian_path() -> None:
    assert Path("/etc/ssl/certs/ca-certificates.crt") == ca_bundle.DEFAULT_CA_BUNDLE


@pytest.mark.parametrize(
    ("text", "sass", "ptx"),
    [("100,120+PTX", (100, 120), (120,)), ("sm_120+ptx", (120,), (120,)), ("100;120", (100, 120), ())],
)
def test_a_plus_ptx_arch_asks_for_its_ptx_besides_its_sass(
    text: str, sass: tuple[int, ...], ptx: tuple[int, ...]
) -> None:
    assert (parse_archs(text), parse_ptx(text)) == (sass, ptx)
    again = format_archs(sass, ptx)
    assert (parse_archs(again), parse_ptx(again)) == (sass, ptx)


@pytest.mark.parametrize("text", ["+PTX", "120+", "120+SASS", "compute_120+PTX"])
def test_a_plus_ptx_form_is_refused_where_it_names_no_sm_number(text: str) -> None:
    with pytest.raises(BadArgument):
        parse_archs(text)


@pytest.mark.parametrize("text", ["100,,120", "100;;120", "100 ,, 120", "100,;120", ",,"])
def test_an_empty_entry_in_an_arch_list_is_refused(text: str) -> None:
    with pytest.raises(BadArgument, match="has an empty entry") as caught:
        parse_archs(text)
    assert (caught.value.exit_code, caught.value.cause) == (38, f"CUDA arch list {text!r} has an empty entry")
    assert "single commas" in caught.value.remedy


@pytest.mark.parametrize(("text", "plain"), [("90a", "90"), ("sm_100a", "100"), ("100,120f", "120")])
def test_an_arch_specific_variant_is_refused_with_the_plain_arch_to_ask_for(text: str, plain: str) -> None:
    """--archs takes SM numbers; wheelbuild-nvcc keeps a package's own compute_90a for sm_90."""
    with pytest.raises(BadArgument) as caught:
        parse_archs(text)
    assert caught.value.remedy.startswith(f"ask for {plain}: ")
    assert "wheelbuild-nvcc keeps that variant" in caught.value.remedy
