"""What the nightly's target already holds, read over HTTP from its index (PEP 691 JSON or PEP
503 HTML): the inputs keys beside each wheel of a wheelbuild tree, which `nightly schedule` skips,
and the file names an upload server lists, which `nightly publish-night` never uploads again."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from ..errors import PublishedIndexUnreachable, PublishTargetMissing
from ..index import publish as publishing
from ..index import reader, remote
from ..index import tree as index_files
from ..index.project_pages import ACCEPT, IndexFile, files_on_page, linked_url, projects_on_list
from ..secrets import redact_url, without_credentials
from ..wheel.abi3 import stable_abi
from ..wheel.contents import MAX_METADATA_SIZE, requirements_in

__all__ = [
    "INDEX_URL_ENV",
    "PublishedWheel",
    "Release",
    "covering_wheel",
    "held_wheel",
    "published_keys",
    "published_torch_pins",
    "remote_inputs",
    "served_wheels",
]

INDEX_URL_ENV = "NIGHTLY_INDEX_URL"


def _get(
    url: str, kind: reader.Kind, shown: str, *, missing_ok: bool = False, too_large_ok: bool = False
) -> reader.Answer | None:
    """*url* read as *kind*; *shown* is what an error names (its credentials hidden here). None
    for a 404 where *missing_ok*, and for an answer over the cap where *too_large_ok*."""
    try:
        return reader.fetch(url, kind, headers={"Accept": ACCEPT})
    except reader.HttpRefused as refused:
        if (refused.status == 404 and missing_ok) or (isinstance(refused, reader.TooLarge) and too_large_ok):
            return None
        why = refused.why
    raise PublishedIndexUnreachable(
        f"could not read {redact_url(shown)}: {why}",
        f"check {INDEX_URL_ENV} ([publish] index) and that the index is up; its credentials go in the URL",
    )


def _not_a_page(url: str) -> PublishedIndexUnreachable:
    return PublishedIndexUnreachable(
        f"{redact_url(url)} is not a PEP 691 index page", f"point {INDEX_URL_ENV} at the tree's simple/"
    )


def _served(index_url: str) -> Iterator[tuple[str, IndexFile]]:
    """Each wheel a served index lists, read over HTTP: the project list, then each project's
    page; with its page's URL, which carries the index's credentials where it is on the index's
    own host (linked_url: credentials never go to another host a page links). An index that does
    not exist yet (404) lists none."""
    root = index_url.rstrip("/") + "/"
    listed = _get(root, reader.PROJECT_LIST, index_url, missing_ok=True)
    if listed is None:
        return
    try:
        hrefs = projects_on_list(listed.body, listed.content_type)
    except ValueError:
        raise _not_a_page(index_url) from None
    for href in hrefs:
        project_url = linked_url(root, href)
        project = _get(project_url, reader.PROJECT_PAGE, without_credentials(project_url)[0])
        assert project is not None
        try:
            files = files_on_page(project.body, project.content_type)
        except ValueError:
            raise _not_a_page(without_credentials(project_url)[0]) from None
        for file in files:
            if file.filename.endswith(".whl") and file.url:
                yield project_url, file


def _sidecar(
    project_url: str, file: IndexFile, suffix: str, kind: reader.Kind, *, too_large_ok: bool = False
) -> bytes | None:
    """The file served beside a wheel a page lists (*suffix*: .inputs, .metadata), or None when
    the server has none (or, where *too_large_ok*, one over *kind*'s cap)."""
    url = linked_url(project_url, file.url) + suffix
    found = _get(url, kind, without_credentials(url)[0], missing_ok=True, too_large_ok=too_large_ok)
    return None if found is None else found.body


def remote_inputs(index_url: str) -> set[str]:
    """The inputs keys a served wheelhouse tree holds: ``<file>.inputs`` beside each wheel its
    index lists (wheelbuild's trees have them; an upload server's index has none)."""
    keys: set[str] = set()
    for project_url, file in _served(index_url):
        # One too large for a sidecar wheelbuild writes is damaged, as one that names no keys is.
        found = _sidecar(project_url, file, index_files.INPUTS_SUFFIX, reader.INPUTS, too_large_ok=True)
        if found is not None:
            with contextlib.suppress(ValueError):  # not text, or not keys: its cells are built again
                keys |= index_files.inputs_keys(found.decode())
    return keys


def served_wheels(index_url: str) -> set[str]:
    """The wheel file names a served index lists (an upload server's, which keeps no inputs
    keys: a name it holds is never uploaded again)."""
    return {file.filename for _, file in _served(index_url)}


def published_keys(to: str, index_url: str | None, tags: Iterable[str]) -> set[str]:
    """The inputs keys published in each variant's tree of *to*: a local tree read directly, a
    remote one (ssh tree or upload URL) over HTTP from *index_url* ({variant} in it)."""
    keys: set[str] = set()
    for tag in sorted(set(tags)):
        where = remote.target_for(to, tag, several=False)
        if isinstance(where, Path):
            keys |= publishing.published_inputs(where)
            continue
        if not index_url:
            raise PublishTargetMissing(
                f"the target {to} is remote, and no index URL says where to read what it holds",
                f"set {INDEX_URL_ENV} (or [publish] index) to its index, e.g. https://wheels.example/{{variant}}/simple/",
            )
        keys |= remote_inputs(index_url.replace("{variant}", tag))
    return keys


@dataclass(frozen=True)
class Release:
    """What a cell's wheel will be named by, known before it is built: the project, its release
    and the variant's local label (flash-attn, 2.8.3, cu130torch2.11), and the Python (cp311)."""

    project: str
    version: str
    label: str
    python: str


def held_wheel(release: Release, served: Iterable[str]) -> str | None:
    """The wheel among *served* (file names an upload server's index lists) that the cell of
    *release* would build: the same project, release+label and Python (or an abi3 wheel that
    serves it). Such a cell need not be built: the server never takes that name again (pure)."""
    try:
        wanted = Version(f"{release.version}+{release.label}")
    except InvalidVersion:
        return None
    for filename in sorted(served):
        try:
            name, version, _build, tags = parse_wheel_filename(filename)
        except InvalidWheelFilename:
            continue
        if name != canonicalize_name(release.project) or version != wanted:
            continue
        abi3 = stable_abi(filename)
        if any(t.interpreter == release.python for t in tags) or (abi3 and abi3.serves(release.python)):
            return filename
    return None


@dataclass(frozen=True)
class PublishedWheel:
    """A wheel a target holds, with what its METADATA requires of torch."""

    filename: str
    torch: str  # the specifier of its torch requirement without a marker: >=2.12,<2.15; "" if none


def _torch_specifier(metadata: bytes) -> str:
    for requirement in requirements_in(metadata):
        if canonicalize_name(requirement.name) == "torch" and requirement.marker is None:
            # lower bounds first, as a range is read: >=2.12,<2.15
            return ",".join(sorted(map(str, requirement.specifier), key=lambda s: not s.startswith(">")))
    return ""


def published_torch_pins(to: str, index_url: str | None, tags: Iterable[str]) -> tuple[PublishedWheel, ...]:
    """Each wheel published in each variant's tree of *to*, with its torch specifier: a local
    tree's METADATA sidecars read directly, a remote one's over HTTP (PEP 658) from *index_url*."""
    found: list[PublishedWheel] = []
    for tag in sorted(set(tags)):
        where = remote.target_for(to, tag, several=False)
        if isinstance(where, Path):
            for sidecar in sorted((where / index_files.FILES).glob(f"*.whl{index_files.METADATA_SUFFIX}")):
                metadata = index_files.read_capped_metadata(sidecar)
                found.append(
                    PublishedWheel(
                        sidecar.name.removesuffix(index_files.METADATA_SUFFIX), _torch_specifier(metadata)
                    )
                )
            continue
        if not index_url:
            continue  # published_keys has said what a remote target needs
        for project_url, file in _served(index_url.replace("{variant}", tag)):
            if not file.metadata:
                continue
            got = _sidecar(project_url, file, index_files.METADATA_SUFFIX, reader.METADATA)
            if got is not None:
                found.append(PublishedWheel(file.filename, _torch_specifier(got[:MAX_METADATA_SIZE])))
    return tuple(found)


def covering_wheel(
    release: Release, torch_version: str, published: Iterable[PublishedWheel]
) -> PublishedWheel | None:
    """The published wheel whose proven torch range already serves a cell of *release* built for
    *torch_version*: the same project, release, CUDA tag and Python (or an abi3 wheel that serves
    it), and a torch requirement that admits that torch (pure)."""
    tag = release.label.partition("torch")[0]
    for wheel in sorted(published, key=lambda w: w.filename):
        try:
            name, version, _build, tags = parse_wheel_filename(wheel.filename)
            admits = bool(wheel.torch) and SpecifierSet(wheel.torch).contains(torch_version)
        except (InvalidWheelFilename, InvalidSpecifier, InvalidVersion):
            continue
        label = version.local or ""
        if name != canonicalize_name(release.project) or version.public != release.version or not admits:
            continue
        if label.partition("torch")[0] != tag:
            continue
        abi3 = stable_abi(wheel.filename)
        if any(t.interpreter == release.python for t in tags) or (abi3 and abi3.serves(release.python)):
            return wheel
    return None
