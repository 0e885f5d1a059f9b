"""Fixtures the suites share by name (each suite's own conftest holds its own)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

# A shell without job control starts a background command with SIGINT ignored, and every child
# inherits that: the tests that stop a wheelbuild with SIGINT (a user's Ctrl-C) would wait out
# their timeouts. Python's own handler here is reset to the default in each exec'd child.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The default cache dir (WHEELBUILD_CACHE_DIR), one per test; no proxy for 127.0.0.1."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("WHEELBUILD_CACHE_DIR", str(cache))
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    return cache
