"""Idempotency keys for `POST /v1/jobs`, scoped per API key.

The first request with a key claims it with `SET NX` and a *pending* marker that carries the
fingerprint of its body; when it has been accepted the marker is replaced by the stored
response. A retry with the same body replays that response (same job), one with another body
is refused, and so is one that arrives while the first is still being accepted (domain
errors of :mod:`service.errors`; :mod:`service.problems` makes them a 422 and a 409).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import redis

from service.errors import (
    IdempotencyKeyContended,
    IdempotencyKeyInProgress,
    IdempotencyKeyReused,
    InvalidIdempotencyKey,
)

HEADER = "Idempotency-Key"
_MAX_KEY_LENGTH = 255
_FIELD = "header.idempotency-key"


@dataclass
class StoredResponse:
    """A response to replay."""

    status: int
    body: Any
    headers: dict[str, str]


def fingerprint(body: Any) -> str:
    """A hash of a JSON body that ignores key order and whitespace."""
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def idempotent_job_id(scope: str, key: str, body_hash: str) -> str:
    """The id of the job a keyed request creates: the same tenant, key and body always name
    the same job. A request that dies between creating its job and storing its response
    leaves a pending marker; once that lapses, the retry's submit finds the job by this id
    instead of queueing a second one."""
    return hashlib.sha256(f"{scope}\n{key}\n{body_hash}".encode()).hexdigest()[:32]


class IdempotencyStore:
    """Claims, completes and replays idempotency keys in Redis."""

    def __init__(
        self, client: redis.Redis, *, prefix: str, ttl_s: int, pending_s: int = 60
    ) -> None:
        self.client = client
        self.prefix = prefix
        self.ttl_s = ttl_s
        self.pending_s = pending_s

    def _key(self, scope: str, key: str) -> str:
        digest = hashlib.sha256(key.encode()).hexdigest()
        return f"{self.prefix}:idem:{scope}:{digest}"

    def begin(self, scope: str, key: str, body_hash: str) -> StoredResponse | None:
        """Claim `key` (None: go ahead and call `complete`) or return the response to replay."""
        if not key or len(key) > _MAX_KEY_LENGTH:
            raise InvalidIdempotencyKey(
                f"{HEADER} must be 1 to {_MAX_KEY_LENGTH} characters",
                field=_FIELD,
                message="invalid length",
            )
        name = self._key(scope, key)
        pending = json.dumps({"state": "pending", "fingerprint": body_hash})
        for _ in range(3):  # the marker may expire between SET NX and GET
            if self.client.set(name, pending, nx=True, ex=self.pending_s):
                return None
            raw = self.client.get(name)
            if raw is None:
                continue
            record = json.loads(raw)
            if record["fingerprint"] != body_hash:
                raise IdempotencyKeyReused(
                    f"{HEADER} {key!r} was already used with a different body; "
                    "use a new key for a different request",
                    field=_FIELD,
                    message="already used with another body",
                )
            if record["state"] == "pending":
                raise IdempotencyKeyInProgress(
                    f"a request with {HEADER} {key!r} is still being accepted; retry shortly",
                    field=_FIELD,
                    message="in progress",
                )
            return StoredResponse(record["status"], record["body"], record["headers"])
        raise IdempotencyKeyContended(f"{HEADER} {key!r} is contended; retry")

    def complete(self, scope: str, key: str, body_hash: str, response: StoredResponse) -> None:
        """Store the response for replays (for the retention period)."""
        record = {
            "state": "done",
            "fingerprint": body_hash,
            "status": response.status,
            "body": response.body,
            "headers": response.headers,
        }
        self.client.set(self._key(scope, key), json.dumps(record), ex=self.ttl_s)

    def abandon(self, scope: str, key: str) -> None:
        """Release a claim whose request failed, so a retry may run it again."""
        self.client.delete(self._key(scope, key))
