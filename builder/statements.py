"""The provenance statement a build writes beside each of its wheels (``<wheel>.intoto.json``):
the facts gathered from the build's spec, its image inputs, its source and what its last attempt
installed from the machine's wheel cache, made into an in-toto Statement by provenance.py.

Its externalParameters are `wheelbuild build`'s own arguments (the package as `build` takes it,
the torch release, archs, Pythons, env), so `wheelbuild verify --rebuild` builds the same inputs.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import assert_never

from .plan.planner import Plan
from .provenance import STATEMENT_SUFFIX, BuildFacts, Material, statement, statement_bytes
from .recipes import IndexLookup, LocalProject, LocalSdist, Recipe, RemoteSdist, known_recipes, resolve_recipe
from .run.attempt import SHARED_CACHE_ENV, AttemptResult
from .run.cuda_redist import redist_url
from .run.image import ImageInputs
from .run.results import builder_versions, source_key
from .secrets import Redactor, redact_url, run_secrets, without_credentials
from .sources import SourceDate
from .spec import BuildSpec
from .wheel.wheels import WheelInfo

__all__ = [
    "TREE_DIGEST",
    "build_facts",
    "clean_url",
    "package_argument",
    "run_redactor",
    "source_material",
    "write_statements",
]

# What a folder's digest is (run/results.py source_digest): no standard digest names one.
TREE_DIGEST = "wheelbuildTreeSha256"


def clean_url(url: str) -> str:
    """A URL as a statement names it: no user info, every query value hidden."""
    return redact_url(without_credentials(url)[0])


def source_material(recipe: Recipe) -> Material:
    """The source as a material: an sdist by its sha256 and where it came from, a project
    folder by the digest of its files (relative paths, modes and contents)."""
    source = recipe.source
    match source:
        case RemoteSdist(url, sha256):
            return Material("source", {"sha256": sha256}, clean_url(url))
        case LocalSdist(path):
            return Material("source", {"sha256": source_key(source)}, path.as_uri())
        case LocalProject(path):
            return Material(
                "source",
                {TREE_DIGEST: source_key(source)},
                path.as_uri(),
                {"digest": "sha256 over each file's relative path, mode and sha256, build output left out"},
            )
        case IndexLookup(project, version):
            raise AssertionError(f"{project}=={version} is looked up before its statement is made")
        case _:
            assert_never(source)


def package_argument(recipe: Recipe) -> str:
    """What `wheelbuild build` takes to build this recipe again: a known recipe's name, an sdist
    URL with its #sha256= pin, or a local path."""
    if recipe.name in known_recipes():
        known = resolve_recipe(recipe.name, version=recipe.version).source
        if known == recipe.source or (
            isinstance(known, IndexLookup) and isinstance(recipe.source, RemoteSdist)
        ):
            return recipe.name
    match recipe.source:
        case RemoteSdist(url, sha256):
            return f"{clean_url(url)}#sha256={sha256}"
        case LocalProject(path) | LocalSdist(path):
            return str(path)
        case IndexLookup(project, version):
            return f"{project}=={version}"
        case _:
            assert_never(recipe.source)


def build_facts(
    spec: BuildSpec,
    inputs: ImageInputs,
    key: str,
    pythons: tuple[str, ...],
    date: SourceDate,
    last: tuple[Plan, AttemptResult],
    run_id: str,
) -> BuildFacts:
    """Everything a statement of this build says, but the wheel itself."""
    recipe, (plan, result) = spec.recipe, last
    locked = tuple(
        Material(name, {"sha256": sha256}, annotations={"lock": lock})
        for lock, sha256, name in result.locked_files
    )
    build_env = recipe.build_env(spec.archs, 1, 1, spec.variant.label, ptx=spec.ptx)
    return BuildFacts(
        package=package_argument(recipe),
        recipe_version=recipe.version if package_argument(recipe) == recipe.name else None,
        arch_env=recipe.arch_env,
        env=dict(recipe.extra_env),
        torch=str(spec.variant),
        torch_index_url=clean_url(spec.variant.index_url),
        archs=spec.archs,
        ptx=spec.ptx,
        pythons=pythons,
        pin=spec.pin.value,
        keep_package_archs=spec.keep_package_archs,
        build_network=spec.build_network,
        inputs_key=key,
        source_date_epoch=date.epoch,
        source_date_from=date.why,
        build_env={k: v for k, v in build_env.items() if k not in {"MAX_JOBS", "NVCC_THREADS"}},
        max_jobs=plan.max_jobs,
        nvcc_threads=plan.nvcc_threads,
        compiler_cache=spec.compiler_cache,
        materials=(source_material(recipe), *inputs.materials(redist_url(os.environ)), *locked),
        builder_version=builder_versions(),
        run_id=run_id,
    )


def run_redactor(spec: BuildSpec, environ: Mapping[str, str]) -> Redactor:
    """Every secret value this build could know: the shared cache's variables, the torch
    index's and the source URL's credentials."""
    urls = [spec.variant.index_url]
    if isinstance(spec.recipe.source, RemoteSdist):
        urls.append(spec.recipe.source.url)
    return Redactor(run_secrets(environ, SHARED_CACHE_ENV, urls))


def write_statements(wheels: Iterable[WheelInfo], facts: BuildFacts, redactor: Redactor) -> tuple[Path, ...]:
    """``<wheel>.intoto.json`` beside each wheel: its Statement."""
    written = []
    for wheel in wheels:
        path = wheel.path.with_name(wheel.path.name + STATEMENT_SUFFIX)
        path.write_bytes(statement_bytes(statement(wheel.path.name, wheel.sha256, facts, redactor)))
        written.append(path)
    return tuple(written)
