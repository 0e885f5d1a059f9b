"""What a failed attempt's log says went wrong besides memory: the contract broken (a shared
object this build did not link, a prebuilt binary fetched instead of built). Pure: what the
engine saw of an attempt in, the typed error that explains it out (None: nothing recognised)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..errors import NotBuiltHere, WheelbuildError
from .buildlog import NOT_LINKED_MARK

if TYPE_CHECKING:  # attempt.classify calls this module
    from .attempt import AttemptResult

# What urllib, requests and pip print when a download finds no network.
_NETWORK_ERROR = re.compile(
    r"URLError|HTTPError|urlopen error|Name or service not known|Temporary failure in name resolution"
    r"|Network is unreachable|Connection refused|No route to host|ConnectionError|getaddrinfo failed"
)


def contract_failure(result: AttemptResult) -> WheelbuildError | None:
    """A shared object the link ledger does not know, or a failed fetch of a prebuilt binary."""
    tail = "\n".join(result.log_tail[-25:])
    fetched = f"; the package's build fetched {result.prebuilt_urls[0]}" if result.prebuilt_urls else ""
    not_linked = NOT_LINKED_MARK.removeprefix("wheelbuild: ")
    refused = next((check for check in result.link_checks if not_linked in check), None)
    if refused is not None:
        python, _, what = refused.partition(": not linked here: ")
        return NotBuiltHere(
            f"the wheel built for {python} holds shared objects this build did not link: {what}{fetched}",
            "build it from source: set the package's switch for that (e.g. --env <NAME>_FORCE_BUILD=TRUE; "
            "wheelbuild sets the ones it finds in setup.py), and remove any prebuilt .so or build/ folder "
            f"from the source; full log: {result.log_path}",
            details=tail,
        )
    if result.prebuilt_urls and _NETWORK_ERROR.search("\n".join(result.log_tail)):
        return NotBuiltHere(
            f"the package's build tried to download a prebuilt binary instead of building it "
            f"({result.prebuilt_urls[0]}), and the download failed",
            "make it build from source: set its switch (e.g. --env <NAME>_FORCE_BUILD=TRUE, read its "
            f"setup.py for the name); wheelbuild sets the ones it recognises; full log: {result.log_path}",
            details=tail,
        )
    return None
