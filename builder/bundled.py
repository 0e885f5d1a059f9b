"""Files wheelbuild ships beside its code: images/ (the build image's Dockerfile, its scripts and
the CUDA 12 pins) and the bundled example extension (tests/fixtures/wbdemo).

Each has one source in the repository. A checkout reads it where it lives; a built wheelbuild
carries a copy as package data (pyproject.toml maps images/ to wheelbuild/_images and the
example to wheelbuild/_example), so `pip install`, `uv tool install` and `pipx install` work from
any directory. Pure: no Docker.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
_CHECKOUT = _PACKAGE.parent

# name -> (where an installed wheelbuild keeps it, where a checkout keeps it)
_PLACES = {
    "images": (_PACKAGE / "_images", _CHECKOUT / "images"),
    "example": (_PACKAGE / "_example", _CHECKOUT / "tests" / "fixtures" / "wbdemo"),
}


def bundled_dir(name: str) -> Path:
    """The folder holding `name`: the installed copy when there is one, else the checkout's.

    A folder missing from both is reported where it is read (ImageInputs.collect says which
    file and what to do), so importing wheelbuild never fails on it."""
    installed, checkout = _PLACES[name]
    return installed if installed.is_dir() or not checkout.is_dir() else checkout
