"""Real sdists from PyPI, each pinned by sha256, for the tests that read or build real packages.

Every URL and hash was read from the simple index (``https://pypi.org/simple/<name>/`` with
``Accept: application/vnd.pypi.simple.v1+json``; the JSON API is not served here). `fetch()`
downloads a file once into a cache keyed by its hash, checks the hash and reuses it after; a
test whose sdist cannot be downloaded is skipped with the reason, a file with the wrong hash
fails it.
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
from wheelbuild.index.tree import hash_file
from wheelbuild.recipes.flash_attn import SDISTS as FLASH_ATTN_SDISTS

_FILES = "https://files.pythonhosted.org/packages"


@dataclass(frozen=True)
class PinnedSdist:
    project: str
    version: str
    url: str
    sha256: str

    @property
    def filename(self) -> str:
        return self.url.rsplit("/", 1)[-1]


def _pin(project: str, version: str, path: str, sha256: str) -> PinnedSdist:
    return PinnedSdist(project, version, f"{_FILES}/{path}", sha256)


# project==version -> its sdist. What each is here for is in tests/unit/test_survey.py.
SDISTS: dict[str, PinnedSdist] = {
    f"{s.project}=={s.version}": s
    for s in (
        _pin(
            "causal-conv1d", "1.7.0",
            "f4/d1/eba27735f31bd5527d39a3c7f693e6ded7b844cab275db719a15ad37b6cd/causal_conv1d-1.7.0.tar.gz",
            "3202758494eaa7b597ce1c282dfa188889506bfcb92cad3c407d26736bfcd32b",
        ),
        _pin(
            "torch-cluster", "1.6.3",
            "54/31/e7f7a28253cd907404eb652607613b35779140b326d15d0636511b7b9438/torch_cluster-1.6.3.tar.gz",
            "78d5a930a5bbd0d8788df8c6d66addd68d6dd292fe3edb401e3dacba26308152",
        ),
        _pin(
            "torch-scatter", "2.1.2",
            "f5/ab/2a44ecac0f891dd0d765fc59ac8d277c6283a31907626560e72685df2ed6/torch_scatter-2.1.2.tar.gz",
            "69b3aa435f2424ac6a1bfb6ff702da6eb73b33ca0db38fb26989c74159258e47",
        ),
        _pin(
            "fast-hadamard-transform", "1.1.0",
            "81/dc/7afa54b951cac690742247d153e2e992e30677b944d7330bb7280903fb11/"
            "fast_hadamard_transform-1.1.0.tar.gz",
            "7c03daf825dc74c7200605a5b758f2d5a3bc47ef3b817bf02e97b24076a83906",
        ),
        _pin(
            "grouped-gemm", "0.3.0",
            "1a/90/d255544a8da444fdfab7287850316d2c7961003586a35d3042787982e66c/grouped_gemm-0.3.0.tar.gz",
            "f0555da33a975610e9160f52449082c5e699525524581a0e5f990b14b02676a3",
        ),
        _pin(
            "mamba-ssm", "2.3.2.post1",
            "af/48/aa7bec0efc7453fa0512276c0069c854bf684219050294266534bfef34bb/mamba_ssm-2.3.2.post1.tar.gz",
            "104cc47e9101e5401a675fa2b784f2952b9b037f3b1dd83b5ac544394e95d028",
        ),
        PinnedSdist("flash-attn", "2.8.3", FLASH_ATTN_SDISTS["2.8.3"].url, FLASH_ATTN_SDISTS["2.8.3"].sha256),
        _pin(
            "mmcv", "2.2.0",
            "e9/a2/57a733e7e84985a8a0e3101dfb8170fc9db92435c16afad253069ae3f9df/mmcv-2.2.0.tar.gz",
            "ac479247e808d8802f89eadf04d4118de86bdfe81361ec5aed0cc1bf731c67c9",
        ),
        _pin(
            "xformers", "0.0.35",
            "de/5a/6e27734bd793adc44d0b8d294e67cfacf4ec590572c1aef51d683fc7a791/xformers-0.0.35.tar.gz",
            "f7fc183a58e4bf0e2ae339a18fb1b1d4a37854c0f2545b4f360fef001646ab76",
        ),
        _pin(
            "deepspeed", "0.19.8",
            "bc/d8/3162fc810870df1183e686ec70b57028b464a5940b148a90767c727f113c/deepspeed-0.19.8.tar.gz",
            "9e491abd0827ea5c389dd702e15e11e13d83d904bac4a20d6c2a4cb37207a9af",
        ),
        _pin(
            "auto-gptq", "0.7.1",
            "90/e5/b22697903982284fe284568fb2663a2196694a8eee637f5cf4ccfe435a38/auto_gptq-0.7.1.tar.gz",
            "5c61ad380e9b4c603757c254765e9083a90a820cd0aff1b5d2c6f7fd96c85e80",
        ),
        _pin(
            "natten", "0.21.7",
            "c5/10/98fa5bc8e20937c757b5dbb2e7e949af38bc46aa92da804b0ceb07c90a86/natten-0.21.7.tar.gz",
            "8417236b74db079b2d23899ec8f77514fb2dc73d4bbd6b346a45b6967fc05ffb",
        ),
    )
}  # fmt: skip


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "wheelbuild-tests" / "sdists"


def _download(sdist: PinnedSdist, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    # Beside the destination, then renamed: a killed download, or a second test process
    # downloading the same file, never leaves a half file under the final name.
    with tempfile.NamedTemporaryFile(dir=dest.parent, delete=False) as part:
        try:
            with urllib.request.urlopen(sdist.url, timeout=60) as response:
                shutil.copyfileobj(response, part)
        except (OSError, ValueError) as exc:
            os.unlink(part.name)
            pytest.skip(f"cannot download {sdist.filename} from {sdist.url}: {exc}")
    if (actual := hash_file(Path(part.name))) != sdist.sha256:
        os.unlink(part.name)
        pytest.fail(f"{sdist.url} has sha256 {actual}, but the pin says {sdist.sha256}")
    os.replace(part.name, dest)


def fetch(key: str) -> Path:
    """The file of SDISTS[key] (``"causal-conv1d==1.7.0"``), downloaded once into
    ``<cache>/wheelbuild-tests/sdists/<sha256>/<filename>`` and checked against its pin."""
    sdist = SDISTS[key]
    dest = cache_root() / sdist.sha256 / sdist.filename
    if dest.is_file() and hash_file(dest) == sdist.sha256:
        return dest
    _download(sdist, dest)
    return dest


def make_sdist(path: Path, members: list[tuple[str, bytes | None]]) -> Path:
    """An sdist made in a test: a .tar.gz with these members, in this order; None makes a
    symlink to ../../etc/passwd (hostile-archive tests)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as archive:
        for name, data in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type, info.linkname = tarfile.SYMTYPE, "../../etc/passwd"
                archive.addfile(info)
            else:
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
    return path
