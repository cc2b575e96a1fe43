"""Retries, back-off and idempotency keys, through a real TCP proxy that breaks
connections in front of the live service."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import httpx
import pytest
from rbfkm_client import Client, ConnectionFailed, Retry
from rbfkm_client.protocol import Call, Sleep, send

from tests.rbfkm_client.conftest import KEY, Live, X

FAST = Retry(attempts=4, backoff_s=0.01, max_delay_s=0.05)


def _pump(source: socket.socket, target: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            target.sendall(data)
    with contextlib.suppress(OSError):
        target.shutdown(socket.SHUT_WR)


class FlakyProxy:
    """Forwards TCP connections to ``upstream``; each new connection takes the next fault
    of ``faults``: ``"refuse"`` closes it unanswered, ``"lose-reply"`` forwards the
    request and closes it once the service has answered, without passing the answer on;
    when none is left, it forwards both ways."""

    def __init__(self, upstream: str, faults: list[str]) -> None:
        host, port = httpx.URL(upstream).host, httpx.URL(upstream).port
        self.upstream = (host, port)
        self.faults = list(faults)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.listener.accept()
                fault = self.faults.pop(0) if self.faults else None
                threading.Thread(target=self._handle, args=(conn, fault), daemon=True).start()

    def _handle(self, conn: socket.socket, fault: str | None) -> None:
        if fault == "refuse":
            conn.close()
            return
        upstream = socket.create_connection(self.upstream)
        if fault == "lose-reply":
            upstream.sendall(conn.recv(1 << 20))
            upstream.recv(1)  # the service has handled the request and answers
            conn.close()
            upstream.close()
            return
        threading.Thread(target=_pump, args=(upstream, conn), daemon=True).start()
        _pump(conn, upstream)

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def proxy(live: Live) -> Iterator[FlakyProxy]:
    flaky = FlakyProxy(live.url, [])
    yield flaky
    flaky.close()


def test_connection_errors_are_retried(proxy: FlakyProxy) -> None:
    proxy.faults[:] = ["refuse", "refuse"]
    with Client(proxy.url, KEY, retry=FAST) as client:
        assert client.datasets(limit=1) is not None
    assert proxy.faults == []


def test_a_lost_reply_to_a_job_request_does_not_start_a_second_job(
    proxy: FlakyProxy, live: Live
) -> None:
    with Client(live.url, KEY) as direct:
        dataset = direct.upload(X)
        before = {job.id for job in direct.jobs()}
        proxy.faults[:] = ["lose-reply"]
        with Client(proxy.url, KEY, retry=FAST) as client:
            job = client.fit(dataset, 3, wait=False, random_state=7)
        assert proxy.faults == []
        started = {listed.id for listed in direct.jobs()} - before
        # The service queued the job on the first try; the retry, with the same
        # Idempotency-Key, was answered with that job rather than a second one.
        assert started == {job.id}
        direct.wait(job)


def test_retries_run_out_with_a_connection_error(proxy: FlakyProxy) -> None:
    proxy.faults[:] = ["refuse"] * 10
    with Client(proxy.url, KEY, retry=FAST) as client, pytest.raises(ConnectionFailed) as raised:
        client.datasets()
    assert "after 4 tries" in str(raised.value)


def _replies(call: Call, replies: list[object]) -> list[object]:
    """The steps ``send`` takes when its calls are answered with ``replies``."""
    operation, steps = send(call, FAST), []
    reply = None
    with contextlib.suppress(StopIteration):
        while True:
            step = operation.send(reply)
            steps.append(step)
            reply = replies.pop(0) if isinstance(step, Call) else None
    return steps


def test_a_429_or_503_is_retried_after_its_retry_after() -> None:
    call = Call("GET", "/v1/jobs")
    request = httpx.Request("GET", "http://service/v1/jobs")
    busy = httpx.Response(503, headers={"Retry-After": "0.04"}, request=request)
    limited = httpx.Response(429, request=request)
    steps = _replies(call, [busy, limited, httpx.Response(200, json={}, request=request)])
    assert [type(step).__name__ for step in steps] == ["Call", "Sleep", "Call", "Sleep", "Call"]
    assert isinstance(steps[1], Sleep) and steps[1].seconds >= 0.04


def test_the_back_off_doubles_up_to_its_cap() -> None:
    retry = Retry(backoff_s=1.0, max_delay_s=5.0)
    for attempt, ceiling in enumerate([1, 2, 4, 5, 5]):
        assert ceiling / 2 <= retry.delay(attempt) <= ceiling
    assert retry.delay(0, retry_after=3) == 3
