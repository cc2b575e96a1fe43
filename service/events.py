"""Server-sent events of a job: its status changes and progress, for clients that would
otherwise poll ``GET /v1/jobs/{id}``.

The stream follows the job's record in Redis (one read every :data:`POLL_S`): whenever
the record shows a new state it sends an event whose ``data`` is the job, as
``GET /v1/jobs/{id}`` shows it. ``event: status`` when the status changed, ``event:
progress`` when only the progress did; the stream ends after the event of a finished job
(or ``event: deleted`` when the job is gone), and after :data:`STREAM_MAX_S` seconds at
most (proxies drop long connections; SSE clients reconnect by themselves).

An event's ``id`` names the state it reports (attempt, status, iteration, progress), so a
client that reconnects with ``Last-Event-ID`` is sent the job's state only if it differs
from the last one it saw: a finished job's final event reaches a client once, however
often it reconnects. Intermediate progress between two reads is not replayed (the record
keeps the latest only); status changes are never skipped as such, since every event
carries the whole job.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from service.jobs import TERMINAL

#: Seconds between two reads of the job's record.
POLL_S = 0.2
#: Seconds of silence after which a comment line keeps the connection open.
KEEPALIVE_S = 15.0
#: Seconds a stream lasts at most (the client reconnects, with Last-Event-ID).
STREAM_MAX_S = 300.0
#: Milliseconds a client waits before reconnecting (the stream's ``retry:`` field).
RETRY_MS = 1000


def event_id(job: dict[str, Any]) -> str:
    """The id of the event that reports ``job``'s state: equal ids, equal states."""
    progress = job.get("progress") or {}
    fraction = progress.get("fraction")
    permille = "-" if fraction is None else str(round(1000 * fraction))
    iteration = progress.get("iteration")
    return ".".join(
        (str(job.get("attempts", 0)), str(job["status"]), permille, str(iteration or 0))
    )


def _status_of(ident: str | None) -> str | None:
    parts = (ident or "").split(".")
    return parts[1] if len(parts) == 4 else None


def message(kind: str, data: dict[str, Any] | None = None, ident: str | None = None) -> str:
    """One event in the text/event-stream format."""
    lines = [] if ident is None else [f"id: {ident}"]
    lines.append(f"event: {kind}")
    lines.append(f"data: {json.dumps(data or {}, separators=(',', ':'))}")
    return "\n".join(lines) + "\n\n"


async def job_events(
    read: Callable[[], Awaitable[dict[str, Any] | None]],
    render: Callable[[dict[str, Any]], dict[str, Any]],
    last_event_id: str | None = None,
    sleep: Callable[[float], Awaitable[Any]] | None = None,
) -> AsyncIterator[str]:
    """The stream of a job: ``read`` fetches its record (None once deleted), ``render``
    makes it the body clients know; starts after ``last_event_id``."""
    pause = sleep or asyncio.sleep
    yield f"retry: {RETRY_MS}\n\n"
    seen = last_event_id
    started = quiet_since = time.monotonic()
    while time.monotonic() - started < STREAM_MAX_S:
        job = await read()
        if job is None:
            yield message("deleted")
            return
        ident = event_id(job)
        if ident != seen:
            kind = "status" if job["status"] != _status_of(seen) else "progress"
            yield message(kind, render(job), ident)
            seen, quiet_since = ident, time.monotonic()
        elif time.monotonic() - quiet_since >= KEEPALIVE_S:
            yield ": keep-alive\n\n"
            quiet_since = time.monotonic()
        if job["status"] in TERMINAL:
            return
        await pause(POLL_S)
