"""`--like PATH` on the command line: the environment read, build's torch, python and archs
filled from it where the command line did not name them (plan's sources then say `--like`), and
after the build the lines that install the wheel there, or, with --install, the install."""

from __future__ import annotations

from pathlib import Path

import click
from packaging.utils import parse_wheel_filename

from ..errors import InstallFailed
from ..host.python_env import PythonEnvironment, read_environment
from ..index.routes import route_install_lines, torch_route
from ..pipeline.install import install_lines, install_wheel, wheels_for
from ..pipeline.stages import BuildResult
from ..progress.console import Console
from ..spec.environment import environment_choice
from .build_spec import BuildOptions
from .options import LIKE_KEY

__all__ = ["finish_like", "take_like"]

_ROUTE_HOST = "<index>"  # where the user's tree is served: not known to build


def take_like(given: BuildOptions, console: Console) -> PythonEnvironment | None:
    """Read --like's environment (when given) and set build's torch, python and archs from it,
    except those the command line named; say each value and where it came from."""
    path = given["like"]
    if path is None:
        return None
    env = read_environment(Path(path))
    choice = environment_choice(env)
    ctx = click.get_current_context()
    values = (
        ("torch_variant", "--torch", choice.torch_variant, choice.torch_said),
        ("pythons", "--python", (choice.python,), choice.python_said),
        ("archs", "--archs", choice.archs, choice.archs_said),
    )
    taken: set[str] = set()
    for param, flag, value, said in values:
        shown = value[0] if isinstance(value, tuple) else value
        if ctx.get_parameter_source(param) is click.core.ParameterSource.COMMANDLINE:
            console.warn(f"{flag} on the command line wins over --like's {shown} ({said})")
            continue
        # The dict click made for the command, and click's own record that plan's sources read.
        given[param] = value  # type: ignore[literal-required]
        ctx.params[param] = value
        taken.add(param)
        console.info(f"--like: {flag} {shown}: {said}")
    ctx.meta[LIKE_KEY] = frozenset(taken)
    return env


def finish_like(env: PythonEnvironment, result: BuildResult, console: Console, *, install: bool) -> None:
    """The lines that install the built wheel into --like's environment (torch stays), the route
    a published copy is listed under, and with *install* the install itself."""
    wheels = wheels_for(env, tuple(w.path for w in result.wheels))
    if not wheels:
        console.warn(f"no wheel built installs into --like {env.interpreter} (CPython {env.python})")
        return
    click.echo(f"install into --like {env.interpreter} (its torch {env.torch} stays):")
    for wheel in wheels:
        for line in install_lines(env, wheel):
            click.echo(f"  {line}")
    route = torch_route(env.torch or "", env.torch_cuda)
    if route is not None:
        project = parse_wheel_filename(wheels[0].name)[0]
        uv, pip = route_install_lines(f"{_ROUTE_HOST}/{route}/simple/", project)
        click.echo(f"once published (wheelbuild publish), from the index's {route} route, no label needed:")
        click.echo(f"  {uv}")
        click.echo(f"  {pip}")
    if install:
        ungated = [w.name for w in wheels if w.name not in result.gate]
        if ungated:
            raise InstallFailed(
                f"--install installs only a wheel the import gate passed; {ungated[0]} was not gated (--no-gate)",
                "drop --no-gate, or install it by hand with the lines above",
            )
        for wheel in wheels:
            installer = install_wheel(env, wheel)
            console.step(f"installed {wheel.name} into --like {env.interpreter} with {installer}")
