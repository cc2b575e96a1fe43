"""Prometheus metrics: the HTTP counters and histograms, the queue collector against a real
Redis, and what `/metrics` reports."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families

from service.app import create_app
from service.embedded import free_port
from service.jobs import JobStatus
from service.metrics import (
    JOB_DURATION_BUCKETS,
    HttpMetrics,
    MetricsMiddleware,
    QueueCollector,
    _seconds,
    render,
)
from service.queue import JobQueue
from service.settings import Settings
from tests.service.conftest import make_settings, upload

T0 = "2026-01-01T00:00:00+00:00"


def _at(seconds: float) -> str:
    return f"2026-01-01T00:00:{seconds:06.3f}+00:00"


@pytest.fixture
def queue(redis_client: redis.Redis, settings: Settings) -> JobQueue:
    return JobQueue.from_settings(redis_client, settings)


def _samples(families: Iterable[Metric]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample's value by its name and its sorted labels."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in families
        for s in family.samples
    }


def _finish(queue: JobQueue, status: JobStatus) -> None:
    """Claim the oldest queued job and end it (by hand) in `status`."""
    claim = queue.claim("w", block_ms=100)
    assert claim is not None
    if status == JobStatus.SUCCEEDED:
        assert queue.succeed(claim, {"attempt": 1})
    else:
        assert queue.fail(claim, "boom", retryable=False) == status


# ---- HTTP metrics ------------------------------------------------------------------------


def test_observe_counts_and_times_a_request() -> None:
    registry = CollectorRegistry()
    metrics = HttpMetrics(registry)
    metrics.observe("GET", "/v1/jobs/{job_id}", 200, 0.003)
    metrics.observe("GET", "/v1/jobs/{job_id}", 200, 0.3)
    metrics.observe("GET", "/v1/jobs/{job_id}", 404, 0.001)
    route = {"method": "GET", "route": "/v1/jobs/{job_id}"}
    get = registry.get_sample_value
    assert get("rbfkm_http_requests_total", {**route, "status": "200"}) == 2
    assert get("rbfkm_http_requests_total", {**route, "status": "404"}) == 1
    assert get("rbfkm_http_request_duration_seconds_count", route) == 3
    assert get("rbfkm_http_request_duration_seconds_sum", route) == pytest.approx(0.304)
    assert get("rbfkm_http_request_duration_seconds_bucket", {**route, "le": "0.001"}) == 1
    assert get("rbfkm_http_request_duration_seconds_bucket", {**route, "le": "0.005"}) == 2
    assert get("rbfkm_http_request_duration_seconds_bucket", {**route, "le": "+Inf"}) == 3


def test_two_apps_keep_separate_registries(settings: Settings) -> None:
    first, second = create_app(settings), create_app(settings)
    assert first.state.registry is not second.state.registry
    with TestClient(first) as client:
        client.get("/healthz")
    labels = {"method": "GET", "route": "/healthz", "status": "200"}
    assert first.state.registry.get_sample_value("rbfkm_http_requests_total", labels) == 1
    assert second.state.registry.get_sample_value("rbfkm_http_requests_total", labels) is None


@pytest.fixture
def bare() -> Iterator[tuple[TestClient, CollectorRegistry]]:
    """A plain FastAPI app behind the middleware, with a route that raises."""
    registry = CollectorRegistry()
    app = FastAPI()

    @app.get("/items/{item_id}")
    def item(item_id: int) -> dict[str, int]:
        return {"id": item_id}

    @app.get("/boom")
    def boom() -> None:
        raise RuntimeError("boom")

    app.add_middleware(MetricsMiddleware, metrics=HttpMetrics(registry))
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client, registry


def test_the_middleware_labels_by_route_template(bare: tuple[TestClient, Any]) -> None:
    client, registry = bare
    for item_id in (1, 2, 3):
        client.get(f"/items/{item_id}")
    client.get("/items/x")
    client.get("/nowhere")
    samples = _samples(registry.collect())
    count = "rbfkm_http_requests_total"
    template = (("method", "GET"), ("route", "/items/{item_id}"))
    assert samples[(count, (*template, ("status", "200")))] == 3
    assert samples[(count, (*template, ("status", "422")))] == 1
    assert samples[(count, (("method", "GET"), ("route", "unmatched"), ("status", "404")))] == 1
    assert not any("/items/1" in str(key) for key in samples), "raw paths are not labels"


def test_an_exception_counts_as_a_500(bare: tuple[TestClient, Any]) -> None:
    client, registry = bare
    assert client.get("/boom").status_code == 500
    labels = {"method": "GET", "route": "/boom", "status": "500"}
    assert registry.get_sample_value("rbfkm_http_requests_total", labels) == 1


def test_lifespan_events_are_not_requests(bare: tuple[TestClient, Any]) -> None:
    _, registry = bare  # the client has started the app: a lifespan scope went through
    assert registry.get_sample_value("rbfkm_http_requests_total", {}) is None
    assert [s for s in _samples(registry.collect()) if s[0] == "rbfkm_http_requests_total"] == []


# ---- job durations and the queue collector -------------------------------------------------


def test_seconds_between_two_stamps() -> None:
    assert _seconds(T0, _at(2.5)) == 2.5
    assert _seconds(_at(3), T0) == 0.0, "a clock step back is not a negative duration"
    assert _seconds(None, T0) is None and _seconds(T0, "") is None
    assert _seconds("yesterday", T0) is None


def test_durations_fall_in_their_buckets() -> None:
    finished = [
        {"status": "succeeded", "started_at": T0, "finished_at": _at(0.05)},
        {"status": "succeeded", "started_at": T0, "finished_at": _at(3)},
        {"status": "succeeded", "started_at": T0, "finished_at": None},
        {"status": "failed", "started_at": T0, "finished_at": _at(20)},
    ]
    family = QueueCollector._durations(finished)
    values = _samples([family])

    def bucket(status: str, le: str) -> float:
        return values[("rbfkm_job_duration_seconds_bucket", (("le", le), ("status", status)))]

    assert [bucket("succeeded", le) for le in ("0.1", "2", "5", "+Inf")] == [1, 1, 2, 2]
    assert [bucket("failed", le) for le in ("10", "30", "+Inf")] == [0, 1, 1]
    count = "rbfkm_job_duration_seconds_count"
    assert values[(count, (("status", "succeeded"),))] == 2
    assert values[("rbfkm_job_duration_seconds_sum", (("status", "failed"),))] == 20
    labels = {s.labels["le"] for s in family.samples if s.name.endswith("_bucket")}
    assert len(labels) == len(JOB_DURATION_BUCKETS)


def test_the_collector_reads_the_queue_at_scrape_time(queue: JobQueue) -> None:
    registry = CollectorRegistry()
    registry.register(QueueCollector(lambda: queue))
    get = registry.get_sample_value
    assert get("rbfkm_queue_depth") == 0 and get("rbfkm_workers_alive") == 0
    for _ in range(3):
        queue.submit("ds", {"n_clusters": 2})
    queue.register_worker("w")
    assert get("rbfkm_queue_depth") == 3 and get("rbfkm_workers_alive") == 1
    assert get("rbfkm_jobs", {"status": "queued"}) == 3
    _finish(queue, JobStatus.SUCCEEDED)
    _finish(queue, JobStatus.FAILED)
    assert get("rbfkm_queue_depth") == 1
    expected = {"queued": 1, "running": 0, "succeeded": 1, "failed": 1, "canceled": 0}
    assert {s.value: get("rbfkm_jobs", {"status": s.value}) for s in JobStatus} == expected
    for status in ("succeeded", "failed"):
        assert get("rbfkm_job_duration_seconds_count", {"status": status}) == 1
        assert get("rbfkm_job_duration_seconds_bucket", {"status": status, "le": "+Inf"}) == 1


def test_the_collector_leaves_its_series_out_while_redis_is_down(tmp_path: Path) -> None:
    dead = make_settings(f"redis://127.0.0.1:{free_port()}/0", tmp_path)
    client = redis.Redis.from_url(dead.redis_url, socket_connect_timeout=1)
    collector = QueueCollector(lambda: JobQueue.from_settings(client, dead))
    assert list(collector.collect()) == []
    registry = CollectorRegistry()
    registry.register(collector)
    assert b"rbfkm_queue_depth" not in render(registry)


# ---- /metrics ------------------------------------------------------------------------------


def test_metrics_count_requests_by_route_template(client: TestClient) -> None:
    meta = upload(client)
    client.get(f"/v1/datasets/{meta['id']}")
    client.get("/v1/datasets/nope")
    text = client.get("/metrics").text
    assert 'route="/v1/datasets/{dataset_id}",status="200"' in text
    assert 'route="/v1/datasets/{dataset_id}",status="404"' in text
    assert "rbfkm_http_request_duration_seconds_bucket" in text
    assert "rbfkm_queue_depth 0.0" in text
    assert 'rbfkm_jobs{status="queued"} 0.0' in text
    assert "rbfkm_job_duration_seconds_bucket" in text


def test_metrics_report_the_jobs_in_redis(client: TestClient, queue: JobQueue) -> None:
    meta = upload(client)
    for _ in range(3):
        client.post("/v1/jobs", json={"dataset_id": meta["id"], "n_clusters": 2})
    _finish(queue, JobStatus.SUCCEEDED)
    queue.register_worker("w-live")
    scraped = _samples(text_string_to_metric_families(client.get("/metrics").text))
    jobs = {s.value: scraped[("rbfkm_jobs", (("status", s.value),))] for s in JobStatus}
    assert jobs == {"queued": 2, "running": 0, "succeeded": 1, "failed": 0, "canceled": 0}
    assert scraped[("rbfkm_queue_depth", ())] == 2
    assert scraped[("rbfkm_workers_alive", ())] == 1
    assert scraped[("rbfkm_job_duration_seconds_count", (("status", "succeeded"),))] == 1
    accepted = (("method", "POST"), ("route", "/v1/jobs"), ("status", "202"))
    assert scraped[("rbfkm_http_requests_total", accepted)] == 3
