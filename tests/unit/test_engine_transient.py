"""Transient Docker API errors are retried with backoff; real answers are not."""

from __future__ import annotations

import docker.errors
import pytest
import requests
from wheelbuild.engine.containers import is_transient, transient_retry


def _api_error(status: int, explanation: str) -> docker.errors.APIError:
    response = requests.Response()
    response.status_code = status
    return docker.errors.APIError("docker said no", response=response, explanation=explanation)


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (requests.exceptions.ConnectionError("Connection reset by peer"), True),
        (_api_error(500, "the daemon is restarting"), True),
        (_api_error(503, "service unavailable"), True),
        (_api_error(500, "driver failed programming external connectivity"), False),
        (_api_error(404, "No such image: wheelbuild-base:absent"), False),
        (_api_error(409, "Conflict. The container name is already in use"), False),
        (ValueError("not docker at all"), False),
    ],
)
def test_transient_errors_are_told_apart(error: BaseException, transient: bool) -> None:
    assert is_transient(error) is transient


def test_a_connection_reset_is_retried_until_the_daemon_answers() -> None:
    calls = []

    @transient_retry
    def ping() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise requests.exceptions.ConnectionError("Connection reset by peer")
        return "OK"

    assert ping() == "OK"
    assert len(calls) == 3


def test_a_real_answer_is_not_retried() -> None:
    calls = []

    @transient_retry
    def inspect() -> None:
        calls.append(1)
        raise _api_error(404, "No such container")

    with pytest.raises(docker.errors.APIError):
        inspect()
    assert len(calls) == 1
