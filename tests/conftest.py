"""Fixtures the suites share by name (each suite's own conftest holds its own)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The default cache dir (WHEELBUILD_CACHE_DIR), one per test; no proxy for 127.0.0.1."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("WHEELBUILD_CACHE_DIR", str(cache))
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    return cache
