"""Webhook signatures, in the Standard Webhooks scheme (https://www.standardwebhooks.com).

The service signs every webhook it sends with its tenant's secret; a receiver checks the
signature with the same secret before it trusts the body::

    from rbfkm_client import verify_webhook

    event = verify_webhook(secret, request.headers, request.body)   # raises if forged
    if event["type"] == "job.succeeded": ...

A secret is ``whsec_`` followed by the base64 of its key bytes. The signature is the
base64 of HMAC-SHA256 over ``{webhook-id}.{webhook-timestamp}.{body}``, sent as
``webhook-signature: v1,<signature>`` (several, space-separated, while a secret is being
rotated). ``webhook-id`` is the same on every retry of one delivery: receivers deduplicate
by it. The timestamp bounds replays: an old message is refused.

The service imports :func:`sign` from here, so both sides share one definition.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from typing import Any

from rbfkm_client.errors import RbfkmError

SECRET_PREFIX = "whsec_"
#: How far a message's timestamp may be from the receiver's clock, in seconds.
TOLERANCE_S = 300
ID_HEADER = "webhook-id"
TIMESTAMP_HEADER = "webhook-timestamp"
SIGNATURE_HEADER = "webhook-signature"


class WebhookVerificationError(RbfkmError):
    """A webhook whose signature, timestamp or headers do not check out."""


def secret_key(secret: str) -> bytes:
    """The key bytes of a ``whsec_...`` secret (a ``ValueError`` for another form)."""
    if not secret.startswith(SECRET_PREFIX):
        raise ValueError(f"a webhook secret starts with {SECRET_PREFIX!r}")
    try:
        key = base64.b64decode(secret[len(SECRET_PREFIX) :], validate=True)
    except ValueError:
        raise ValueError(f"a webhook secret is {SECRET_PREFIX!r} and base64") from None
    if len(key) < 16:
        raise ValueError("a webhook secret needs at least 16 bytes of key")
    return key


def sign(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header value of a message: ``v1,<base64>``."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(secret_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def _header(headers: Mapping[str, str], name: str) -> str:
    value = next((v for k, v in headers.items() if k.lower() == name), None)
    if not value:
        raise WebhookVerificationError(f"the webhook has no {name} header")
    return value


def verify_webhook(
    secret: str,
    headers: Mapping[str, str],
    body: bytes | str,
    *,
    tolerance_s: float = TOLERANCE_S,
    now: float | None = None,
) -> dict[str, Any]:
    """The webhook's event (its JSON body) once its signature and timestamp check out;
    :class:`WebhookVerificationError` otherwise.

    ``headers``: the request's (any mapping; names compared case-insensitively); ``body``:
    the raw bytes received (not re-serialised JSON: the signature covers the bytes).
    """
    raw = body.encode() if isinstance(body, str) else bytes(body)
    message_id = _header(headers, ID_HEADER)
    stamp = _header(headers, TIMESTAMP_HEADER)
    try:
        timestamp = int(stamp)
    except ValueError:
        raise WebhookVerificationError(f"{TIMESTAMP_HEADER} is not a number: {stamp!r}") from None
    clock = time.time() if now is None else now
    if abs(clock - timestamp) > tolerance_s:
        raise WebhookVerificationError(
            f"the webhook's timestamp is {clock - timestamp:+.0f} s from now (more than "
            f"{tolerance_s:g} s): a replay, or a clock out of sync"
        )
    expected = sign(secret, message_id, timestamp, raw).split(",", 1)[1]
    offered = [
        part.split(",", 1)[1]
        for part in _header(headers, SIGNATURE_HEADER).split()
        if part.startswith("v1,")
    ]
    if not any(hmac.compare_digest(expected, signature) for signature in offered):
        raise WebhookVerificationError("no webhook signature matches the secret")
    return json.loads(raw)
