"""The CA bundle a build's containers trust: the one given, else this machine's."""

from __future__ import annotations

from pathlib import Path

from ..errors import CaBundleMissing

DEFAULT_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


def resolve_ca_bundle(given: Path | None) -> Path | None:
    """The CA bundle given, else the host's bundle when it exists, else None (the base's own)."""
    if given is not None:
        if not given.is_file():
            raise CaBundleMissing(
                f"CA bundle {given} does not exist",
                "pass the path of a PEM bundle with --ca-bundle, or leave it out to use the host's",
            )
        return given
    return DEFAULT_CA_BUNDLE if DEFAULT_CA_BUNDLE.is_file() else None
