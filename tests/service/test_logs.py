"""A lost Redis is one log line, a reminder now and then, and one line when it is back; not
one line per failed call."""

from __future__ import annotations

import logging
import threading
import time

import pytest
import redis

from service.logs import OutageLog
from service.queue import Claim
from service.worker import _LeaseKeeper

LOGGER = "test.outage"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_one_line_when_lost_reminders_while_lost_one_when_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    clock = Clock()
    outage = OutageLog(logging.getLogger(LOGGER), "redis", remind_every_s=30, clock=clock)
    outage.success()  # nothing was lost: nothing to say
    assert lines(caplog) == [] and not outage.lost
    for i in range(290):  # a failed call every 0.1 s for 29 s
        clock.now = 100.0 + i / 10
        outage.failure(ConnectionError("Connection refused"), "lease of job j")
    (first,) = lines(caplog)
    assert first.startswith("redis lost (lease of job j); retrying") and "refused" in first
    assert outage.lost
    for i in range(290, 490):  # 20 s more: one reminder, at 30 s
        clock.now = 100.0 + i / 10
        outage.failure("refused again", "progress of job j")
    assert len(lines(caplog)) == 2
    assert lines(caplog)[1] == (
        "redis still lost after 30 s, 301 failed calls (progress of job j): refused again"
    )
    clock.now = 149.0
    outage.success()
    outage.success()
    assert len(lines(caplog)) == 3
    assert lines(caplog)[2] == "redis back after 49.0 s (490 failed calls)"
    assert not outage.lost
    outage.failure("refused", "")  # a new outage: a new first line, without a context
    assert lines(caplog)[3].startswith("redis lost; retrying")


def test_threads_sharing_one_log_report_one_outage(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    outage = OutageLog(logging.getLogger(LOGGER), remind_every_s=60)

    def fail() -> None:
        for _ in range(200):
            outage.failure("refused")

    threads = [threading.Thread(target=fail) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    outage.success()
    assert [line.split(" ", 2)[1] for line in lines(caplog)] == ["lost;", "back"]
    assert "(1600 failed calls)" in lines(caplog)[1]


def test_the_reminder_period_must_be_positive() -> None:
    with pytest.raises(ValueError):
        OutageLog(logging.getLogger(LOGGER), remind_every_s=0)


class _DeadQueue:
    """A queue whose Redis is gone: every call fails."""

    def __init__(self) -> None:
        self.calls = 0

    def _fail(self, *args: object) -> None:
        self.calls += 1
        raise redis.ConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused.")

    renew = worker_heartbeat = reap = stop_reason = _fail


def test_the_lease_thread_logs_an_outage_once(caplog: pytest.LogCaptureFixture) -> None:
    """The lease thread polled (and logged) every 0.1 s while Redis was down."""
    caplog.set_level(logging.INFO, "service.worker")
    queue = _DeadQueue()
    claim = Claim(job_id="j", attempt=1, entry_id="1-0", consumer="w", dataset_id="d", params={})
    outage = OutageLog(logging.getLogger("service.worker"))
    with _LeaseKeeper(queue, claim, heartbeat_s=0.02, poll_s=0.01, outage=outage):  # type: ignore[arg-type]
        time.sleep(0.5)
    assert queue.calls >= 10
    messages = [r.getMessage() for r in caplog.records if r.name == "service.worker"]
    assert len(messages) == 1 and messages[0].startswith("redis lost (lease of job j)")
