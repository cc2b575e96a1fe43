"""The one request/response layer of the sync and async clients.

Every operation of the API is written once, as a generator that yields *steps* — an HTTP
:class:`Call` to make, a :class:`Sleep`, or a stream to :class:`Open`, read line by line
(:class:`ReadLine`) and :class:`Close` — and receives each step's outcome (an
``httpx.Response``, a line, or the ``httpx.TransportError`` it raised). A driver runs it:
:class:`rbfkm_client.Client` with ``httpx.Client`` and ``time.sleep``,
:class:`rbfkm_client.AsyncClient` with ``httpx.AsyncClient`` and ``asyncio.sleep``. So
retries, back-off, error decoding, polling and paging exist once, whatever the I/O.
"""

from __future__ import annotations

import random
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, Union

import httpx

from rbfkm_client.errors import ApiError, ConnectionFailed

T = TypeVar("T")


@dataclass(frozen=True)
class Call:
    """One HTTP request: ``path`` is relative to the service's URL (an absolute URL for
    ``external`` calls, which carry no credentials)."""

    method: str
    path: str
    params: dict[str, Any] | None = None
    json: Any = None
    content: bytes | Path | None = None
    headers: dict[str, str] = field(default_factory=dict)
    external: bool = False


@dataclass(frozen=True)
class Sleep:
    """Wait this long before the next step."""

    seconds: float


@dataclass(frozen=True)
class Open:
    """Make ``call`` and keep its body unread, to read it line by line: the reply is a
    :class:`Stream` (or the transport error)."""

    call: Call


@dataclass(frozen=True)
class Stream:
    """An open response and the iterator (sync or async) of its lines."""

    response: httpx.Response
    lines: Any


@dataclass(frozen=True)
class ReadLine:
    """The next line of an open stream: a str, None at its end, or the transport error."""

    stream: Stream


@dataclass(frozen=True)
class Close:
    """Close an open stream."""

    stream: Stream


Step = Union[Call, Sleep, Open, ReadLine, Close]  # noqa: UP007 (a runtime alias)
#: An operation: yields steps, receives responses (or transport errors), returns a T.
Operation = Generator[Step, Any, T]

#: Statuses that say "try again later": rate limited, overloaded, a proxy without upstream.
RETRY_STATUSES = frozenset({429, 502, 503, 504})
#: A 409 whose problem type says the same (an idempotency key still being accepted).
RETRY_KINDS = frozenset({"urn:rbfkm:problem:idempotency-key-in-progress"})


@dataclass(frozen=True)
class Retry:
    """How often and how patiently a call is retried on a connection error or a
    "try again later" answer: ``attempts`` tries in all, waiting ``backoff_s`` doubled
    each time (with jitter, at most ``max_delay_s``), or the server's ``Retry-After``."""

    attempts: int = 5
    backoff_s: float = 0.25
    max_delay_s: float = 10.0

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait after the ``attempt``-th (from 0) failed try."""
        exponential = min(self.max_delay_s, self.backoff_s * 2**attempt)
        jittered = exponential * (0.5 + random.random() / 2)
        return max(jittered, min(retry_after or 0.0, self.max_delay_s))


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return float(response.headers["retry-after"])
    except (KeyError, ValueError):
        return None


def _retryable(response: httpx.Response) -> bool:
    if response.status_code in RETRY_STATUSES:
        return True
    if response.status_code == 409:
        try:
            return response.json().get("type") in RETRY_KINDS
        except ValueError:
            return False
    return False


def send(call: Call, retry: Retry) -> Operation[httpx.Response]:
    """Make ``call``, retrying as ``retry`` says; the response, or ApiError for an error
    status, ConnectionFailed once the retries are spent on connection errors.

    Only safe calls are retried blindly: GETs, and POSTs the service deduplicates (an
    upload by its bytes, a job by its ``Idempotency-Key``, a cancel or a predict that
    change nothing twice). Callers give POST /v1/jobs its key.
    """
    for attempt in range(retry.attempts):
        last = attempt == retry.attempts - 1
        reply = yield call
        if isinstance(reply, httpx.TransportError):
            if last:
                raise ConnectionFailed(
                    f"{call.method} {call.path}: {type(reply).__name__}: {reply} "
                    f"(after {retry.attempts} tries)"
                ) from reply
            yield Sleep(retry.delay(attempt))
            continue
        if not last and _retryable(reply):
            yield Sleep(retry.delay(attempt, _retry_after(reply)))
            continue
        if reply.status_code >= 400:
            raise ApiError.from_response(reply)
        return reply
    raise AssertionError("unreachable: the last attempt returns or raises")
