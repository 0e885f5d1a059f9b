"""Helpers for tests/local/test_serve.py and the other tests that serve an index: the real server
in a thread, raw HTTP requests, the access log read back."""

from __future__ import annotations

import base64
import http.client
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from wheelbuild.index.serve import ServeLimits, serve


def clean_env(tmp_path: Path, *, uv_cache: Path | None = None) -> dict[str, str]:
    """The environment of a user with no pip/uv configuration (this machine sets PIP_FIND_LINKS).
    uv's cache is per test unless *uv_cache* is given (a shared one saves downloading torch)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "VIRTUAL_ENV", "PYTHON"))}
    env.update(
        PIP_CONFIG_FILE=os.devnull,
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PIP_NO_CACHE_DIR="1",
        UV_NO_CONFIG="1",
        UV_CACHE_DIR=str(uv_cache or tmp_path / "uv-cache"),
        UV_PYTHON_DOWNLOADS="never",
        NO_PROXY="127.0.0.1,localhost",
        no_proxy="127.0.0.1,localhost",
    )
    return env


def run_ok(
    args: list[str], env: dict[str, str], cwd: Path, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        args, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{args}\n{done.stdout}\n{done.stderr}"
    return done


def uv_binary() -> str:
    uv = Path(sys.executable).parent / "uv"
    assert uv.is_file(), "uv is a test dependency: pip install -e '.[test]'"
    return str(uv)


@contextmanager
def running_server(
    root: Path,
    *,
    htpasswd: Path | None = None,
    access_log: Path | None = None,
    limits: ServeLimits | None = None,
) -> Iterator[str]:
    """serve() in a thread on 127.0.0.1, a free port; yields the index URL (http://.../simple/)."""
    urls: queue.Queue[str] = queue.Queue()
    stop = threading.Event()
    failed: list[BaseException] = []

    def run() -> None:
        try:
            serve(root, htpasswd=htpasswd, access_log=access_log, ready=urls.put, stop=stop, limits=limits)
        except BaseException as error:
            failed.append(error)
            urls.put("")

    thread = threading.Thread(target=run, name="wheelbuild-serve", daemon=True)
    thread.start()
    url = urls.get(timeout=20)
    if failed:
        raise failed[0]
    try:
        yield url
    finally:
        stop.set()
        thread.join(timeout=10)
        assert not thread.is_alive(), "the server did not stop"


_LIMITED = """
import os, resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), int(sys.argv[1])))
os.execv(sys.argv[2], sys.argv[2:])
"""


def limited(open_files: int | None, *args: str) -> list[str]:
    """The command line of `wheelbuild ARGS`, under an open-file limit of *open_files* if given
    (set in the child itself, then exec'd: no preexec_fn in a test process with threads)."""
    command = [str(Path(sys.executable).parent / "wheelbuild"), *args]
    return command if open_files is None else [sys.executable, "-c", _LIMITED, str(open_files), *command]


@dataclass
class ServeProcess:
    """A `wheelbuild serve` of its own: its index URL, and its stderr once it has stopped."""

    url: str
    process: subprocess.Popen[str]
    stderr: str = ""


@contextmanager
def serve_process(root: Path, *options: str, open_files: int | None = None) -> Iterator[ServeProcess]:
    """`wheelbuild serve ROOT --port 0 OPTIONS` as a process, under an open-file limit of
    *open_files* if given; it is stopped with SIGINT (Ctrl-C) on leaving the block, after which
    `.stderr` holds all it wrote there."""
    command = limited(open_files, "serve", str(root), "--port", "0", *options)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stderr is not None
    first = process.stdout.readline()  # "serving ROOT at URL ...", once it listens
    found = re.search(r" at (http://\S+/simple/)", first)
    if found is None:
        process.kill()
        raise AssertionError(f"the server did not start: {first}{process.stderr.read()}")
    served = ServeProcess(found[1], process)
    try:
        yield served
    finally:
        process.send_signal(signal.SIGINT)
        _out, served.stderr = process.communicate(timeout=60)


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]  # lower-case names
    body: bytes


def request(
    url: str,
    path: str,
    headers: dict[str, str] | None = None,
    *,
    method: str = "GET",
    auth: tuple[str, str] | None = None,
    source: str | None = None,
) -> Reply:
    """One request with *path* sent exactly as written (no normalization, no redirects followed),
    from the loopback address *source* if given (127.0.0.2 is another client to the server)."""
    where = urlsplit(url)
    sent = dict(headers or {})
    if auth is not None:
        sent["Authorization"] = "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
    connection = http.client.HTTPConnection(
        where.hostname or "127.0.0.1",
        where.port,
        timeout=10,
        source_address=(source, 0) if source else None,
    )
    try:
        has_host = any(name.lower() == "host" for name in sent)
        connection.putrequest(method, path, skip_host=has_host, skip_accept_encoding=True)
        for name, value in sent.items():
            connection.putheader(name, value)
        connection.endheaders()
        response = connection.getresponse()
        body = response.read()
        return Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, body)
    finally:
        connection.close()


# client, user, method, path, status, bytes, time, then range="..." and agent="..." if sent
LINE = re.compile(
    r"(?P<client>\S+) (?P<user>\S+) (?P<method>[A-Z]+) (?P<path>\S+) (?P<status>\d{3}) (?P<bytes>\d+)"
    r' [\d.]+ms(?: range="(?P<range>(?:[^"\\]|\\.)*)")?(?: agent="(?P<agent>(?:[^"\\]|\\.)*)")?$'
)


@dataclass(frozen=True)
class Hit:
    method: str
    path: str
    status: int
    bytes: int
    range: str | None


def read_log(path: Path, *, at_least: int = 0, timeout: float = 5.0) -> list[Hit]:
    """The access log's lines; waits (briefly) for at least *at_least* of them, since a line is
    written just after its response went out."""
    deadline = time.monotonic() + timeout
    while True:
        text = path.read_text() if path.exists() else ""
        hits = []
        for line in text.splitlines():
            match = LINE.search(line)
            assert match, f"unparsable access log line: {line!r}"
            hits.append(
                Hit(
                    method=match["method"],
                    path=match["path"],
                    status=int(match["status"]),
                    bytes=int(match["bytes"]),
                    range=match["range"],
                )
            )
        if len(hits) >= at_least or time.monotonic() > deadline:
            return hits
        time.sleep(0.02)
