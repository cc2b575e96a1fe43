"""Webhooks: queued by the transition that ends a job, sent, signed, retried and recorded,
against the real Redis and a real HTTP receiver on loopback."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from fastapi.testclient import TestClient
from rbfkm_client import verify_webhook

from service.app import create_app
from service.queue import JobQueue
from service.settings import Settings
from service.webhooks import WebhookSender, backoff_s, message_id
from tests.service.conftest import (
    WEBHOOK_SECRET,
    Receiver,
    assert_problem,
    blobs,
    live_server,
    make_settings,
    npy_bytes,
    private_db,
    upload,
    wait_for,
)


@pytest.fixture
def hook_settings(settings: Settings) -> Settings:
    return settings.model_copy(
        update={
            "url_allowlist": ["127.0.0.1"],
            "webhook_secrets": {"*": WEBHOOK_SECRET},
            "webhook_backoff_s": 0.01,
            "webhook_max_attempts": 3,
        }
    )


@pytest.fixture
def queue(redis_client: redis.Redis, hook_settings: Settings) -> JobQueue:
    return JobQueue.from_settings(redis_client, hook_settings)


def due(queue: JobQueue) -> list[str]:
    return [m.decode() for m in queue.client.zrange(f"{queue.prefix}:webhooks:due", 0, -1)]


def run_job(queue: JobQueue, url: str | None, end: str = "succeed") -> str:
    params: dict[str, Any] = {"n_clusters": 2}
    if url is not None:
        params["callback_url"] = url
    job_id = queue.submit("d1", params)["id"]
    claim = queue.claim("w1", block_ms=10)
    assert claim is not None
    if end == "succeed":
        assert queue.succeed(claim, {"stored_bytes": 0})
    else:
        queue.fail(claim, "bad input", retryable=False)
    return job_id


def send_all(sender: WebhookSender, rounds: int = 10) -> None:
    """Send until nothing is due (waiting out the short back-off of the tests)."""
    with httpx.Client(timeout=5) as http:
        for _ in range(rounds):
            sender.send_due(http)
            if not due(sender.queue):
                return
            time.sleep(0.05)


def test_an_ended_job_with_a_callback_is_due_once(queue: JobQueue) -> None:
    plain = run_job(queue, None)
    hooked = run_job(queue, "http://127.0.0.1:9/hook", end="fail")
    assert due(queue) == [hooked]
    assert "webhook" not in queue.get(plain)
    assert queue.get(hooked)["webhook"] == {
        "url": "http://127.0.0.1:9/hook",
        "deliveries": [],
        "delivered": False,
    }
    canceled = queue.submit("d1", {"callback_url": "http://127.0.0.1:9/x"})["id"]
    queue.cancel(canceled)
    queue.cancel(canceled)  # a second cancel ends nothing
    assert sorted(due(queue)) == sorted([hooked, canceled])


def test_the_webhook_is_signed_retried_and_recorded(
    queue: JobQueue, hook_settings: Settings
) -> None:
    with Receiver(statuses=(500, 503)) as receiver:
        job_id = run_job(queue, receiver.url)
        send_all(WebhookSender(queue, hook_settings))
    assert len(receiver.received) == 3
    ids = {headers["webhook-id"] for headers, _ in receiver.received}
    assert ids == {f"job_{job_id}_succeeded"}  # one id: receivers deduplicate by it
    headers, body = receiver.received[-1]
    event = verify_webhook(WEBHOOK_SECRET, headers, body)
    assert event["type"] == "job.succeeded"
    assert event["data"]["id"] == job_id and event["data"]["status"] == "succeeded"
    assert "webhook" not in event["data"]
    record = queue.get(job_id)["webhook"]
    assert record["delivered"] is True
    assert [d.get("status_code") for d in record["deliveries"]] == [500, 503, 200]
    assert [d["attempt"] for d in record["deliveries"]] == [1, 2, 3]
    assert due(queue) == []


def test_tries_stop_at_the_limit(queue: JobQueue, hook_settings: Settings) -> None:
    with Receiver(statuses=(500,) * 10) as receiver:
        job_id = run_job(queue, receiver.url)
        send_all(WebhookSender(queue, hook_settings))
    record = queue.get(job_id)["webhook"]
    assert len(receiver.received) == 3 == len(record["deliveries"])
    assert record["delivered"] is False and due(queue) == []


def test_a_host_that_is_not_allowed_is_recorded_as_an_error(
    queue: JobQueue, hook_settings: Settings
) -> None:
    strict = hook_settings.model_copy(update={"url_allowlist": [], "webhook_max_attempts": 1})
    with Receiver() as receiver:
        job_id = run_job(queue, receiver.url)
        send_all(WebhookSender(queue, strict))
    assert receiver.received == []
    (delivery,) = queue.get(job_id)["webhook"]["deliveries"]
    assert "loopback address" in delivery["error"]


def test_a_sender_that_died_mid_delivery_is_replaced_after_its_lease(
    queue: JobQueue, hook_settings: Settings
) -> None:
    with Receiver() as receiver:
        job_id = run_job(queue, receiver.url)
        dead = WebhookSender(queue, hook_settings)
        dead.lease_s = 0.2
        # It took the job (and died before sending): nobody else may take it meanwhile.
        assert dead._take(keys=[dead.due], args=[f"{time.time():.6f}", dead.lease_s])
        other = WebhookSender(queue, hook_settings)
        with httpx.Client() as http:
            assert other.send_due(http) == 0
            time.sleep(0.3)
            assert other.send_due(http) == 1
    assert len(receiver.received) == 1
    assert queue.get(job_id)["webhook"]["delivered"] is True


def test_a_delivered_record_is_not_sent_again(queue: JobQueue, hook_settings: Settings) -> None:
    with Receiver() as receiver:
        job_id = run_job(queue, receiver.url)
        sender = WebhookSender(queue, hook_settings)
        send_all(sender)
        # A sender that recorded the delivery but died before dropping the job from the set.
        queue.client.zadd(sender.due, {job_id: 0})
        send_all(sender)
    assert len(receiver.received) == 1


def test_a_deleted_job_has_no_webhook(queue: JobQueue, hook_settings: Settings) -> None:
    with Receiver() as receiver:
        job_id = run_job(queue, receiver.url)
        queue.delete(job_id)
        send_all(WebhookSender(queue, hook_settings))
    assert receiver.received == [] and due(queue) == []
    assert not queue.client.exists(queue.job_key(job_id))


def test_backoff_doubles_up_to_an_hour() -> None:
    assert [backoff_s(n, 5.0) for n in (1, 2, 3)] == [5.0, 10.0, 20.0]
    assert backoff_s(40, 5.0) == 3600.0
    assert message_id({"id": "j", "status": "failed"}) == "job_j_failed"


def test_the_api_refuses_callbacks_it_could_not_send(hook_settings: Settings) -> None:
    strict = hook_settings.model_copy(update={"url_allowlist": []})
    unsigned = hook_settings.model_copy(update={"webhook_secrets": {"other": WEBHOOK_SECRET}})
    for config, url, kind, message in (
        (strict, "http://127.0.0.1:9/hook", "unsafe-url", "loopback address"),
        (strict, "http://169.254.169.254/", "unsafe-url", "link-local address"),
        (hook_settings, "http://no-such-host.invalid/", "unsafe-url", "does not resolve"),
        (unsigned, "http://127.0.0.1:9/hook", "not-configured", "no webhook secret"),
    ):
        with TestClient(create_app(config)) as client:
            dataset = upload(client)
            body = {"dataset_id": dataset["id"], "n_clusters": 2, "callback_url": url}
            problem = assert_problem(client.post("/v1/jobs", json=body), 422)
            assert problem["type"].endswith(kind)
            assert problem["errors"] == [{"field": "body.callback_url", "message": message}]
    with TestClient(create_app(hook_settings)) as client:
        dataset = upload(client)
        body = {"dataset_id": dataset["id"], "n_clusters": 2, "callback_url": url}
        job = client.post("/v1/jobs", json=body).json()
        assert job["params"]["callback_url"] == url
        assert job["webhook"] == {"url": url, "deliveries": [], "delivered": False}
        assert client.get(f"/v1/jobs/{job['id']}").json()["webhook"] == job["webhook"]


def _final_events(base_url: str, job_id: str, until: float) -> list[dict[str, Any]]:
    """Follow the job's event stream to its end, reconnecting with Last-Event-ID (as a
    client does), then once more after the end: the status events received, in order."""
    statuses, last = [], None
    with httpx.Client(base_url=base_url, timeout=30) as http:
        while time.monotonic() < until:
            headers = {"Last-Event-ID": last} if last else {}
            with http.stream("GET", f"/v1/jobs/{job_id}/events", headers=headers) as stream:
                kind = ident = None
                for line in stream.iter_lines():
                    if line.startswith("id: "):
                        ident = line[4:]
                    elif line.startswith("event: "):
                        kind = line[7:]
                    elif line.startswith("data: ") and kind == "status":
                        statuses.append(json.loads(line[6:]))
                        last = ident
            if statuses and statuses[-1]["status"] in ("succeeded", "failed", "canceled"):
                # One reconnect after the end: the final event must not come again.
                headers = {"Last-Event-ID": last}
                with http.stream("GET", f"/v1/jobs/{job_id}/events", headers=headers) as again:
                    assert '"status"' not in again.read().decode(), "final event sent twice"
                return statuses
    raise AssertionError(f"no final event for job {job_id}")


@pytest.mark.slow
def test_a_worker_killed_mid_job_still_ends_it_with_one_event_and_one_webhook(
    redis_server: str, tmp_path: Path
) -> None:
    """Real uvicorn, Redis and two spawned workers: the worker running the job is killed
    with SIGKILL; the other takes the job over once the lease lapses and finishes it. The
    final event reaches an SSE client once, and the webhook (whose receiver fails its first
    try) is delivered once, under one webhook-id, every try recorded on the job."""
    with private_db(redis_server, 7) as url:
        settings = make_settings(
            url,
            tmp_path / "data",
            key_prefix="hooks",
            lease_s=2.0,
            workers=2,
            threads_per_worker=1,
            url_allowlist=["127.0.0.1"],
            webhook_secrets={"*": WEBHOOK_SECRET},
            webhook_backoff_s=0.2,
        )
        with (
            Receiver(statuses=(500,)) as receiver,
            live_server(settings, tmp_path / "tmp", workers=2) as base_url,
            httpx.Client(base_url=base_url, timeout=60) as http,
        ):
            wait_for(lambda: http.get("/readyz").status_code == 200, 120, "workers")
            X = blobs(40000, 8, 16, seed=1)
            dataset = http.post(
                "/v1/datasets", content=npy_bytes(X), headers={"Content-Type": "application/x-npy"}
            ).json()
            body = {
                "dataset_id": dataset["id"],
                "n_clusters": 32,
                "cooling": 0.97,
                "random_state": 0,
                "callback_url": receiver.url,
            }
            job = http.post("/v1/jobs", json=body).json()
            store = redis.Redis.from_url(url)
            key = f"hooks:job:{job['id']}"
            consumer = wait_for(lambda: store.hget(key, "consumer"), 60, "the job to run")
            pid = int(consumer.decode().split("-")[-2])
            os.kill(pid, signal.SIGKILL)
            print(f"killed worker pid {pid} running job {job['id']} (attempt 1)")
            statuses = _final_events(base_url, job["id"], time.monotonic() + 240)
            final = wait_for(
                lambda: (
                    (j := http.get(f"/v1/jobs/{job['id']}").json())["webhook"]["delivered"] and j
                ),
                60,
                "the webhook",
            )
            time.sleep(1.0)  # room for a duplicate to arrive, were there one
            store.close()
    finals = [s for s in statuses if s["status"] in ("succeeded", "failed", "canceled")]
    assert [s["status"] for s in finals] == ["succeeded"]
    assert final["attempts"] == 2, "the job was not taken over: the kill came too late"
    deliveries = final["webhook"]["deliveries"]
    print("events:", [s["status"] for s in statuses], "webhook tries:", deliveries)
    assert [d.get("status_code") for d in deliveries] == [500, 200]
    assert len(receiver.received) == 2
    assert {h["webhook-id"] for h, _ in receiver.received} == {f"job_{job['id']}_succeeded"}
    event = verify_webhook(WEBHOOK_SECRET, *receiver.received[-1])
    assert event["data"]["status"] == "succeeded" and event["data"]["attempts"] == 2
