"""Keyless signing with Sigstore, where it can be reached (the nightly on GitHub Actions): each
wheel's in-toto Statement signed as a DSSE envelope by a short-lived Fulcio certificate for the
workflow's OIDC identity, logged in Rekor, kept beside the wheel as ``<wheel>.sigstore.json`` (a
Sigstore bundle). It complements `publish --sign-key`, whose signatures `wheelbuild verify`
checks offline; a bundle is checked with Sigstore's own tools (`python -m sigstore verify
identity --bundle ...`), which need Sigstore's trust root.

This path is not tested against Sigstore here: neither Fulcio nor Rekor can be reached from this
project's machines. The tests run everything around it with a stand-in signer, and the real
`sigstore` package's refusal when no OIDC identity is about.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping

from ..errors import KeylessSigningFailed

# A Statement (in-toto v1 JSON) in, a Sigstore bundle (JSON) out.
KeylessSigner = Callable[[bytes], bytes]

EXTRA = "wheelbuild[sigstore]"
NO_IDENTITY_REMEDY = (
    "run it where an OIDC identity is ambient: a GitHub Actions job with `permissions: id-token: write` "
    "(the nightly's publish job has it), or drop --sigstore"
)


def sigstore_signer() -> KeylessSigner:
    """A signer for Sigstore's public instance, with the ambient OIDC identity of this job. Refused
    (KeylessSigningFailed) when the sigstore package is missing or no identity is about, before any
    wheel is published."""
    try:
        from sigstore import dsse, oidc
        from sigstore.models import ClientTrustConfig
        from sigstore.sign import SigningContext
    except ImportError as exc:
        raise KeylessSigningFailed(
            f"--sigstore needs the sigstore package, which is not installed ({exc.name} is missing)",
            f"install the extra: pip install '{EXTRA}'",
        ) from exc
    try:
        credential = oidc.detect_credential()
    except oidc.IdentityError as exc:
        raise KeylessSigningFailed(f"no OIDC identity for Sigstore: {exc}", NO_IDENTITY_REMEDY) from exc
    if credential is None:
        raise KeylessSigningFailed("no ambient OIDC identity for Sigstore to certify", NO_IDENTITY_REMEDY)
    token = oidc.IdentityToken(credential)
    contexts: list[SigningContext] = []  # Sigstore's trust config, fetched once, at the first statement

    def sign(statement: bytes) -> bytes:
        try:
            if not contexts:
                contexts.append(SigningContext.from_trust_config(ClientTrustConfig.production()))
            with contexts[0].signer(token) as signer:
                return signer.sign_dsse(dsse.Statement(statement)).to_json().encode()
        except Exception as exc:  # the network, Fulcio, Rekor: whatever fails, one typed line
            raise KeylessSigningFailed(
                f"Sigstore could not sign a statement: {type(exc).__name__}: {exc}",
                "check that fulcio.sigstore.dev and rekor.sigstore.dev can be reached, then publish again",
            ) from exc

    return sign


def envelope_statement(envelope: bytes) -> bytes:
    """The Statement a DSSE envelope line carries (its payload)."""
    return base64.b64decode(json.loads(envelope)["payload"], validate=True)


def keyless_bundles(envelopes: Mapping[str, bytes], sign: KeylessSigner) -> dict[str, bytes]:
    """Each wheel's Statement (from the envelope publish will serve) signed keyless, by wheel name."""
    return {wheel: sign(envelope_statement(envelope)) for wheel, envelope in sorted(envelopes.items())}
