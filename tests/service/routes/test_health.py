"""`/healthz`, `/readyz` and `/metrics`: probes that answer while Redis or the workers are down."""

from __future__ import annotations

from pathlib import Path

import redis
from fastapi.testclient import TestClient

from service.app import create_app
from service.embedded import free_port
from service.metrics import CONTENT_TYPE
from service.queue import JobQueue
from service.settings import Settings
from tests.service.conftest import make_settings


def test_healthz_and_readyz_without_workers(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 503 and ready.json()["workers"] == 0
    assert ready.json() == {
        "status": "unavailable",
        "redis": True,
        "workers": 0,
        "detail": "no worker is alive",
    }


def test_readyz_counts_a_live_worker(client: TestClient, settings: Settings) -> None:
    queue = JobQueue.from_settings(redis.Redis.from_url(settings.redis_url), settings)
    queue.register_worker("w-test")
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["workers"] == 1


def test_readyz_is_503_again_once_the_worker_leaves(client: TestClient, settings: Settings) -> None:
    queue = JobQueue.from_settings(redis.Redis.from_url(settings.redis_url), settings)
    queue.register_worker("w-a")
    queue.register_worker("w-b")
    ready = client.get("/readyz").json()
    assert (ready["status"], ready["redis"], ready["workers"]) == ("ok", True, 2)
    queue.unregister_worker("w-a")
    queue.unregister_worker("w-b")
    assert client.get("/readyz").status_code == 503


def test_healthz_stays_up_without_redis(tmp_path: Path) -> None:
    dead = make_settings(f"redis://127.0.0.1:{free_port()}/0", tmp_path)
    with TestClient(create_app(dead), raise_server_exceptions=False) as client:
        assert client.get("/healthz").status_code == 200
        ready = client.get("/readyz")
        assert ready.status_code == 503 and ready.json()["redis"] is False
        assert ready.json()["detail"].startswith("redis: ")
        assert client.get("/metrics").status_code == 200


def test_metrics_are_prometheus_text(client: TestClient) -> None:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"] == CONTENT_TYPE
    assert "# TYPE rbfkm_queue_depth gauge" in response.text


def test_probes_need_no_api_key(secured: TestClient) -> None:
    for path in ("/healthz", "/metrics", "/openapi.json"):
        assert secured.get(path).status_code == 200, path
    assert secured.get("/readyz").status_code == 503  # answered, not refused: no worker
