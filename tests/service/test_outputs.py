"""A job's `output`: its results written as Parquet to an S3-compatible server on loopback
(moto's server mode), by a real worker with the real engine and Redis."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow.parquet as pq
import pytest
import redis
from fastapi.testclient import TestClient

from service.app import create_app
from service.formats import METADATA_KEY
from service.outputs import FILES, OutputWriter
from service.queue import JobQueue
from service.results import ResultStore
from service.settings import Settings
from service.worker import Worker, dataset_loader
from tests.service.conftest import (
    assert_problem,
    blobs,
    live_server,
    make_settings,
    private_db,
    s3_client,
    s3_options,
    upload,
    wait_for,
)

PARAMS = {"n_clusters": 3, "random_state": 0, "max_iter": 40}


@pytest.fixture
def store_settings(settings: Settings, s3_endpoint: str) -> Settings:
    return settings.model_copy(
        update={"url_allowlist": ["127.0.0.1"], "storage_options": s3_options(s3_endpoint)}
    )


@pytest.fixture
def bucket(s3_endpoint: str) -> str:
    s3_client(s3_endpoint).create_bucket(Bucket="results")
    return "results"


def read_table(endpoint: str, url: str) -> Any:
    bucket, key = url.removeprefix("s3://").split("/", 1)
    body = s3_client(endpoint).get_object(Bucket=bucket, Key=key)["Body"].read()
    return pq.read_table(io.BytesIO(body))


def run_job(
    redis_client: redis.Redis, store_settings: Settings, output: str, writer: bool = True
) -> tuple[JobQueue, ResultStore, str]:
    """One job with ``output``, run to its end by an in-process worker."""
    data_dir = store_settings.data_dir
    (data_dir / "datasets").mkdir(parents=True, exist_ok=True)
    np.save(data_dir / "datasets" / "ds.npy", blobs(60, 2, 3).astype(np.float32))
    queue = JobQueue(redis_client, prefix="out")
    results = ResultStore(data_dir)
    job_id = queue.submit("ds", {**PARAMS, "output": output}, tenant="acme")["id"]
    assert queue.get(job_id)["output"] == {"url": output, "status": "pending"}
    worker = Worker(
        queue,
        results,
        dataset_loader(data_dir),
        device="cpu",
        lock_dir=data_dir,
        write_output=OutputWriter(results, store_settings) if writer else None,
    )
    assert worker.run_once(block_ms=200) == job_id
    return queue, results, job_id


def test_the_worker_writes_the_results_as_parquet(
    redis_client: redis.Redis, store_settings: Settings, s3_endpoint: str, bucket: str
) -> None:
    queue, results, job_id = run_job(redis_client, store_settings, f"s3://{bucket}/run-1")
    job = queue.get(job_id)
    assert job["status"] == "succeeded"
    files = [f"s3://{bucket}/run-1/{name}" for name in FILES]
    assert job["output"] == {"url": f"s3://{bucket}/run-1", "status": "written", "files": files}
    labels = read_table(s3_endpoint, files[0])
    assert labels.column_names == ["row", "label"]
    np.testing.assert_array_equal(labels["label"].to_numpy(), results.labels(job_id))
    centroids = read_table(s3_endpoint, files[1])
    np.testing.assert_allclose(
        np.column_stack([centroids[f"f{j}"].to_numpy() for j in range(2)]),
        results.centroids(job_id),
    )
    assignments = read_table(s3_endpoint, files[2])
    assert assignments.column_names == ["row", "cluster", "weight"]
    assert assignments.num_rows == results.assignments(job_id).nnz
    assert b'"job_id": "' + job_id.encode() in assignments.schema.metadata[METADATA_KEY]


@pytest.mark.parametrize("writer", [True, False])
def test_a_failed_write_is_recorded_and_the_result_kept(
    redis_client: redis.Redis, store_settings: Settings, writer: bool
) -> None:
    queue, results, job_id = run_job(
        redis_client, store_settings, "s3://no-such-bucket/x/", writer=writer
    )
    job = queue.get(job_id)
    assert job["status"] == "succeeded"
    assert job["output"]["status"] == "failed"
    assert job["output"]["error"]
    if writer:
        assert "does not exist" in job["output"]["error"]
    assert results.labels(job_id).shape == (60,)


def test_a_job_that_ends_without_a_result_skips_its_output(redis_client: redis.Redis) -> None:
    queue = JobQueue(redis_client, prefix="out")
    job_id = queue.submit("ds", {**PARAMS, "output": "s3://b/p/"})["id"]
    queue.cancel(job_id)
    assert queue.get(job_id)["output"] == {"url": "s3://b/p/", "status": "skipped"}


def test_job_creation_checks_the_output(settings: Settings, store_settings: Settings) -> None:
    with TestClient(create_app(settings)) as client:
        dataset = upload(client)["id"]
        body = {"dataset_id": dataset, "n_clusters": 2}
        wrong = client.post("/v1/jobs", json={**body, "output": "https://example.org/out/"})
        assert assert_problem(wrong, 422)["errors"][0]["field"] == "body.output"
        unconfigured = client.post("/v1/jobs", json={**body, "output": "s3://results/p/"})
        problem = assert_problem(unconfigured, 422)
        assert problem["type"].endswith("not-configured")
        assert problem["errors"][0]["field"] == "body.output"
    strict = store_settings.model_copy(update={"url_allowlist": []})
    with TestClient(create_app(strict)) as client:
        refused = client.post("/v1/jobs", json={**body, "output": "s3://results/p/"})
        assert assert_problem(refused, 422)["errors"][0]["message"] == "loopback address"
    with TestClient(create_app(store_settings)) as client:
        job = client.post("/v1/jobs", json={**body, "output": "s3://results/p/"})
        assert job.status_code == 202, job.text
        assert job.json()["output"] == {
            "url": "s3://results/p/",
            "status": "pending",
            "files": None,
            "error": None,
        }
        assert job.json()["params"]["output"] == "s3://results/p/"


@pytest.mark.slow
def test_read_from_and_written_back_to_the_object_store_end_to_end(
    redis_server: str, tmp_path: Path, s3_endpoint: str
) -> None:
    """A live server and worker: a dataset read from the object store, the job's results
    written back to it."""
    s3 = s3_client(s3_endpoint)
    s3.create_bucket(Bucket="platform")
    sink = io.BytesIO()
    np.save(sink, blobs(300, 4, 3))
    s3.put_object(Bucket="platform", Key="in/points.npy", Body=sink.getvalue())
    with private_db(redis_server, 11) as redis_url:
        settings = make_settings(
            redis_url,
            tmp_path / "data",
            url_allowlist=["127.0.0.1"],
            storage_options=s3_options(s3_endpoint),
        )
        with live_server(settings, tmp_path) as base, httpx.Client(base_url=base) as http:
            dataset = http.post("/v1/datasets", json={"source": "s3://platform/in/points.npy"})
            assert dataset.status_code == 201, dataset.text
            assert dataset.json()["n_samples"] == 300
            job = http.post(
                "/v1/jobs",
                json={**PARAMS, "dataset_id": dataset.json()["id"], "output": "s3://platform/out/"},
            ).json()

            def ended() -> Any:
                current = http.get(f"/v1/jobs/{job['id']}").json()
                return current if current["status"] in ("succeeded", "failed") else None

            done = wait_for(ended, 120, "the job")
    assert done["status"] == "succeeded", done
    assert done["output"]["status"] == "written", done["output"]
    labels = read_table(s3_endpoint, "s3://platform/out/labels.parquet")
    assert labels.num_rows == 300
