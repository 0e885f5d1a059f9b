"""A simple index's pages, read: a project page (PEP 691 JSON or PEP 503 HTML), the files it
lists with their hashes and whether their metadata is served apart (PEP 658/714); an index's
list of projects; and which URLs a page's credentials go to (its own host only).

Pure: reader.py fetches the pages. The torch index (spec/torch_releases.py), PyPI's pages
(spec/sources.py) and the nightly's served index (nightly/published.py) are all read here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from html.parser import HTMLParser
from urllib.parse import unquote, urljoin, urlsplit

from ..secrets import without_credentials

# The PEP 691 media types a client asks for, and serve.py answers with.
MEDIA_JSON = "application/vnd.pypi.simple.v1+json"
MEDIA_HTML_V1 = "application/vnd.pypi.simple.v1+html"
# PEP 691 negotiation: JSON preferred, HTML (PEP 503) from an index that only has that (PyTorch's).
ACCEPT = f"{MEDIA_JSON}, {MEDIA_HTML_V1};q=0.2, text/html;q=0.1"


@dataclass(frozen=True)
class IndexFile:
    """One file a project page lists."""

    filename: str
    yanked: bool
    url: str = field(default="", compare=False)  # as the page gives it: relative to the page
    sha256: str = field(default="", compare=False)  # the page's hash of it, "" when it names none
    metadata: bool = field(default=False, compare=False)  # its METADATA is served at url + ".metadata"


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.anchors: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.anchors.append(dict(attrs))


def anchors(body: bytes) -> list[dict[str, str | None]]:
    """The attributes of every <a> on an HTML page: a PEP 503 page links all it lists."""
    parser = _Anchors()
    parser.feed(body.decode("utf-8", errors="replace"))
    parser.close()
    return parser.anchors


def _sha256_of(fragment: str) -> str:
    name, _, value = fragment.partition("=")
    return value.lower() if name == "sha256" and len(value) == 64 else ""


def _file_of(values: dict[str, str | None]) -> IndexFile | None:
    href = values.get("href") or ""
    # PEP 503: the anchor's text is the file name, and so is the URL's last path segment.
    try:
        parts = urlsplit(href)
        name = unquote(parts.path.rsplit("/", 1)[-1])
    except ValueError:  # a link no client could follow
        return None
    # PEP 714's name, and PEP 658's before it; "true" or the metadata's own hash.
    served = values.get("data-core-metadata", values.get("data-dist-info-metadata"))
    return (
        IndexFile(
            filename=name,
            yanked="data-yanked" in values,
            url=href,
            sha256=_sha256_of(parts.fragment),
            metadata=served is not None and served.lower() != "false",
        )
        if name
        else None
    )


def _json_file(entry: Mapping[str, object]) -> IndexFile:
    yanked = entry.get("yanked", False)
    url, hashes = entry.get("url"), entry.get("hashes")
    sha256 = hashes.get("sha256") if isinstance(hashes, dict) else None
    served = entry.get("core-metadata", entry.get("dist-info-metadata", False))
    return IndexFile(
        str(entry["filename"]),
        # PEP 691: false, true, or the reason (a string: yanked).
        yanked is True or isinstance(yanked, str),
        url=url if isinstance(url, str) else "",
        sha256=sha256.lower() if isinstance(sha256, str) and len(sha256) == 64 else "",
        metadata=served is True or isinstance(served, dict),
    )


def files_on_page(body: bytes, content_type: str) -> tuple[IndexFile, ...]:
    """The files of a project page: PEP 691 JSON when *content_type* is JSON, else PEP 503 HTML.
    Raises ValueError for JSON that is not a PEP 691 project page."""
    media = content_type.split(";", 1)[0].strip().lower()
    if media.endswith("json"):
        document = json.loads(body)
        entries = document.get("files") if isinstance(document, dict) else None
        if not isinstance(entries, list):
            raise ValueError("the JSON page has no list of files")
        return tuple(
            _json_file(entry)
            for entry in entries
            if isinstance(entry, dict) and isinstance(entry.get("filename"), str)
        )
    return tuple(file for file in map(_file_of, anchors(body)) if file is not None)


def projects_on_list(body: bytes, content_type: str) -> list[str]:
    """The project pages an index's list of projects links, relative to it: PEP 691 JSON when
    *content_type* is JSON, else PEP 503 HTML. Raises ValueError for JSON that is not such a list."""
    if content_type.split(";")[0].strip().endswith("json"):
        try:
            entries = json.loads(body).get("projects", [])
            return [f"{e['name']}/" for e in entries if isinstance(e, dict) and "name" in e]
        except (AttributeError, TypeError) as error:
            raise ValueError(f"the JSON page has no list of projects ({error})") from None
    return [href for values in anchors(body) if (href := values.get("href"))]


def linked_url(page_url: str, href: str) -> str:
    """The absolute URL of a link on a page (its fragment dropped), with the page's credentials
    where it is on the page's own host: pip sends an index's credentials to that host only."""
    bare_page = without_credentials(page_url)[0]
    absolute = urljoin(bare_page, href).split("#", 1)[0]
    user_info = urlsplit(page_url).netloc.rpartition("@")[0]
    target = urlsplit(absolute)
    if user_info and target.netloc == urlsplit(bare_page).netloc:
        return target._replace(netloc=f"{user_info}@{target.netloc}").geturl()
    return absolute


def file_url(page_url: str, file: IndexFile) -> str:
    """The absolute URL of a file a page lists, with the page's credentials where the file is on
    the page's own host (linked_url)."""
    return linked_url(page_url, file.url or file.filename)
