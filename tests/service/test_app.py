"""The application factory: what `create_app` wires together, and the API it documents.

The routes, dependencies, probes and metrics it assembles have test files of their own
(`routes/`, `test_deps.py`, `test_metrics.py`, `test_idempotency.py`).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.datasets import DatasetStore
from service.embedded import free_port
from service.idempotency import IdempotencyStore
from service.queue import JobQueue
from service.results import ResultStore
from service.settings import Settings
from tests.service.conftest import PROBLEM, assert_problem, make_settings


def test_an_app_needs_a_redis_url(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="REDIS_URL is not set"):
        create_app(make_settings(None, tmp_path))  # type: ignore[arg-type]


def test_the_stores_are_built_once_from_the_settings(settings: Settings) -> None:
    app = create_app(settings)
    state = app.state
    assert state.settings is settings
    assert isinstance(state.datasets, DatasetStore)
    assert isinstance(state.results, ResultStore)
    assert isinstance(state.idempotency, IdempotencyStore)
    assert state.idempotency.prefix == settings.key_prefix
    assert state.idempotency.ttl_s == settings.result_ttl_s
    queue = state.queue_factory()
    assert isinstance(queue, JobQueue) and state.queue_factory() is queue


def test_the_app_starts_without_redis_and_answers_503(tmp_path: Path) -> None:
    dead = make_settings(f"redis://127.0.0.1:{free_port()}/0", tmp_path)
    with TestClient(create_app(dead), raise_server_exceptions=False) as client:
        response = client.get("/v1/jobs/x")
        assert_problem(response, 503)
        assert response.headers["retry-after"] == "1"


def test_openapi_documents_the_api_with_examples(client: TestClient) -> None:
    doc = client.get("/openapi.json").json()
    paths = doc["paths"]
    for path in (
        "/v1/datasets",
        "/v1/datasets/{dataset_id}",
        "/v1/jobs",
        "/v1/jobs/{job_id}",
        "/v1/jobs/{job_id}/result",
        "/v1/jobs/{job_id}/assignments",
        "/v1/jobs/{job_id}/cancel",
        "/v1/jobs/{job_id}/predict",
        "/healthz",
        "/readyz",
        "/metrics",
    ):
        assert path in paths, path
    body = paths["/v1/datasets"]["post"]["requestBody"]["content"]
    assert {"application/json", "text/csv", "application/x-npy"} <= set(body)
    schemas = doc["components"]["schemas"]
    assert schemas["JobCreate"]["examples"] and schemas["Problem"]["examples"]
    assert "HTTPValidationError" not in schemas, "validation errors are problems too"
    errors = paths["/v1/jobs/{job_id}"]["get"]["responses"]
    for status in ("401", "404", "422"):
        assert list(errors[status]["content"]) == [PROBLEM], status


def test_unknown_route_and_method_are_problems(client: TestClient) -> None:
    assert "no route" in assert_problem(client.get("/v2/nothing"), 404)["detail"]
    assert_problem(client.put("/v1/jobs"), 405)
