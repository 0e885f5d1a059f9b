"""What build and inspect print of a wheel: where it is, what its extension modules hold, what
it requires, its sha256, its gate and its torch range."""

from __future__ import annotations

import click

from ..pipeline.stages import BuildResult
from ..progress.console import Console
from ..units import format_bytes
from ..wheel.contents import WheelInfo

__all__ = ["echo_built", "echo_modules"]


def echo_built(result: BuildResult, console: Console) -> None:
    console.step(f"built {len(result.wheels)} wheel(s) in {result.run_dir}")
    for wheel in result.wheels:
        _echo_wheel(result, wheel)
    click.echo(f"report: {result.report}")


def _echo_wheel(result: BuildResult, wheel: WheelInfo) -> None:
    """A built wheel: where, what it holds and requires, its hash, its gate and, for an abi3
    wheel, which Python built it and which reused it."""
    click.echo(f"{wheel.path}")
    echo_modules(wheel)
    click.echo(f"    requires {', '.join(wheel.torch_requirements)}")
    # cibuildwheel's log had the hash of the wheel before the stamp: this is the wheel's.
    click.echo(
        f"    sha256 {wheel.sha256}, {format_bytes(wheel.size)} (the wheel as wheelbuild stamped it after cibuildwheel)"
    )
    click.echo(f"    import gate: {result.gate_summary(wheel)}")
    ranges = [r for r in result.ranges if r.wheel == wheel.path.name]
    for found in ranges:
        under = f" under {found.python}" if len(ranges) > 1 else ""
        click.echo(f"    torch range{under}: {found.summary}")
    for use in (u for u in result.abi3 if u.wheel == wheel.path.name):
        reused = f", reused under {', '.join(use.reused_under)}" if use.reused_under else ""
        click.echo(f"    {use.tag}: one wheel for every Python; built under {use.built_under}{reused}")


def echo_modules(wheel: WheelInfo) -> None:
    for module in wheel.modules:
        sass = ", ".join(f"sm_{a}" for a in sorted(module.archs.sass)) or "none"
        ptx = ", ".join(f"compute_{a}" for a in sorted(module.archs.ptx)) or "none"
        cudart = ", ".join(module.cudart) or "no libcudart"
        click.echo(f"    {module.member}: SASS {sass}; PTX {ptx}; links {cudart}")
