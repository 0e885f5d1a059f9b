"""wheelbuild.index.remote.parse_target: what `publish --to` understands (no network here)."""

from __future__ import annotations

from pathlib import Path

import pytest
from wheelbuild.errors import BadArgument
from wheelbuild.index.remote import RsyncTarget, UploadEndpoint, parse_target


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("wheelhouse/cu130", Path("wheelhouse/cu130")),
        ("/srv/wheels/cu130", Path("/srv/wheels/cu130")),
        ("./host:like", Path("./host:like")),
        (
            "ci@wheels.example:/srv/wheels/cu130",
            RsyncTarget(host="ci@wheels.example", path="/srv/wheels/cu130"),
        ),
        ("wheels:cu130", RsyncTarget(host="wheels", path="cu130")),
        (
            "ssh://ci@wheels.example:2222/srv/w",
            RsyncTarget(host="ci@wheels.example", path="/srv/w", port=2222),
        ),
        ("http://127.0.0.1:8080/", UploadEndpoint(url="http://127.0.0.1:8080/")),
        ("https://devpi.example/ci/prod/", UploadEndpoint(url="https://devpi.example/ci/prod/")),
    ],
)
def test_targets(text: str, expected: object) -> None:
    assert parse_target(text) == expected


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("https://ci:s3cret@devpi.example/", "carries credentials"),
        ("ssh://ci:s3cret@host/srv", "carries a password"),
        ("s3://bucket/prefix", "not a target wheelbuild can write"),
        ("ssh://host", "names no host or path"),
    ],
)
def test_refused_targets_say_why_without_echoing_secrets(text: str, says: str) -> None:
    with pytest.raises(BadArgument) as refused:
        parse_target(text)
    assert says in refused.value.cause and "s3cret" not in str(refused.value)


def test_ssh_command_takes_options_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WHEELBUILD_SSH_COMMAND", "ssh -i /keys/ci -o BatchMode=yes")
    assert RsyncTarget(host="h", path="/p", port=2222).ssh() == [
        "ssh",
        "-i",
        "/keys/ci",
        "-o",
        "BatchMode=yes",
        "-p",
        "2222",
    ]
