"""`/v1/jobs` in process on a real Redis, without workers: the queue is driven by hand.

Results, assignments and predictions of a fitted job are exercised over HTTP against a real
worker in `tests/service/test_e2e.py`.
"""

from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import redis
import scipy.sparse as sp
from fastapi.testclient import TestClient

from service.app import create_app
from service.formats import ARROW_STREAM
from service.queue import Claim, JobQueue
from service.results import ResultStore
from service.routes.jobs import csr_rows
from service.settings import Settings, get_settings
from service.uploads import PARQUET
from service.worker import Worker, dataset_loader
from tests.service.conftest import assert_problem, upload


@pytest.fixture
def queue(settings: Settings, redis_client: redis.Redis) -> JobQueue:
    """The queue the app's routes use, to drive jobs by hand as a worker would."""
    return JobQueue.from_settings(redis_client, settings)


def _queued_job(client: TestClient) -> dict[str, Any]:
    """A job for two clusters of a fresh upload, as accepted (queued)."""
    meta = upload(client)
    response = client.post("/v1/jobs", json={"dataset_id": meta["id"], "n_clusters": 2})
    assert response.status_code == 202, response.text
    return response.json()


def _cpu_worker(queue: JobQueue, settings: Settings, **options: Any) -> Worker:
    """A real worker on the CPU over the app's queue, results and datasets."""
    return Worker(
        queue,
        ResultStore(settings.data_dir),
        dataset_loader(settings.data_dir),
        device="cpu",
        lock_dir=settings.data_dir,
        **options,
    )


def _running(queue: JobQueue) -> Claim:
    claim = queue.claim("w", block_ms=100)
    assert claim is not None
    return claim


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
        b'{"dataset_id": "d", "n_clusters": ' + b"9" * 5000 + b"}",  # was FastAPI's 400
        b'{"dataset_id": "d", "n_clusters": 2}\xff',
        b"[" * 100_000 + b"]" * 100_000,
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
    job = _queued_job(client)
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


def test_a_failed_job_says_why_it_has_no_result(client: TestClient, queue: JobQueue) -> None:
    job = _queued_job(client)
    queue.fail(_running(queue), "the data broke the fit", retryable=False)
    response = client.get(f"/v1/jobs/{job['id']}/result")
    body = assert_problem(response, 409)
    assert "is failed" in body["detail"] and "(error: the data broke the fit)" in body["detail"]
    assert "retry-after" not in response.headers, "a failed job will not succeed later"
    canceled = assert_problem(client.post(f"/v1/jobs/{job['id']}/cancel"), 409)
    assert "has already failed" in canceled["detail"]


def test_a_running_job_is_polled_with_retry_after(client: TestClient, queue: JobQueue) -> None:
    job = _queued_job(client)
    _running(queue)
    polled = client.get(f"/v1/jobs/{job['id']}")
    assert polled.json()["status"] == "running" and polled.headers["retry-after"] == "1"
    assert polled.json()["attempts"] == 1


def test_cancel_a_queued_job(client: TestClient) -> None:
    job = _queued_job(client)
    canceled = client.post(f"/v1/jobs/{job['id']}/cancel")
    assert canceled.status_code == 200 and canceled.json()["status"] == "canceled"
    assert "retry-after" not in client.get(f"/v1/jobs/{job['id']}").headers
    assert client.post(f"/v1/jobs/{job['id']}/cancel").json()["status"] == "canceled"
    assert client.delete(f"/v1/jobs/{job['id']}").status_code == 204
    assert_problem(client.get(f"/v1/jobs/{job['id']}"), 404)


def test_deleting_a_running_job_stops_its_worker(client: TestClient, queue: JobQueue) -> None:
    job = _queued_job(client)
    claim = _running(queue)
    assert client.delete(f"/v1/jobs/{job['id']}").status_code == 204
    assert queue.stop_reason(claim) == "deleted"
    assert_problem(client.get(f"/v1/jobs/{job['id']}"), 404)
    assert client.get("/v1/jobs").json()["total"] == 0


def test_failed_acceptance_releases_the_key(client: TestClient) -> None:
    key = {"Idempotency-Key": "k2"}
    body = {"dataset_id": "missing", "n_clusters": 2}
    assert_problem(client.post("/v1/jobs", json=body, headers=key), 422)
    meta = upload(client)
    body = {"dataset_id": meta["id"], "n_clusters": 2}
    assert client.post("/v1/jobs", json=body, headers=key).status_code == 202


def test_dead_letters_are_listed(client: TestClient, queue: JobQueue) -> None:
    empty = client.get("/v1/jobs/dead-letters")
    assert empty.status_code == 200
    assert empty.json() == {"items": [], "total": 0, "offset": 0, "limit": 50}
    meta = upload(client)
    ids = [
        client.post("/v1/jobs", json={"dataset_id": meta["id"], "n_clusters": 2}).json()["id"]
        for _ in range(2)
    ]
    for _ in ids:
        claim = _running(queue)
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


def test_csr_rows_pages_rows_with_a_page_relative_indptr() -> None:
    dense = np.array([[0.5, 0.5, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.25, 0.0, 0.75]])
    matrix = sp.csr_matrix(dense)
    page = csr_rows(matrix, 1, 2)
    assert page["shape"] == [4, 3] and (page["offset"], page["limit"]) == (1, 2)
    assert page["indptr"] == [0, 1, 2]
    rows = sp.csr_matrix((page["values"], page["indices"], page["indptr"]), shape=(2, 3))
    np.testing.assert_array_equal(rows.toarray(), dense[1:3])
    tail = csr_rows(matrix, 3, 10)
    assert tail["indptr"] == [0, 2] and tail["values"] == [0.25, 0.75]
    past = csr_rows(matrix, 4, 10)
    assert past["indptr"] == [0] and past["indices"] == [] and past["values"] == []


def test_a_job_body_with_a_huge_integer_says_so(client: TestClient) -> None:
    raw = b'{"dataset_id": "d", "n_clusters": ' + b"9" * 5000 + b"}"
    response = client.post("/v1/jobs", content=raw, headers={"Content-Type": "application/json"})
    body = assert_problem(response, 422)
    assert body["detail"] == (
        "the body is not valid JSON: it holds a number too long to read (over 4300 digits)"
    )
    assert "set_int_max_str_digits" not in response.text


def test_integral_floats_are_integers(client: TestClient) -> None:
    meta = upload(client)
    response = client.post("/v1/jobs", json={"dataset_id": meta["id"], "n_clusters": 3.0})
    assert response.status_code == 202, response.text
    assert response.json()["params"]["n_clusters"] == 3


# ---- include / exclude -------------------------------------------------------------------


def test_result_parts_are_an_enum_in_the_schema(client: TestClient) -> None:
    operation = client.get("/openapi.json").json()["paths"]["/v1/jobs/{job_id}/result"]["get"]
    params = {p["name"]: p for p in operation["parameters"]}
    for name in ("include", "exclude"):
        param = params[name]
        assert (param["in"], param["style"], param["explode"]) == ("query", "form", False)
        assert param["schema"]["items"]["enum"] == ["centroids", "labels", "history"]
    assert "422" in operation["responses"]


@pytest.mark.parametrize(
    "params",
    [
        {"include": "bogus"},
        {"include": "labels,nope"},
        {"exclude": "Labels"},
        [("include", "labels"), ("include", "x")],
    ],
)
def test_unknown_result_parts_are_a_422(client: TestClient, params: Any) -> None:
    body = assert_problem(client.get("/v1/jobs/missing/result", params=params), 422)
    assert body["errors"][0]["field"] in ("query.include", "query.exclude")
    assert "choose from ['centroids', 'labels', 'history']" in body["detail"]


@pytest.mark.parametrize(
    "params",
    [
        {"include": "centroids,labels,history"},
        {"include": "labels, history"},
        {"include": ""},
        [("exclude", "labels"), ("exclude", "history")],
    ],
)
def test_known_result_parts_pass_validation(client: TestClient, params: Any) -> None:
    # Validated before the job is looked up: a missing job is then the only error.
    assert_problem(client.get("/v1/jobs/missing/result", params=params), 404)


# ---- methods -----------------------------------------------------------------------------


def _documented_methods(client: TestClient) -> dict[str, set[str]]:
    paths = client.get("/openapi.json").json()["paths"]
    return {path: {method.upper() for method in ops} for path, ops in paths.items()}


def _concrete(path: str) -> str:
    return path.replace("{job_id}", "some-job").replace("{dataset_id}", "some-dataset")


def test_options_lists_every_method_of_every_path(client: TestClient) -> None:
    # OPTIONS /v1/jobs/{id} answered 405 with `Allow: GET`, though DELETE exists.
    for path, methods in _documented_methods(client).items():
        response = client.options(_concrete(path))
        assert response.status_code == 204, (path, response.text)
        allowed = {m.strip() for m in response.headers["allow"].split(",")}
        assert allowed - {"HEAD", "OPTIONS"} == methods, path
        assert "OPTIONS" in allowed and response.content == b""


def test_a_wrong_method_is_a_405_listing_every_method(client: TestClient) -> None:
    for path, methods in _documented_methods(client).items():
        wrong = next(m for m in ("PATCH", "PUT", "DELETE", "POST") if m not in methods)
        response = client.request(wrong, _concrete(path))
        body = assert_problem(response, 405)
        assert body["detail"] == f"{wrong} is not allowed on {_concrete(path)}"
        allowed = {m.strip() for m in response.headers["allow"].split(",")}
        assert allowed - {"HEAD", "OPTIONS"} == methods, path


def test_options_on_an_unknown_path_is_a_404(client: TestClient) -> None:
    assert_problem(client.options("/v1/nothing-here"), 404)


def test_a_job_too_large_for_a_worker_is_refused_before_it_is_queued(settings: Settings) -> None:
    # 16 MiB of workers' memory: 3 000 points fit with k=3, not with k=3 000 and softmax.
    small = settings.model_copy(update={"max_job_bytes": 16 << 20})
    with TestClient(create_app(small)) as client:
        dataset = upload(client, np.random.default_rng(0).normal(size=(3000, 2)))
        ok = client.post("/v1/jobs", json={"dataset_id": dataset["id"], "n_clusters": 3})
        assert ok.status_code == 202, ok.text
        too_large = {"dataset_id": dataset["id"], "n_clusters": 3000, "assignment": "softmax"}
        problem = assert_problem(client.post("/v1/jobs", json=too_large), 422)
        assert problem["type"].endswith("job-too-large")
        assert "RBFKM_MAX_JOB_BYTES" in problem["detail"] and "GiB" in problem["detail"]
        assert problem["errors"][0]["field"] == "body.n_clusters"
        assert client.get("/v1/jobs").json()["total"] == 1  # the refused job was not queued


@pytest.fixture
def limited(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    """A client of a server whose jobs get 120 s unless they ask for up to 600 s."""
    monkeypatch.setenv("RBFKM_MAX_RUNTIME_S", "120")
    monkeypatch.setenv("RBFKM_MAX_RUNTIME_CAP_S", "600")
    get_settings.cache_clear()  # the environment's settings, as the API reads them
    configured = settings.model_copy(update={"max_runtime_s": 120.0, "max_runtime_cap_s": 600.0})
    with TestClient(create_app(configured), raise_server_exceptions=False) as test_client:
        yield test_client
    get_settings.cache_clear()


def test_a_job_shows_its_effective_time_limit(limited: TestClient) -> None:
    meta = upload(limited)
    default = limited.post("/v1/jobs", json={"dataset_id": meta["id"], "n_clusters": 2})
    assert default.status_code == 202, default.text
    polled = limited.get(f"/v1/jobs/{default.json()['id']}").json()
    assert polled["params"]["max_runtime_s"] == 120.0
    own = limited.post(
        "/v1/jobs", json={"dataset_id": meta["id"], "n_clusters": 2, "max_runtime_s": 30}
    )
    assert own.status_code == 202, own.text
    assert limited.get(f"/v1/jobs/{own.json()['id']}").json()["params"]["max_runtime_s"] == 30


def test_a_time_limit_above_the_cap_is_a_422_that_names_the_cap(limited: TestClient) -> None:
    meta = upload(limited)
    body = {"dataset_id": meta["id"], "n_clusters": 2, "max_runtime_s": 601}
    problem = assert_problem(limited.post("/v1/jobs", json=body), 422)
    assert "cap of 600 s" in problem["detail"]
    assert problem["errors"] == [
        {"field": "body.max_runtime_s", "message": "must be <= 600 (the server's cap)"}
    ]
    assert limited.get("/v1/jobs").json()["total"] == 0  # nothing was queued
    zero = assert_problem(limited.post("/v1/jobs", json={**body, "max_runtime_s": 0}), 422)
    assert zero["errors"][0]["field"] == "body.max_runtime_s"


def test_a_job_that_ran_out_of_time_says_so(
    limited: TestClient, settings: Settings, redis_client: redis.Redis
) -> None:
    # A real worker runs a real fit under a tiny limit: the job fails, not retried, and
    # its error (and the result's 409) say what to change.
    rng = np.random.default_rng(0)
    meta = upload(limited, rng.normal(size=(100_000, 8)).astype(np.float32))  # seconds to fit
    body = {"dataset_id": meta["id"], "n_clusters": 200, "max_runtime_s": 0.3}
    job = limited.post("/v1/jobs", json=body).json()
    queue = JobQueue.from_settings(redis_client, settings)
    worker = _cpu_worker(queue, settings, max_runtime_cap_s=600.0)
    assert worker.run_once(block_ms=500) == job["id"]
    polled = limited.get(f"/v1/jobs/{job['id']}").json()
    assert (polled["status"], polled["attempts"]) == ("failed", 1)
    assert "exceeded its time limit of 0.3 s" in polled["error"]
    assert "cap: 600 s" in polled["error"]
    result = assert_problem(limited.get(f"/v1/jobs/{job['id']}/result"), 409)
    assert "time limit" in result["detail"]
    dead = limited.get("/v1/jobs/dead-letters").json()["items"]
    assert dead[0]["job_id"] == job["id"] and "time limit" in dead[0]["error"]


@pytest.mark.parametrize(("max_iter", "converged"), [(2, False), (300, True)])
def test_the_result_says_whether_the_fit_converged(
    client: TestClient,
    queue: JobQueue,
    settings: Settings,
    max_iter: int,
    converged: bool,
) -> None:
    # A real worker fits overlapping blobs: two iterations cannot reach a fixed point,
    # three hundred do; the job succeeds either way and its result tells them apart.
    rng = np.random.default_rng(1)
    X = rng.normal(size=(3000, 3)).astype(np.float32) + rng.integers(0, 3, size=(3000, 1))
    meta = upload(client, X)
    body = {"dataset_id": meta["id"], "n_clusters": 12, "max_iter": max_iter}
    job = client.post("/v1/jobs", json=body).json()
    worker = _cpu_worker(queue, settings)
    assert worker.run_once(block_ms=500) == job["id"]
    result = client.get(f"/v1/jobs/{job['id']}/result", params={"include": "history"})
    assert result.status_code == 200, result.text
    assert result.json()["converged"] is converged


@pytest.fixture
def fitted_job(client: TestClient, queue: JobQueue, settings: Settings) -> dict[str, Any]:
    """A job a real CPU worker has run to success on 30 points in 3 blobs."""
    job = _queued_job(client)
    assert _cpu_worker(queue, settings).run_once(block_ms=500) == job["id"]
    return client.get(f"/v1/jobs/{job['id']}").json()


def _table(response: Any) -> pa.Table:
    media = response.headers["content-type"]
    data = io.BytesIO(response.content)
    return pq.read_table(data) if media == PARQUET else pa.ipc.open_stream(data).read_all()


@pytest.mark.parametrize("media", [PARQUET, ARROW_STREAM])
def test_the_result_as_a_table_of_labels_or_centroids(
    client: TestClient, fitted_job: dict[str, Any], media: str
) -> None:
    path = f"/v1/jobs/{fitted_job['id']}/result"
    whole = client.get(path).json()
    labels = client.get(path, headers={"Accept": media})
    assert labels.status_code == 200, labels.text
    assert labels.headers["content-type"] == media and labels.headers["vary"] == "Accept"
    assert fitted_job["id"] in labels.headers["content-disposition"]
    table = _table(labels)
    assert table["row"].to_pylist() == list(range(30))
    assert table["label"].to_pylist() == whole["labels"]
    scalars = json.loads(table.schema.metadata[b"rbfkm"])
    assert scalars["inertia"] == whole["inertia"] and scalars["n_iter"] == whole["n_iter"]
    centres = _table(client.get(path, params={"include": "centroids"}, headers={"Accept": media}))
    assert centres.column_names == ["cluster", "f0", "f1"]
    assert np.allclose(np.column_stack([centres["f0"], centres["f1"]]), whole["centroids"])


def test_a_table_result_is_one_table(client: TestClient, fitted_job: dict[str, Any]) -> None:
    path = f"/v1/jobs/{fitted_job['id']}/result"
    accept = {"Accept": PARQUET}
    for params in ({"include": "labels,centroids"}, {"include": "history"}, {"include": ""}):
        body = assert_problem(client.get(path, params=params, headers=accept), 422)
        assert "include=centroids" in body["detail"]
    only_centres = client.get(path, params={"exclude": "labels"}, headers=accept)
    assert _table(only_centres).column_names[0] == "cluster"


def test_assignments_as_a_coordinate_table(client: TestClient, fitted_job: dict[str, Any]) -> None:
    path = f"/v1/jobs/{fitted_job['id']}/assignments"
    page = client.get(path, params={"limit": 100}).json()
    expected = sp.csr_matrix(
        (page["values"], page["indices"], page["indptr"]), shape=tuple(page["shape"])
    )
    for media in (PARQUET, ARROW_STREAM):
        table = _table(client.get(path, headers={"Accept": media}))
        assert table.column_names == ["row", "cluster", "weight"]
        got = sp.coo_matrix(
            (table["weight"].to_numpy(), (table["row"].to_numpy(), table["cluster"].to_numpy())),
            shape=tuple(json.loads(table.schema.metadata[b"rbfkm"])["shape"]),
        )
        assert np.allclose(got.toarray(), expected.toarray())


@pytest.mark.parametrize("route", ["result", "assignments"])
def test_an_accept_the_route_cannot_answer_is_a_406(
    client: TestClient, fitted_job: dict[str, Any], route: str
) -> None:
    response = client.get(f"/v1/jobs/{fitted_job['id']}/{route}", headers={"Accept": "text/csv"})
    body = assert_problem(response, 406)
    assert PARQUET in body["detail"] and body["errors"][0]["field"] == "header.accept"


def test_the_table_types_are_in_the_openapi_document(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    for route in ("result", "assignments"):
        operation = paths[f"/v1/jobs/{{job_id}}/{route}"]["get"]
        assert {PARQUET, ARROW_STREAM} <= set(operation["responses"]["200"]["content"])
        assert "406" in operation["responses"]


def _events(response: Any) -> list[dict[str, Any]]:
    """The events of a text/event-stream body: id, event and the JSON data."""
    events = []
    for block in response.text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in fields:
            events.append({**fields, "data": json.loads(fields["data"])})
    return events


def test_the_events_of_a_finished_job_end_with_its_status(
    client: TestClient, fitted_job: dict[str, Any]
) -> None:
    path = f"/v1/jobs/{fitted_job['id']}/events"
    response = client.get(path)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.text.startswith("retry: ")
    (event,) = _events(response)
    assert event["event"] == "status" and event["data"] == client.get(path[:-7]).json()
    # A client that saw it and reconnects is not sent it again: the stream just ends.
    again = client.get(path, headers={"Last-Event-ID": event["id"]})
    assert again.status_code == 200 and _events(again) == []
    # Another id (an older state) gets the current one.
    stale = client.get(path, headers={"Last-Event-ID": "1.running.500.3"})
    assert [e["event"] for e in _events(stale)] == ["status"]


def test_the_events_of_an_unknown_job_are_a_404(client: TestClient) -> None:
    assert_problem(client.get("/v1/jobs/nope/events"), 404)


def test_events_follow_a_job_until_it_is_canceled(client: TestClient, queue: JobQueue) -> None:
    job = _queued_job(client)
    claim = _running(queue)

    def work() -> None:  # a worker's writes while the stream is open
        for step in range(1, 4):
            time.sleep(0.3)
            queue.report_progress(
                claim, fraction=step / 4, sigma=1.0 / step, iteration=step, objective=1.0
            )
        time.sleep(0.3)
        queue.cancel(job["id"])
        queue.mark_canceled(claim)

    writer = threading.Thread(target=work)
    writer.start()
    events = _events(client.get(f"/v1/jobs/{job['id']}/events"))
    writer.join()
    kinds = [(e["event"], e["data"]["status"]) for e in events]
    assert kinds[0] == ("status", "running") and kinds[-1] == ("status", "canceled")
    assert set(kinds[1:-1]) <= {("progress", "running")}
    fractions = [e["data"]["progress"]["fraction"] or 0 for e in events[:-1]]
    assert fractions == sorted(fractions) and len(set(e["id"] for e in events)) == len(events)


# ---- the projection ------------------------------------------------------------------------


def test_the_worker_stores_a_projection_the_route_serves(
    client: TestClient, fitted_job: dict[str, Any], settings: Settings
) -> None:
    path = f"/v1/jobs/{fitted_job['id']}/projection"
    response = client.get(path)
    assert response.status_code == 200, response.text
    body = response.json()
    result = client.get(f"/v1/jobs/{fitted_job['id']}/result").json()
    # 30 points: every row is in the sample, with its own label.
    assert body["n_samples"] == 30 and body["rows"] == list(range(30))
    assert body["labels"] == result["labels"]
    assert len(body["points"]) == len(body["entropy"]) == 30
    assert len(body["centroids"]) == 2 and all(len(p) == 2 for p in body["centroids"])
    assert all(0 <= e <= np.log(2) + 1e-9 for e in body["entropy"])
    assert 0.5 < sum(body["explained_variance_ratio"]) <= 1 + 1e-9
    stored = ResultStore(settings.data_dir).result_dir(fitted_job["id"]) / "projection.npz"
    assert stored.is_file()


def test_a_projection_is_a_409_before_success_and_a_404_for_unknown_jobs(
    client: TestClient,
) -> None:
    job = _queued_job(client)
    body = assert_problem(client.get(f"/v1/jobs/{job['id']}/projection"), 409)
    assert "queued" in body["detail"]
    assert_problem(client.get(f"/v1/jobs/{'0' * 32}/projection"), 404)


def test_a_result_stored_without_a_projection_says_so(
    client: TestClient, fitted_job: dict[str, Any], settings: Settings
) -> None:
    store = ResultStore(settings.data_dir)
    (store.result_dir(fitted_job["id"]) / "projection.npz").unlink()
    body = assert_problem(client.get(f"/v1/jobs/{fitted_job['id']}/projection"), 404)
    assert body["type"].endswith("projection-not-found") and "run the job again" in body["detail"]
    assert client.get(f"/v1/jobs/{fitted_job['id']}/result").status_code == 200


def test_the_projection_is_in_the_openapi_document(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    operation = document["paths"]["/v1/jobs/{job_id}/projection"]["get"]
    assert {"200", "404", "409"} <= set(operation["responses"])
    schema = document["components"]["schemas"]["Projection"]
    assert set(schema["required"]) >= {"rows", "points", "labels", "entropy", "centroids"}
