"""End to end: a real uvicorn server, a real Redis and a real spawned worker, over HTTP.

One server and one worker serve the whole module (starting a worker imports torch, which
takes seconds); every test talks to them only through HTTP, with an API key.
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp

from rbfkm_engine import RBFKMeans
from service.settings import Settings
from tests.service.conftest import (
    blobs,
    live_server,
    make_settings,
    npy_bytes,
    private_db,
    wait_for,
)

KEY = "e2e-secret"
PROBLEM = "application/problem+json"
MAX_UPLOAD = 1 << 20
X = blobs(300, 2, 3, seed=7)
FINISHED = ("succeeded", "failed", "canceled")


@dataclass
class Live:
    http: httpx.Client
    settings: Settings
    base_url: str


@pytest.fixture(scope="module")
def live(redis_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with private_db(redis_server, 5) as url:
        settings = make_settings(
            url,
            tmp_path_factory.mktemp("e2e"),
            key_prefix="e2e",
            api_keys=[KEY],
            max_upload_bytes=MAX_UPLOAD,
        )
        with (
            live_server(settings, tmp_path_factory.mktemp("tmp")) as base_url,
            httpx.Client(base_url=base_url, headers={"X-API-Key": KEY}, timeout=60) as http,
        ):
            wait_for(lambda: http.get("/readyz").status_code == 200, 120, "a worker to be ready")
            yield Live(http, settings, base_url)


def problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    body = response.json()
    assert body["status"] == status and body["detail"] and "errors" in body
    return body


def send(live: Live, path: str, data: Any, content_type: str) -> httpx.Response:
    """POST a raw body with a content type."""
    return live.http.post(path, content=data, headers={"Content-Type": content_type})


def upload(live: Live, data: bytes, content_type: str, name: str | None = None) -> dict:
    params = {"name": name} if name else None
    response = live.http.post(
        "/v1/datasets", content=data, headers={"Content-Type": content_type}, params=params
    )
    assert response.status_code in (200, 201), response.text
    return response.json()


def submit(live: Live, dataset_id: str, **params: Any) -> dict:
    response = live.http.post("/v1/jobs", json={"dataset_id": dataset_id, **params})
    assert response.status_code == 202, response.text
    assert response.headers["location"] == f"/v1/jobs/{response.json()['id']}"
    return response.json()


def wait_status(live: Live, job_id: str, statuses: tuple[str, ...], timeout_s: float = 90) -> dict:
    def poll() -> dict | None:
        job = live.http.get(f"/v1/jobs/{job_id}").json()
        return job if job["status"] in statuses else None

    return wait_for(poll, timeout_s, f"job {job_id} to be {statuses}")


@pytest.fixture(scope="module")
def fitted(live: Live) -> dict[str, Any]:
    """One job on X, run by the worker to success."""
    meta = upload(live, npy_bytes(X), "application/x-npy", name="blobs")
    params = {"n_clusters": 3, "random_state": 0, "device": "cpu"}
    job = submit(live, meta["id"], **params)
    done = wait_status(live, job["id"], FINISHED)
    assert done["status"] == "succeeded", done
    return {"dataset": meta, "job": done, "params": params}


# ---- results -----------------------------------------------------------------------------


def test_result_equals_the_engine_run_directly(live: Live, fitted: dict) -> None:
    job = fitted["job"]
    assert job["progress"]["fraction"] == 1.0 and job["attempts"] == 1
    assert job["started_at"] and job["finished_at"] and job["error"] is None
    polled = live.http.get(f"/v1/jobs/{job['id']}")
    assert "retry-after" not in polled.headers
    result = live.http.get(f"/v1/jobs/{job['id']}/result").json()
    assert set(result) == {
        "centroids",
        "labels",
        "inertia",
        "n_iter",
        "converged",
        "sigma",
        "device",
        "history",
        "n_clusters",
        "metrics",
        "k_path",
        "processes",
    }
    assert result["n_clusters"] == 3 and result["processes"] == 1
    assert sum(result["metrics"]["sizes"]) == len(X)
    assert set(result["metrics"]) == {"sizes", "silhouette", "davies_bouldin", "calinski_harabasz"}
    assert [entry["k"] for entry in result["k_path"]][-1] == 3
    assert result["converged"] is True
    assert result["device"] == "cpu"
    direct = RBFKMeans(n_clusters=3, random_state=0, device="cpu").fit(X)
    np.testing.assert_allclose(result["centroids"], direct.cluster_centers_, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(result["labels"], direct.labels_)
    assert result["inertia"] == pytest.approx(direct.inertia_, rel=1e-5)
    assert result["n_iter"] == direct.n_iter_
    assert result["converged"] is direct.converged_
    assert result["sigma"] == pytest.approx(direct.sigma_, rel=1e-5)
    assert len(result["history"]) == len(direct.history_)


def test_auto_job_on_weighted_csv_over_http(live: Live) -> None:
    """n_clusters "auto" with a weight column: the engine's choice, over HTTP."""
    weights = np.ones(len(X))
    weights[::2] = 2.0
    rows = (f"{a},{b},{w}" for (a, b), w in zip(X, weights, strict=True))
    csv = "x,y,w\n" + "\n".join(rows) + "\n"
    response = live.http.post(
        "/v1/datasets",
        content=csv.encode(),
        headers={"Content-Type": "text/csv"},
        params={"weight_column": "w"},
    )
    assert response.status_code == 201, response.text
    meta = response.json()
    assert (meta["n_features"], meta["weight_column"]) == (2, "w")
    job = submit(live, meta["id"], n_clusters="auto", max_clusters=6, random_state=0, device="cpu")
    assert job["params"]["n_clusters"] == "auto"
    done = wait_status(live, job["id"], FINISHED)
    assert done["status"] == "succeeded", done
    result = live.http.get(f"/v1/jobs/{job['id']}/result").json()
    direct = RBFKMeans("auto", max_clusters=6, random_state=0, device="cpu")
    direct.fit(X, sample_weight=weights)
    assert result["n_clusters"] == direct.n_clusters_ == 3
    assert len(result["centroids"]) == 3
    assert result["inertia"] == pytest.approx(direct.inertia_, rel=1e-5)
    path = result["k_path"]
    assert [entry["k"] for entry in path] == [record.k for record in direct.k_path_]
    assert set(path[0]) == {"k", "sigma_appear", "sigma_split", "inertia"}
    assert path[-1]["k"] <= 6 and all(entry["inertia"] is not None for entry in path)
    metrics = result["metrics"]
    assert sorted(metrics["sizes"]) == [100, 100, 100]
    assert metrics["silhouette"] > 0.5 and metrics["davies_bouldin"] > 0
    bad = live.http.post("/v1/jobs", json={"dataset_id": meta["id"], "n_clusters": "lots"})
    assert "auto" in problem(bad, 422)["detail"]


def test_result_include_and_exclude(live: Live, fitted: dict) -> None:
    path = f"/v1/jobs/{fitted['job']['id']}/result"
    # The scalars, the metrics, the k path (small: no centres) and the processes that
    # fitted the job are always sent.
    always = {"inertia", "n_iter", "converged", "sigma", "device", "n_clusters", "metrics"}
    always |= {"k_path", "processes"}
    only = live.http.get(path, params={"include": "centroids"}).json()
    assert set(only) == {"centroids"} | always
    less = live.http.get(path, params=[("exclude", "labels"), ("exclude", "history")]).json()
    assert set(less) == {"centroids"} | always
    assert (
        "labels" in problem(live.http.get(path, params={"include": "labels,nope"}), 422)["detail"]
    )


def test_assignments_paged_and_as_npz(live: Live, fitted: dict) -> None:
    path = f"/v1/jobs/{fitted['job']['id']}/assignments"
    download = live.http.get(path, headers={"Accept": "application/x-npz"})
    assert download.status_code == 200
    assert download.headers["content-type"].startswith("application/x-npz")
    whole = sp.load_npz(io.BytesIO(download.content)).tocsr()
    assert whole.shape == (300, 3)
    np.testing.assert_allclose(np.asarray(whole.sum(axis=1)).ravel(), 1.0, atol=1e-5)
    rows = []
    offset, pages = 0, 0
    while True:
        response = live.http.get(path, params={"offset": offset, "limit": 128})
        page = response.json()
        assert page["shape"] == [300, 3] and page["indptr"][0] == 0
        n_rows = len(page["indptr"]) - 1
        csr = (page["values"], page["indices"], page["indptr"])
        rows.append(sp.csr_matrix(csr, shape=(n_rows, 3)))
        pages += 1
        offset += 128
        if offset >= 300:
            assert "link" not in response.headers
            break
        assert f"offset={offset}" in response.headers["link"]
    assert pages == 3
    paged = sp.vstack(rows).tocsr()
    np.testing.assert_allclose(paged.toarray(), whole.toarray(), atol=1e-7)
    labels = live.http.get(f"/v1/jobs/{fitted['job']['id']}/result").json()["labels"]
    np.testing.assert_array_equal(np.asarray(whole.argmax(axis=1)).ravel(), labels)
    empty = live.http.get(path, params={"offset": 400}).json()
    assert empty["indptr"] == [0] and empty["values"] == []


def test_predict_every_body_type(live: Live, fitted: dict) -> None:
    path = f"/v1/jobs/{fitted['job']['id']}/predict"
    points = X[:5] + 0.01
    expected = RBFKMeans(n_clusters=3, random_state=0, device="cpu").fit(X).predict(points)
    as_csv = "\n".join(",".join(map(str, row)) for row in points)
    for content_type, data in (
        ("application/json", json.dumps({"data": points.tolist()}).encode()),
        ("text/csv", as_csv.encode()),
        ("application/x-npy", npy_bytes(points)),
    ):
        response = live.http.post(path, content=data, headers={"Content-Type": content_type})
        assert response.status_code == 200, response.text
        body = response.json()
        np.testing.assert_array_equal(body["labels"], expected)
        soft = body["assignments"]
        assert soft["shape"] == [5, 3] and len(soft["indptr"]) == 6
    wrong = live.http.post(path, json={"data": [[1.0, 2.0, 3.0]]})
    assert "3 features" in problem(wrong, 422)["detail"]
    problem(live.http.post(path, content=b"x", headers={"Content-Type": "text/plain"}), 415)


# ---- datasets ----------------------------------------------------------------------------


def _parquet(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table({f"c{j}": array[:, j] for j in range(array.shape[1])}), buf)
    return buf.getvalue()


def test_every_upload_format_gives_the_same_clustering(live: Live) -> None:
    data = blobs(120, 3, 2, seed=3)
    rows = "\n".join(",".join(repr(float(v)) for v in row) for row in data) + "\n"
    bodies = {
        "json": ("application/json", json.dumps({"data": data.tolist(), "name": "j"}).encode()),
        "csv": ("text/csv", rows.encode()),
        "csv-header": ("text/csv", ("x,y,z\n" + rows).encode()),
        "npy": ("application/x-npy", npy_bytes(data)),
        "parquet": ("application/vnd.apache.parquet", _parquet(data)),
    }
    datasets = {}
    for name, (content_type, body) in bodies.items():
        meta = upload(live, body, content_type, name=name)
        assert (meta["n_samples"], meta["n_features"]) == (120, 3), name
        assert live.http.get(f"/v1/datasets/{meta['id']}").json() == meta
        datasets[name] = meta
    assert datasets["json"]["name"] == "j"  # the body's name wins over the query's
    jobs = {
        name: submit(live, meta["id"], n_clusters=2, random_state=1, assignment="hard")["id"]
        for name, meta in datasets.items()
    }
    labels = {}
    for name, job_id in jobs.items():
        assert wait_status(live, job_id, FINISHED)["status"] == "succeeded"
        labels[name] = live.http.get(f"/v1/jobs/{job_id}/result").json()["labels"]
    for name in bodies:
        assert labels[name] == labels["npy"], name


def test_dataset_listing_dedupe_and_delete(live: Live) -> None:
    body = npy_bytes(blobs(20, 2, 2, seed=11))
    first = send(live, "/v1/datasets", body, "application/x-npy")
    again = send(live, "/v1/datasets", body, "application/x-npy")
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    dataset_id = first.json()["id"]
    listing = live.http.get("/v1/datasets", params={"limit": 1}).json()
    assert listing["items"][0]["id"] == dataset_id and listing["total"] >= 1
    assert live.http.delete(f"/v1/datasets/{dataset_id}").status_code == 204
    problem(live.http.get(f"/v1/datasets/{dataset_id}"), 404)
    assert not (Path(live.settings.data_dir) / "datasets" / f"{dataset_id}.npy").exists()


def test_upload_errors(live: Live) -> None:
    big = npy_bytes(np.zeros((MAX_UPLOAD // 8 + 10, 1)))
    problem(send(live, "/v1/datasets", big, "application/x-npy"), 413)

    def stream() -> Iterator[bytes]:  # chunked, no Content-Length
        for _ in range(64):
            yield b"1.0,2.0\n" * 4096

    problem(send(live, "/v1/datasets", stream(), "text/csv"), 413)
    problem(send(live, "/v1/datasets", b"1,2", "application/xml"), 415)
    ragged = problem(live.http.post("/v1/datasets", json={"data": [[1, 2], [3]]}), 422)
    assert ragged["errors"][0]["field"] == "body.data[1]"
    nan_body = npy_bytes(np.array([[1.0, np.nan]]))
    nan = problem(send(live, "/v1/datasets", nan_body, "application/x-npy"), 422)
    assert "row 0, column 1" in nan["detail"]
    problem(send(live, "/v1/datasets", b"PAR1garbagePAR1", "application/vnd.apache.parquet"), 422)
    problem(live.http.get("/v1/datasets/does-not-exist"), 404)
    assert not list((Path(live.settings.data_dir) / "tmp").iterdir())


# ---- jobs --------------------------------------------------------------------------------


def test_job_errors(live: Live, fitted: dict) -> None:
    dataset_id = fitted["dataset"]["id"]
    too_many_body = {"dataset_id": dataset_id, "n_clusters": 301}
    too_many = problem(live.http.post("/v1/jobs", json=too_many_body), 422)
    assert "n_samples (300)" in too_many["detail"]
    unknown = problem(live.http.post("/v1/jobs", json={"dataset_id": "nope", "n_clusters": 2}), 422)
    assert unknown["errors"][0]["field"] == "body.dataset_id"
    wrong = {"assignment": "sparsemax", "sigma0": -1, "device": "tpu"}
    bad_body = {"dataset_id": dataset_id, "n_clusters": 2, **wrong}
    bad = problem(live.http.post("/v1/jobs", json=bad_body), 422)
    assert {e["field"] for e in bad["errors"]} == {"body.assignment", "body.sigma0", "body.device"}
    # A validator's own message, without pydantic's "Value error, " before it.
    assert not any(e["message"].startswith("Value error") for e in bad["errors"])
    problem(live.http.get("/v1/jobs/unknown"), 404)
    problem(live.http.get("/v1/jobs/unknown/result"), 404)
    problem(live.http.post("/v1/jobs/unknown/cancel"), 404)
    problem(live.http.get("/v1/nowhere"), 404)
    finished = problem(live.http.post(f"/v1/jobs/{fitted['job']['id']}/cancel"), 409)
    assert "succeeded" in finished["detail"]


def test_list_jobs_by_status(live: Live, fitted: dict) -> None:
    page = live.http.get("/v1/jobs", params={"status": "succeeded", "limit": 500}).json()
    assert fitted["job"]["id"] in {job["id"] for job in page["items"]}
    assert all(job["status"] == "succeeded" for job in page["items"])
    first = live.http.get("/v1/jobs", params={"limit": 1}).json()
    assert len(first["items"]) == 1 and first["total"] >= page["total"]


def test_cancel_running_and_queued(live: Live) -> None:
    data = blobs(3000, 8, 8, seed=1)
    meta = upload(live, npy_bytes(data), "application/x-npy")
    slow = {"n_clusters": 8, "cooling": 0.99, "tol": 0.0, "max_iter": 100000, "random_state": 0}
    running = submit(live, meta["id"], **slow)

    def progressing() -> dict | None:
        job = live.http.get(f"/v1/jobs/{running['id']}").json()
        return job if job["status"] == "running" and job["progress"]["iteration"] else None

    job = wait_for(progressing, 90, "the slow job to make progress")
    assert job["progress"]["sigma"] is not None
    waiting = submit(live, meta["id"], **slow)  # the only worker is busy: this one waits
    assert live.http.get(f"/v1/jobs/{waiting['id']}").json()["status"] == "queued"
    canceled = live.http.post(f"/v1/jobs/{waiting['id']}/cancel")
    assert canceled.status_code == 200 and canceled.json()["status"] == "canceled"
    live.http.post(f"/v1/jobs/{running['id']}/cancel").raise_for_status()
    stopped = wait_status(live, running["id"], FINISHED, timeout_s=30)
    assert stopped["status"] == "canceled"
    never = live.http.get(f"/v1/jobs/{waiting['id']}").json()
    assert never["status"] == "canceled" and never["attempts"] == 0 and not never["started_at"]
    problem(live.http.get(f"/v1/jobs/{running['id']}/result"), 409)


def test_delete_job_removes_result(live: Live) -> None:
    meta = upload(live, npy_bytes(blobs(40, 2, 2, seed=5)), "application/x-npy")
    job = submit(live, meta["id"], n_clusters=2, assignment="hard", random_state=0)
    assert wait_status(live, job["id"], FINISHED)["status"] == "succeeded"
    assert live.http.delete(f"/v1/jobs/{job['id']}").status_code == 204
    problem(live.http.get(f"/v1/jobs/{job['id']}"), 404)
    assert not (Path(live.settings.data_dir) / "results" / job["id"]).exists()


# ---- idempotency, auth, probes -----------------------------------------------------------


def test_idempotency_same_and_different_body(live: Live, fitted: dict) -> None:
    body = {"dataset_id": fitted["dataset"]["id"], "n_clusters": 2, "assignment": "hard"}
    headers = {"Idempotency-Key": "e2e-1"}
    first = live.http.post("/v1/jobs", json=body, headers=headers)
    again = live.http.post("/v1/jobs", json=body, headers=headers)
    assert first.status_code == again.status_code == 202
    assert first.json() == again.json() and first.headers["location"] == again.headers["location"]
    other = live.http.post("/v1/jobs", json={**body, "n_clusters": 3}, headers=headers)
    assert problem(other, 422)["type"].endswith("idempotency-key-reused")


def test_idempotency_concurrent(live: Live, fitted: dict) -> None:
    body = {"dataset_id": fitted["dataset"]["id"], "n_clusters": 2, "assignment": "hard"}
    before = live.http.get("/v1/jobs").json()["total"]
    barrier = threading.Barrier(8)

    def post(_: int) -> httpx.Response:
        with httpx.Client(base_url=live.base_url, headers={"X-API-Key": KEY}) as client:
            barrier.wait()
            return client.post("/v1/jobs", json=body, headers={"Idempotency-Key": "e2e-race"})

    with ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(post, range(8)))
    statuses = [r.status_code for r in responses]
    assert set(statuses) <= {202, 409}, statuses
    assert 202 in statuses
    for response in responses:
        if response.status_code == 409:
            assert problem(response, 409)["type"].endswith("idempotency-key-in-progress")
    assert len({r.json()["id"] for r in responses if r.status_code == 202}) == 1
    assert live.http.get("/v1/jobs").json()["total"] == before + 1
    replay = live.http.post("/v1/jobs", json=body, headers={"Idempotency-Key": "e2e-race"})
    assert replay.status_code == 202


def test_auth(live: Live) -> None:
    with httpx.Client(base_url=live.base_url) as anonymous:
        problem(anonymous.get("/v1/jobs"), 401)
        problem(anonymous.get("/v1/datasets", headers={"X-API-Key": "wrong"}), 401)
        ok = anonymous.get("/v1/datasets", headers={"Authorization": f"Bearer {KEY}"})
        assert ok.status_code == 200
        assert anonymous.get("/healthz").status_code == 200
        assert anonymous.get("/readyz").json()["workers"] == 1


def test_metrics_after_jobs(live: Live, fitted: dict) -> None:
    text = live.http.get("/metrics").text
    assert 'route="/v1/jobs/{job_id}"' in text
    succeeded = next(
        line for line in text.splitlines() if line.startswith('rbfkm_jobs{status="succeeded"}')
    )
    assert float(succeeded.split()[-1]) >= 1
    count = next(
        line
        for line in text.splitlines()
        if line.startswith('rbfkm_job_duration_seconds_count{status="succeeded"}')
    )
    assert float(count.split()[-1]) >= 1
    assert "rbfkm_queue_depth" in text and "rbfkm_workers_alive 1.0" in text
