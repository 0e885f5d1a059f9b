"""What the commands reach Docker and the build through. Each command asks `seams()` for them;
by default they are the real ones, and a test hands fakes through click's context
(`CliRunner().invoke(main, args, obj=Seams(...))`) instead of patching modules."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import click

from ..engine.docker_engine import DockerEngine
from ..pipeline.build import RunBuild, run_build

__all__ = ["EngineFactory", "Seams", "seams"]

# DockerEngine's own constructor: (sweep=..., timeout=...) -> an engine, connected on first use.
EngineFactory = Callable[..., DockerEngine]


@dataclass(frozen=True)
class Seams:
    """The engine every command (the dist fleet's too) is made by, and the build `build` and
    `nightly build-cell` run."""

    engine: EngineFactory = DockerEngine
    run_build: RunBuild = run_build


def seams() -> Seams:
    """The seams the running command was handed in click's context, or the real ones."""
    context = click.get_current_context(silent=True)
    handed = context.find_object(Seams) if context is not None else None
    return handed if handed is not None else Seams()
