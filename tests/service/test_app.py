"""The HTTP layer in process (TestClient) on a real Redis, without workers."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import redis
from fastapi.testclient import TestClient

from service.app import create_app
from service.embedded import free_port
from service.idempotency import IdempotencyStore, fingerprint
from service.queue import JobQueue
from service.settings import Settings
from tests.service.conftest import blobs, make_settings, npy_bytes

PROBLEM = "application/problem+json"
X = blobs(30, 2, 3)
SPEC_DATASET_FIELDS = {"id", "name", "n_samples", "n_features", "dtype", "sha256", "size_bytes"}
SPEC_DATASET_FIELDS.add("created_at")


def assert_problem(response, status: int) -> dict:  # type: ignore[no-untyped-def]
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    body = response.json()
    assert body["status"] == status
    assert {"type", "title", "detail", "errors"} <= set(body)
    return body


def upload(client: TestClient, array: np.ndarray = X, headers: dict | None = None) -> dict:
    response = client.post(
        "/v1/datasets",
        content=npy_bytes(array),
        headers={"Content-Type": "application/x-npy", **(headers or {})},
    )
    assert response.status_code in (200, 201), response.text
    return response.json()


# ---- probes, metrics, OpenAPI, unknown routes --------------------------------------------


def test_healthz_and_readyz_without_workers(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 503 and ready.json()["workers"] == 0


def test_readyz_counts_a_live_worker(client: TestClient, settings: Settings) -> None:
    queue = JobQueue.from_settings(redis.Redis.from_url(settings.redis_url), settings)
    queue.register_worker("w-test")
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["workers"] == 1


def test_healthz_stays_up_without_redis(tmp_path: Path) -> None:
    dead = make_settings(f"redis://127.0.0.1:{free_port()}/0", tmp_path)
    with TestClient(create_app(dead), raise_server_exceptions=False) as client:
        assert client.get("/healthz").status_code == 200
        ready = client.get("/readyz")
        assert ready.status_code == 503 and ready.json()["redis"] is False
        assert client.get("/metrics").status_code == 200
        assert_problem(client.get("/v1/jobs/x"), 503)


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


# ---- datasets ----------------------------------------------------------------------------


def test_upload_every_format(client: TestClient) -> None:
    json_body = {"data": X.tolist(), "name": "js"}
    csv_header = "a,b\n" + "\n".join(f"{a},{b}" for a, b in X) + "\n"
    pq_buf = io.BytesIO()
    pq.write_table(pa.table({"a": X[:, 0], "b": X[:, 1]}), pq_buf)
    bodies = [
        ("application/json", json.dumps(json_body).encode(), "js"),
        ("text/csv", csv_header.encode(), "csv"),
        ("text/csv; charset=utf-8", csv_header.split("\n", 1)[1].encode(), "csv2"),
        ("application/x-npy", npy_bytes(X), "npy"),
        ("application/vnd.apache.parquet", pq_buf.getvalue(), "pq"),
    ]
    for content_type, data, name in bodies:
        headers = {"Content-Type": content_type}
        response = client.post("/v1/datasets", content=data, headers=headers, params={"name": name})
        assert response.status_code == 201, (content_type, response.text)
        meta = response.json()
        assert response.headers["location"] == f"/v1/datasets/{meta['id']}"
        assert (meta["n_samples"], meta["n_features"], meta["name"]) == (30, 2, name)
        assert set(meta) == SPEC_DATASET_FIELDS
        assert meta["size_bytes"] == len(data)


def test_same_bytes_return_the_stored_dataset(client: TestClient) -> None:
    headers = {"Content-Type": "application/x-npy"}
    first = client.post("/v1/datasets", content=npy_bytes(X), headers=headers)
    again = client.post("/v1/datasets", content=npy_bytes(X), headers=headers)
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json() == again.json()


def test_dataset_get_list_delete(client: TestClient) -> None:
    ids = [upload(client, X + i)["id"] for i in range(3)]
    assert client.get(f"/v1/datasets/{ids[0]}").json()["id"] == ids[0]
    page = client.get("/v1/datasets", params={"limit": 2}).json()
    assert page["total"] == 3 and [d["id"] for d in page["items"]] == ids[::-1][:2]
    page = client.get("/v1/datasets", params={"offset": 2, "limit": 2}).json()
    assert [d["id"] for d in page["items"]] == ids[:1]
    assert client.delete(f"/v1/datasets/{ids[0]}").status_code == 204
    assert_problem(client.get(f"/v1/datasets/{ids[0]}"), 404)
    assert_problem(client.delete(f"/v1/datasets/{ids[0]}"), 404)
    assert_problem(client.get("/v1/datasets", params={"limit": 0}), 422)


def test_upload_errors_are_problems(client: TestClient, settings: Settings) -> None:
    body = assert_problem(
        client.post("/v1/datasets", content=b"x", headers={"Content-Type": "text/plain"}), 415
    )
    assert "text/plain" in body["detail"]
    body = assert_problem(
        client.post(
            "/v1/datasets",
            content=json.dumps({"data": [[1, 2], [3]]}),
            headers={"Content-Type": "application/json"},
        ),
        422,
    )
    assert body["errors"][0]["field"] == "body.data[1]"
    body = assert_problem(
        client.post("/v1/datasets", content=b"1,2\n3,nan\n", headers={"Content-Type": "text/csv"}),
        422,
    )
    assert "row 1, column 1" in body["detail"]


def test_upload_over_the_limit_is_413(redis_client: redis.Redis, settings: Settings) -> None:
    small = settings.model_copy(update={"max_upload_bytes": 100})
    with TestClient(create_app(small)) as client:
        body = assert_problem(
            client.post(
                "/v1/datasets", content=npy_bytes(X), headers={"Content-Type": "application/x-npy"}
            ),
            413,
        )
        assert "100 bytes" in body["detail"]

        def chunked():  # no Content-Length: the limit holds while streaming
            yield b"1,2\n" * 20
            yield b"3,4\n" * 20

        assert_problem(
            client.post("/v1/datasets", content=chunked(), headers={"Content-Type": "text/csv"}),
            413,
        )
    assert list((settings.data_dir / "tmp").iterdir()) == []


# ---- jobs --------------------------------------------------------------------------------


def test_job_is_accepted_and_polled(client: TestClient) -> None:
    meta = upload(client)
    response = client.post("/v1/jobs", json={"dataset_id": meta["id"], "n_clusters": 3})
    assert response.status_code == 202, response.text
    job = response.json()
    assert response.headers["location"] == f"/v1/jobs/{job['id']}"
    assert job["status"] == "queued" and job["params"]["assignment"] == "entmax15"
    assert job["params"]["n_clusters"] == 3 and job["dataset_id"] == meta["id"]
    polled = client.get(f"/v1/jobs/{job['id']}")
    assert polled.status_code == 200 and polled.headers["retry-after"] == "1"
    assert polled.json()["progress"] == dict.fromkeys(
        ("fraction", "sigma", "iteration", "objective")
    )
    listed = client.get("/v1/jobs", params={"status": "queued"}).json()
    assert listed["total"] == 1 and listed["items"][0]["id"] == job["id"]
    assert client.get("/v1/jobs", params={"status": "running"}).json()["total"] == 0
    assert_problem(client.get("/v1/jobs", params={"status": "paused"}), 422)


def test_job_validation_against_the_dataset(client: TestClient) -> None:
    meta = upload(client)
    body = assert_problem(
        client.post("/v1/jobs", json={"dataset_id": "nope", "n_clusters": 2}), 422
    )
    assert body["errors"][0]["field"] == "body.dataset_id"
    body = assert_problem(
        client.post("/v1/jobs", json={"dataset_id": meta["id"], "n_clusters": 31}), 422
    )
    assert "n_samples (30)" in body["detail"] and body["errors"][0]["field"] == "body.n_clusters"
    body = assert_problem(
        client.post(
            "/v1/jobs",
            json={"dataset_id": meta["id"], "n_clusters": 2, "init": [[0, 0, 0], [1, 1, 1]]},
        ),
        422,
    )
    assert "2 features" in body["detail"]
    body = assert_problem(
        client.post("/v1/jobs", json={"dataset_id": meta["id"], "n_clusters": 0, "cooling": 2}),
        422,
    )
    assert {e["field"] for e in body["errors"]} == {"body.n_clusters", "body.cooling"}
    assert_problem(
        client.post("/v1/jobs", content=b"{", headers={"Content-Type": "application/json"}), 422
    )


@pytest.mark.parametrize(
    "raw",
    [
        b'{"dataset_id": "d", "n_clusters": 1, "tol": NaN}',
        b'{"dataset_id": "d", "n_clusters": 1, "init": [[Infinity]]}',
        b'{"dataset_id": "d", "n_clusters": 1e400}',
        b"[1, 2]",
        b'"text"',
    ],
)
def test_odd_job_bodies_are_422_not_500(client: TestClient, raw: bytes) -> None:
    response = client.post(
        "/v1/jobs",
        content=raw,
        headers={"Content-Type": "application/json", "Idempotency-Key": "o"},
    )
    assert_problem(response, 422)


def test_unfinished_job_has_no_result(client: TestClient) -> None:
    meta = upload(client)
    job = client.post("/v1/jobs", json={"dataset_id": meta["id"], "n_clusters": 2}).json()
    for path in ("result", "assignments"):
        response = client.get(f"/v1/jobs/{job['id']}/{path}")
        assert "queued" in assert_problem(response, 409)["detail"]
        assert response.headers["retry-after"] == "1"
    predict = client.post(f"/v1/jobs/{job['id']}/predict", json={"data": [[0, 0]]})
    assert_problem(predict, 409)
    assert_problem(client.get(f"/v1/jobs/{job['id']}/result", params={"include": "bogus"}), 422)
    for path in ("", "/result", "/assignments"):
        assert_problem(client.get(f"/v1/jobs/missing{path}"), 404)
    assert_problem(client.post("/v1/jobs/missing/cancel"), 404)


def test_cancel_a_queued_job(client: TestClient) -> None:
    meta = upload(client)
    job = client.post("/v1/jobs", json={"dataset_id": meta["id"], "n_clusters": 2}).json()
    canceled = client.post(f"/v1/jobs/{job['id']}/cancel")
    assert canceled.status_code == 200 and canceled.json()["status"] == "canceled"
    assert "retry-after" not in client.get(f"/v1/jobs/{job['id']}").headers
    assert client.post(f"/v1/jobs/{job['id']}/cancel").json()["status"] == "canceled"
    assert client.delete(f"/v1/jobs/{job['id']}").status_code == 204
    assert_problem(client.get(f"/v1/jobs/{job['id']}"), 404)


# ---- idempotency and auth ----------------------------------------------------------------


def test_idempotency_key(client: TestClient, settings: Settings) -> None:
    meta = upload(client)
    body = {"dataset_id": meta["id"], "n_clusters": 2, "random_state": 1}
    key = {"Idempotency-Key": "abc"}
    first = client.post("/v1/jobs", json=body, headers=key)
    again = client.post("/v1/jobs", json=dict(reversed(body.items())), headers=key)
    assert first.status_code == again.status_code == 202
    assert first.json() == again.json()
    assert first.headers["location"] == again.headers["location"]
    assert client.get("/v1/jobs").json()["total"] == 1
    other = client.post("/v1/jobs", json={**body, "n_clusters": 3}, headers=key)
    assert "different body" in assert_problem(other, 422)["detail"]
    assert client.post("/v1/jobs", json=body).json()["id"] != first.json()["id"]


def test_idempotency_key_in_flight_is_409(client: TestClient, settings: Settings) -> None:
    meta = upload(client)
    body = {"dataset_id": meta["id"], "n_clusters": 2}
    store = IdempotencyStore(
        redis.Redis.from_url(settings.redis_url), prefix=settings.key_prefix, ttl_s=60
    )
    full = {**body, **{k: v for k, v in _defaults().items() if k not in body}}
    assert store.begin("anonymous", "busy", fingerprint(full)) is None  # a request in flight
    response = client.post("/v1/jobs", json=body, headers={"Idempotency-Key": "busy"})
    assert assert_problem(response, 409)["type"].endswith("idempotency-key-in-progress")
    assert client.get("/v1/jobs").json()["total"] == 0


def _defaults() -> dict:
    from service.schemas import JobCreate

    return JobCreate(dataset_id="x", n_clusters=1).model_dump(mode="json")


def test_failed_acceptance_releases_the_key(client: TestClient) -> None:
    key = {"Idempotency-Key": "k2"}
    body = {"dataset_id": "missing", "n_clusters": 2}
    assert_problem(client.post("/v1/jobs", json=body, headers=key), 422)
    meta = upload(client)
    body = {"dataset_id": meta["id"], "n_clusters": 2}
    assert client.post("/v1/jobs", json=body, headers=key).status_code == 202


@pytest.fixture
def secured(settings: Settings) -> TestClient:
    keyed = settings.model_copy(update={"api_keys": ["alpha", "beta"]})
    with TestClient(create_app(keyed)) as client:
        yield client


def test_api_keys(secured: TestClient) -> None:
    body = assert_problem(secured.get("/v1/datasets"), 401)
    assert "API key" in body["detail"]
    assert_problem(secured.get("/v1/jobs", headers={"X-API-Key": "gamma"}), 401)
    assert_problem(secured.get("/v1/jobs", headers={"Authorization": "Bearer gamma"}), 401)
    assert secured.get("/v1/jobs", headers={"X-API-Key": "alpha"}).status_code == 200
    assert secured.get("/v1/jobs", headers={"Authorization": "Bearer beta"}).status_code == 200
    for path in ("/healthz", "/metrics", "/openapi.json"):
        assert secured.get(path).status_code == 200


def test_idempotency_is_scoped_per_api_key(secured: TestClient) -> None:
    alpha = {"X-API-Key": "alpha", "Idempotency-Key": "same"}
    beta = {"Authorization": "Bearer beta", "Idempotency-Key": "same"}
    meta = upload(secured, headers={"X-API-Key": "alpha"})
    body = {"dataset_id": meta["id"], "n_clusters": 2}
    a = secured.post("/v1/jobs", json=body, headers=alpha).json()
    b = secured.post("/v1/jobs", json={**body, "n_clusters": 3}, headers=beta)
    assert b.status_code == 202 and b.json()["id"] != a["id"]
    assert secured.post("/v1/jobs", json=body, headers=alpha).json()["id"] == a["id"]


def test_dead_letters_are_listed(
    client: TestClient, settings: Settings, redis_client: redis.Redis
) -> None:
    empty = client.get("/v1/jobs/dead-letters")
    assert empty.status_code == 200
    assert empty.json() == {"items": [], "total": 0, "offset": 0, "limit": 50}
    queue = JobQueue.from_settings(redis_client, settings)
    meta = upload(client)
    ids = [
        client.post("/v1/jobs", json={"dataset_id": meta["id"], "n_clusters": 2}).json()["id"]
        for _ in range(2)
    ]
    for _ in ids:
        claim = queue.claim("w", block_ms=100)
        assert claim is not None
        queue.fail(claim, f"bad input of {claim.job_id}", retryable=False)
    page = client.get("/v1/jobs/dead-letters", params={"limit": 1}).json()
    assert page["total"] == 2 and page["limit"] == 1
    (item,) = page["items"]
    assert item["job_id"] == ids[1] and item["error"] == f"bad input of {ids[1]}"
    assert item["attempts"] == 1 and item["failed_at"]
    older = client.get("/v1/jobs/dead-letters", params={"offset": 1}).json()["items"]
    assert [d["job_id"] for d in older] == [ids[0]]
    assert client.get(f"/v1/jobs/{ids[0]}").json()["status"] == "failed"
    assert_problem(client.get("/v1/jobs/dead-letters", params={"limit": 0}), 422)
    schema = client.get("/openapi.json").json()
    assert "dead-letter" in schema["paths"]["/v1/jobs/dead-letters"]["get"]["description"]
