"""The event stream of a job (:mod:`service.events`), driven by a sequence of records."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from service import events
from service.events import event_id, job_events, message


def _job(status: str, fraction: float | None = None, iteration: int | None = None) -> dict:
    progress = {"fraction": fraction, "sigma": None, "iteration": iteration, "objective": None}
    return {"id": "j", "status": status, "attempts": 1, "progress": progress}


def _stream(records: list[dict[str, Any] | None], last: str | None = None) -> list[str]:
    """The stream's messages while the record goes through ``records`` (the last repeats)."""

    async def collect() -> list[str]:
        queue = list(records)

        async def read() -> dict[str, Any] | None:
            return queue.pop(0) if len(queue) > 1 else queue[0]

        async def no_wait(_: float) -> None:
            return None

        return [m async for m in job_events(read, dict, last, sleep=no_wait)]

    return asyncio.run(collect())


def _kinds(stream: list[str]) -> list[tuple[str, str]]:
    found = []
    for text in stream:
        fields = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
        if "event" in fields:
            found.append((fields["event"], json.loads(fields["data"]).get("status")))
    return found


def test_ids_name_states() -> None:
    assert event_id(_job("running", 0.5, 3)) == event_id(_job("running", 0.5, 3))
    assert event_id(_job("running", 0.5, 3)) != event_id(_job("running", 0.5, 4))
    assert event_id(_job("queued")) == "1.queued.-.0"


def test_status_changes_and_progress_until_the_end() -> None:
    records = [
        _job("queued"),
        _job("queued"),
        _job("running"),
        _job("running", 0.5, 2),
        _job("running", 0.5, 2),
        _job("succeeded", 1.0, 9),
    ]
    stream = _stream(records)
    assert stream[0] == f"retry: {events.RETRY_MS}\n\n"
    assert _kinds(stream) == [
        ("status", "queued"),
        ("status", "running"),
        ("progress", "running"),
        ("status", "succeeded"),
    ]


def test_a_reconnect_after_the_final_event_gets_nothing() -> None:
    final = _job("succeeded", 1.0, 9)
    assert _kinds(_stream([final], last=event_id(final))) == []
    assert _kinds(_stream([final], last=event_id(_job("running", 0.5, 2)))) == [
        ("status", "succeeded")
    ]


def test_a_deleted_job_ends_the_stream() -> None:
    assert _kinds(_stream([_job("running"), None])) == [("status", "running"), ("deleted", None)]


def test_quiet_streams_keep_alive_and_end(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter(range(0, 10_000, 10))
    monkeypatch.setattr(events.time, "monotonic", lambda: next(clock))
    stream = _stream([_job("queued")])
    assert ": keep-alive\n\n" in stream
    assert _kinds(stream) == [("status", "queued")]  # ended by STREAM_MAX_S, not the job


def test_messages_are_sse() -> None:
    assert message("status", {"a": 1}, "x") == 'id: x\nevent: status\ndata: {"a":1}\n\n'
