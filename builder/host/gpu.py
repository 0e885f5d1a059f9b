"""Whether a build gets this machine's GPUs: `auto` when Docker has NVIDIA's runtime, `all`, or
`none` (compiling needs no GPU; the gate's smoke test does)."""

from __future__ import annotations

from enum import StrEnum


class GpuMode(StrEnum):
    AUTO = "auto"
    ALL = "all"
    NONE = "none"
