"""The index's page for people, in real headless Chromium, from a real `wheelbuild serve`: a tree
published by the real publish code holding real wheels (one with an extension module nvcc compiled
for sm_100 and sm_120, the same under another variant and yanked, a pure one), its `/` loaded as
a browser loads it. The table's rows, variant, archs and install lines are read from the rendered
DOM, the pure wheel is installed with the uv line copied from the page, and the static tree's
index.html (what nginx would serve) shows the same rows.

Screenshots stay in the test's tmp dir (printed with -s): index-page.png."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from wheelbuild.index.publish import publish
from wheelbuild.index.yank import yank

from tests.browser import chromium, count_near, distinct_colors, read_png
from tests.indexkit import make_wheel
from tests.serving import clean_env, request, run_ok, running_server, uv_binary
from tests.toolchain import require

KERNEL = """
__global__ void twice(float* x) { x[threadIdx.x] *= 2.0f; }
extern "C" void launch(float* x) { twice<<<1, 32>>>(x); }
"""
YANK = "<b>miscompiled</b> for sm_120"

ROWS = """JSON.stringify([...document.querySelectorAll('table.wheels tbody tr.wheel')].map(tr => ({
  cls: tr.className,
  cells: [...tr.querySelectorAll('td')].slice(0, 9).map(td => td.innerText.replace(/\\s+/g, ' ').trim()),
  uv: tr.querySelector('.cmd.uv code').textContent,
  pip: tr.querySelector('.cmd.pip code').textContent,
  bold: tr.querySelectorAll('b').length,
  box: (r => [r.width, r.height])(tr.getBoundingClientRect()),
})))"""


def _extension(tmp_path: Path) -> bytes:
    """A real CUDA extension module: SASS for sm_100 and sm_120 in its .nv_fatbin."""
    nvcc = require("nvcc")  # the test extra's NVIDIA wheel, else PATH; missing fails with the remedy
    (tmp_path / "k.cu").write_text(KERNEL)
    out = tmp_path / "k.so"
    gencode = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in (100, 120)]
    subprocess.run(
        [
            nvcc,
            "-Xcompiler",
            "-fPIC",
            "-cudart",
            "none",
            "-shared",
            *gencode,
            str(tmp_path / "k.cu"),
            "-o",
            str(out),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return out.read_bytes()


def _tree(tmp_path: Path) -> Path:
    so = _extension(tmp_path)
    wheels = [
        make_wheel(
            tmp_path / "in",
            "wbcuda",
            f"0.1.0+{label}",
            tag=f"{python}-{python}-manylinux_2_34_x86_64",
            requires_dist=(f"torch=={torch}.*",),
            extra_files={f"wbcuda/_C.{python}-x86_64-linux-gnu.so": so},
        )
        for label, python, torch in (("cu130torch2.11", "cp311", "2.11"), ("cu128torch2.10", "cp312", "2.10"))
    ]
    wheels.append(make_wheel(tmp_path / "in", "wbtiny", "0.2.0"))
    root = tmp_path / "tree"
    publish(wheels, root)
    yank(root, wheels[1].name, YANK)
    return root


def test_serve_answers_a_browser_with_the_table_of_what_the_index_holds(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    with running_server(root) as url:
        base = url.removesuffix("simple/")
        # Not a browser: the redirect to /simple/ as before.
        plain = request(url, "/", {"Accept": "*/*"})
        assert plain.status == 302 and plain.headers["location"] == "/simple/"
        served = request(url, "/", {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"})
        assert served.status == 200 and served.headers["content-type"].startswith("text/html")
        assert served.body == (root / "index.html").read_bytes()  # the static tree's page, as is
        assert "script-src 'sha256-" in served.headers["content-security-policy"]
        with chromium(width=1400) as page:
            page.goto(base)
            rows = json.loads(page.evaluate(ROWS))
            shot = page.screenshot(tmp_path / "index-page.png")
            page.goto((root / "index.html").as_uri())
            static_rows = json.loads(page.evaluate(ROWS))
    print(f"\nscreenshot: {shot}")

    by_version = {row["cells"][1]: row for row in rows}
    assert [row["cells"][0] for row in rows] == ["wbcuda", "wbcuda", "wbtiny"]
    cu130 = by_version["0.1.0+cu130torch2.11"]
    assert cu130["cells"][2:6] == ["CUDA 13.0 torch 2.11", "3.11", "manylinux_2_34_x86_64", "sm_100, sm_120"]
    assert cu130["cells"][8] == "—" and "yanked" not in cu130["cls"]
    # Through the route of the torch it was built for: its release, no label, the rest from PyPI.
    assert cu130["uv"] == f"uv pip install --index {base}cu130-torch2.11/simple/ 'wbcuda==0.1.0'"
    assert cu130["pip"] == (
        f"pip install --index-url {base}cu130-torch2.11/simple/ --extra-index-url https://pypi.org/simple "
        "'wbcuda==0.1.0'"
    )
    cu128 = by_version["0.1.0+cu128torch2.10"]
    assert cu128["cells"][2:6] == ["CUDA 12.8 torch 2.10", "3.12", "manylinux_2_34_x86_64", "sm_100, sm_120"]
    assert "yanked" in cu128["cls"] and cu128["cells"][8] == f"yanked: {YANK}" and cu128["bold"] == 0
    tiny = by_version["0.2.0"]
    assert tiny["cells"][2:6] == ["— —", "3", "any", "none"]
    assert all(row["box"][0] > 600 and row["box"][1] > 20 for row in rows)  # laid out as a table

    # The static tree's page (nginx) holds the same rows; its lines name the tree's own address.
    assert [r["cells"] for r in static_rows] == [r["cells"] for r in rows]
    static = {row["cells"][1]: row for row in static_rows}
    assert static["0.1.0+cu130torch2.11"]["uv"] == (
        f"uv pip install --index {root.as_uri()}/cu130-torch2.11/simple/ 'wbcuda==0.1.0'"
    )
    # Without wheelbuild's label a wheel is in no route: pinned exactly, from the whole index.
    assert static["0.2.0"]["uv"] == f"uv pip install --index {(root / 'simple').as_uri()}/ 'wbtiny==0.2.0'"

    width, height, _rows = read_png(shot)
    assert width >= 1400 and height > 200
    assert distinct_colors(shot) > 50
    assert count_near(shot, (0xFD, 0xF1, 0xF0), tolerance=3) > 2000  # the yanked row's tint


def test_the_uv_line_copied_from_the_page_installs_the_wheel(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    publish([make_wheel(tmp_path / "in", "wbtiny", "0.2.0")], root)
    with running_server(root) as url:
        with chromium() as page:
            page.goto(url.removesuffix("simple/"))
            line = page.evaluate("document.querySelector('tr.wheel .cmd.uv code').textContent")
        assert line == f"uv pip install --index {url} 'wbtiny==0.2.0'"
        env = clean_env(tmp_path)
        venv = tmp_path / "venv"
        run_ok([sys.executable, "-m", "venv", "--without-pip", str(venv)], env, tmp_path)
        args = shlex.split(line)
        assert args[0] == "uv"
        run_ok([uv_binary(), *args[1:]], {**env, "VIRTUAL_ENV": str(venv)}, tmp_path)
    done = run_ok([str(venv / "bin" / "python"), "-c", "import wbtiny; print(wbtiny.VERSION)"], env, tmp_path)
    assert done.stdout.strip() == "0.2.0"
    assert os.path.isdir(venv)
