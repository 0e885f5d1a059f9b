"""Real headless Chromium for the page tests (build-report.html, the index's page), driven over
the DevTools protocol with aiohttp's websocket client (already a dependency): load a URL,
evaluate JavaScript in it (the DevTools protocol is not bound by the page's Content-Security-
Policy, so a page that allows no script can still be measured), and take PNG screenshots. A tiny
PNG reader checks that a screenshot is not blank, without Pillow.

Chromium is Debian's `chromium` package; `scripts/setup --tests` (scripts/test's setup) installs
it (as root). A test skips with the reason only where it is not installed.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import struct
import subprocess
import tempfile
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def require_chromium() -> str:
    found = chromium_path()
    if found is None:
        pytest.skip(
            "no chromium on PATH: scripts/setup --tests installs Debian's chromium when run as root "
            "(apt-get install chromium); it could not be installed on this machine"
        )
    return found


@dataclass
class Page:
    """One browser tab, spoken to over its DevTools websocket."""

    ws: aiohttp.ClientWebSocketResponse
    loop: asyncio.AbstractEventLoop
    _next: int = 0

    def _send(self, method: str, params: dict[str, Any] | None = None, timeout: float = 60) -> dict[str, Any]:
        return self.loop.run_until_complete(self._call(method, params or {}, timeout))

    async def _call(self, method: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
        self._next += 1
        ident = self._next
        await self.ws.send_str(json.dumps({"id": ident, "method": method, "params": params}))
        async with asyncio.timeout(timeout):
            while True:
                message = json.loads((await self.ws.receive()).data)
                if message.get("id") == ident:
                    if "error" in message:
                        raise RuntimeError(f"{method}: {message['error']}")
                    return dict(message.get("result", {}))

    async def _wait_event(self, name: str, timeout: float) -> None:
        async with asyncio.timeout(timeout):
            while True:
                message = json.loads((await self.ws.receive()).data)
                if message.get("method") == name:
                    return

    def goto(self, url: str, timeout: float = 60) -> None:
        self._send("Page.enable")
        self._send("Page.navigate", {"url": url})
        self.loop.run_until_complete(self._wait_event("Page.loadEventFired", timeout))

    def evaluate(self, expression: str) -> Any:
        """The JSON value of *expression*, evaluated in the page."""
        result = self._send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:80]}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path: Path, clip: dict[str, float] | None = None) -> Path:
        """A PNG of the whole page (or of *clip*, CSS pixels of the page) at *path*."""
        if clip is None:
            size = self._send("Page.getLayoutMetrics")["cssContentSize"]
            clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"]}
        shot = self._send(
            "Page.captureScreenshot",
            {"format": "png", "captureBeyondViewport": True, "clip": {**clip, "scale": 1}},
        )
        path.write_bytes(base64.b64decode(shot["data"]))
        return path


@contextmanager
def chromium(width: int = 1100, height: int = 900) -> Iterator[Page]:
    """A headless Chromium of its own (fresh profile, no network needed), one tab in it."""
    binary = require_chromium()
    profile = Path(tempfile.mkdtemp(prefix="wheelbuild-chromium-"))
    proc = subprocess.Popen(
        [
            binary,
            "--headless",
            "--no-sandbox",  # we are root in CI; the sandbox refuses to start as root
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            "--no-first-run",
            "--remote-debugging-port=0",
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    loop = asyncio.new_event_loop()
    session: aiohttp.ClientSession | None = None
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.is_file() and port_file.read_text().count("\n") >= 1):
            assert proc.poll() is None, f"chromium exited with {proc.returncode}"
            assert time.monotonic() < deadline, "chromium did not open its DevTools port in 60 s"
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])

        async def connect() -> tuple[aiohttp.ClientSession, aiohttp.ClientWebSocketResponse]:
            client = aiohttp.ClientSession()
            async with client.get(f"http://127.0.0.1:{port}/json/list") as response:
                targets = await response.json()
            url = next(t["webSocketDebuggerUrl"] for t in targets if t.get("type") == "page")
            return client, await client.ws_connect(url, max_msg_size=0)

        session, ws = loop.run_until_complete(connect())
        yield Page(ws=ws, loop=loop)
    finally:
        if session is not None:
            loop.run_until_complete(session.close())
        loop.close()
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(profile, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# A PNG reader: just enough for Chromium's screenshots (8-bit RGB or RGBA, not interlaced).


def read_png(path: Path) -> tuple[int, int, list[bytes]]:
    """(width, height, rows): each row width x channels bytes of RGB(A), filters undone."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    pos, idat, header = 8, bytearray(), b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
    width, height, depth, color, _c, _f, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and color in (2, 6) and interlace == 0, (
        f"unexpected PNG kind {depth}/{color}/{interlace}"
    )
    channels = 4 if color == 6 else 3
    raw = zlib.decompress(bytes(idat))
    stride = width * channels
    rows: list[bytes] = []
    previous = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                corner = previous[i - channels] if i >= channels else 0
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 0xFF
        rows.append(bytes(line))
        previous = line
    if channels == 4:  # drop alpha: rows of RGB
        rows = [_rgb(row, width) for row in rows]
    return width, height, rows


def _rgb(row: bytes, width: int) -> bytes:
    out = bytearray(width * 3)
    for channel in range(3):
        out[channel::3] = row[channel::4]
    return bytes(out)


def count_near(path: Path, rgb: tuple[int, int, int], tolerance: int = 48) -> int:
    """How many pixels of the PNG at *path* are within *tolerance* (per channel) of *rgb*."""
    _w, _h, rows = read_png(path)
    r0, g0, b0 = rgb
    return sum(
        1
        for row in rows
        for i in range(0, len(row), 3)
        if abs(row[i] - r0) <= tolerance
        and abs(row[i + 1] - g0) <= tolerance
        and abs(row[i + 2] - b0) <= tolerance
    )


def distinct_colors(path: Path) -> int:
    _w, _h, rows = read_png(path)
    return len({row[i : i + 3] for row in rows for i in range(0, len(row), 3)})
