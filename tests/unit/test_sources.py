"""wheelbuild.spec.sources.prepare_source on local paths and a pre-filled cache (no network)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from wheelbuild.errors import SourceUnavailable
from wheelbuild.recipes import LocalProject, LocalSdist, RemoteSdist
from wheelbuild.spec.sources import PreparedSource, cache_dir, prepare_source

SDIST_BYTES = b"\x1f\x8b pretend sdist bytes"
SDIST_SHA = hashlib.sha256(SDIST_BYTES).hexdigest()


def _no_lines(line: str) -> None:
    raise AssertionError(f"nothing should be downloaded, got {line!r}")


def test_dir_with_setup_py_is_built_in_place(tmp_path: Path) -> None:
    (tmp_path / "setup.py").write_text("")
    assert prepare_source(LocalProject(tmp_path), _no_lines) == PreparedSource(
        project_dir=tmp_path, package="."
    )


def test_dir_with_only_pyproject_is_built_in_place(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("")
    assert prepare_source(LocalProject(tmp_path), _no_lines).package == "."


def test_dir_without_setup_py_or_pyproject_is_source_unavailable(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("")
    with pytest.raises(SourceUnavailable) as caught:
        prepare_source(LocalProject(tmp_path), _no_lines)
    assert caught.value.exit_code == 15
    assert caught.value.cause == f"{tmp_path} has neither setup.py nor pyproject.toml"


def test_missing_local_path_is_source_unavailable(tmp_path: Path) -> None:
    with pytest.raises(SourceUnavailable) as caught:
        prepare_source(LocalSdist(tmp_path / "gone.tar.gz"), _no_lines)
    assert caught.value.cause == f"source {tmp_path / 'gone.tar.gz'} does not exist"


def test_local_sdist_with_matching_sha256_is_built_from_its_directory(tmp_path: Path) -> None:
    sdist = tmp_path / "myext-1.0.tar.gz"
    sdist.write_bytes(SDIST_BYTES)
    prepared = prepare_source(LocalSdist(sdist, sha256=SDIST_SHA), _no_lines)
    assert prepared == PreparedSource(project_dir=tmp_path, package="myext-1.0.tar.gz")


def test_local_sdist_without_pin_is_not_verified(tmp_path: Path) -> None:
    sdist = tmp_path / "myext-1.0.tar.gz"
    sdist.write_bytes(SDIST_BYTES)
    assert prepare_source(LocalSdist(sdist), _no_lines).package == "myext-1.0.tar.gz"


def test_local_sdist_with_wrong_sha256_is_source_unavailable(tmp_path: Path) -> None:
    sdist = tmp_path / "myext-1.0.tar.gz"
    sdist.write_bytes(SDIST_BYTES)
    wrong = "0" * 64
    with pytest.raises(SourceUnavailable) as caught:
        prepare_source(LocalSdist(sdist, sha256=wrong), _no_lines)
    assert caught.value.exit_code == 15
    assert caught.value.cause == f"myext-1.0.tar.gz has sha256 {SDIST_SHA}, but the pin says {wrong}"
    assert sdist.read_bytes() == SDIST_BYTES  # a user's own file is never deleted


def test_cache_dir_follows_wheelbuild_cache_dir_then_xdg(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("WHEELBUILD_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "wheelbuild"
    monkeypatch.setenv("WHEELBUILD_CACHE_DIR", str(tmp_path / "wb"))
    assert cache_dir() == tmp_path / "wb"


def test_url_sdist_already_in_the_cache_is_used_without_download(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WHEELBUILD_CACHE_DIR", str(tmp_path))
    cached = tmp_path / "sdists" / SDIST_SHA / "myext-1.0.tar.gz"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(SDIST_BYTES)
    source = RemoteSdist(url="https://files.example.invalid/myext-1.0.tar.gz", sha256=SDIST_SHA)
    said: list[str] = []
    assert prepare_source(source, said.append) == PreparedSource(
        project_dir=cached.parent, package="myext-1.0.tar.gz"
    )
    # Nothing downloaded; the cached file is checked against its pin again, and that is said.
    assert said == [f"source myext-1.0.tar.gz, sha256 {SDIST_SHA[:16]}... verified"]


def test_url_sdist_in_the_cache_with_wrong_bytes_is_rejected_and_evicted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WHEELBUILD_CACHE_DIR", str(tmp_path))
    pin = "1" * 64
    cached = tmp_path / "sdists" / pin / "myext-1.0.tar.gz"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(SDIST_BYTES)
    source = RemoteSdist(url="https://files.example.invalid/myext-1.0.tar.gz", sha256=pin)
    with pytest.raises(SourceUnavailable):
        prepare_source(source, _no_lines)
    assert not cached.exists()


# ---------------------------------------------------------------------------------------------
# Credentials in index and sdist URLs: sent as a header, never shown


def test_a_urls_credentials_become_an_authorization_header_for_urllib() -> None:
    from wheelbuild.index.reader import authorized_request as _request

    request = _request("https://ci:pa@ss/w0rd@idx.example/simple/x/", {"Accept": "application/json"})
    assert request.full_url == "https://idx.example/simple/x/"
    assert (
        request.get_header("Authorization")
        == "Basic " + __import__("base64").b64encode(b"ci:pa@ss/w0rd").decode()
    )
    assert request.get_header("Accept") == "application/json"


def test_lookup_and_download_errors_never_show_the_credentials(tmp_path: Path) -> None:
    from wheelbuild.errors import SourceUnavailable
    from wheelbuild.spec.sources import _download, _files

    lines: list[str] = []
    with pytest.raises(SourceUnavailable) as looked:
        _files("http://ci:hunter2-secret@127.0.0.1:9/simple?token=tok-secret", "flash-attn")
    with pytest.raises(SourceUnavailable) as downloaded:
        _download(
            "http://ci:hunter2-secret@127.0.0.1:9/x.tar.gz?sig=tok-secret",
            tmp_path / "x.tar.gz",
            lines.append,
        )
    for text in (looked.value.cause, looked.value.remedy, downloaded.value.cause, *lines):
        assert "hunter2-secret" not in text and "tok-secret" not in text, text
    assert "http://***@127.0.0.1:9/x.tar.gz?sig=***" in downloaded.value.cause
