"""Per-tenant quotas: stored bytes before an upload, unfinished jobs before a submit."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.settings import Settings
from tests.service.conftest import assert_problem, npy_bytes

NPY = {"Content-Type": "application/x-npy"}
ROWS = np.arange(200, dtype=np.float64).reshape(100, 2)  # 1728 bytes as .npy


@pytest.fixture
def capped(settings: Settings) -> Iterator[TestClient]:
    """Tenant `small` may store 4000 bytes and run 2 jobs; `big` has the service-wide
    quotas (none for bytes, 3 jobs)."""
    tenants = {
        "small": {"keys": ["s"], "max_stored_bytes": 4000, "max_active_jobs": 2},
        "big": "b",
    }
    update = {"api_keys": tenants, "tenant_max_active_jobs": 3}
    with TestClient(create_app(settings.model_copy(update=update))) as test_client:
        yield test_client


def _upload(client: TestClient, key: str, array: np.ndarray) -> object:
    return client.post("/v1/datasets", content=npy_bytes(array), headers={**NPY, "X-API-Key": key})


def test_stored_bytes_are_capped_until_something_is_deleted(capped: TestClient) -> None:
    first = _upload(capped, "s", ROWS)
    second = _upload(capped, "s", ROWS + 1)
    assert first.status_code == second.status_code == 201
    assert first.json()["stored_bytes"] == len(npy_bytes(ROWS))
    over = _upload(capped, "s", ROWS + 2)
    problem = assert_problem(over, 429)
    assert over.headers["retry-after"] == "60"
    assert problem["type"].endswith("quota-exceeded")
    assert "quota of 4000 bytes" in problem["detail"] and "DELETE" in problem["detail"]
    assert _upload(capped, "b", ROWS + 2).status_code == 201  # another tenant is not held up
    deleted = capped.delete(f"/v1/datasets/{first.json()['id']}", headers={"X-API-Key": "s"})
    assert deleted.status_code == 204
    assert _upload(capped, "s", ROWS + 2).status_code == 201


def test_a_body_declared_over_the_quota_is_refused_before_it_is_read(
    capped: TestClient, settings: Settings
) -> None:
    big = npy_bytes(np.zeros((1000, 2)))
    response = capped.post("/v1/datasets", content=big, headers={**NPY, "X-API-Key": "s"})
    assert_problem(response, 429)
    spool = settings.data_dir / "tmp"
    assert not spool.exists() or not any(spool.iterdir())  # nothing was spooled or kept


def test_unfinished_jobs_are_capped_per_tenant(capped: TestClient) -> None:
    dataset = _upload(capped, "s", ROWS).json()
    body = {"dataset_id": dataset["id"], "n_clusters": 2}
    headers = {"X-API-Key": "s"}
    jobs = [capped.post("/v1/jobs", json=body, headers=headers) for _ in range(2)]
    assert [job.status_code for job in jobs] == [202, 202]
    over = capped.post("/v1/jobs", json=body, headers=headers)
    problem = assert_problem(over, 429)
    assert over.headers["retry-after"] == "1"
    assert "2 queued or running jobs" in problem["detail"]
    cancel = capped.post(f"/v1/jobs/{jobs[0].json()['id']}/cancel", headers=headers)
    assert cancel.json()["status"] == "canceled"
    assert capped.post("/v1/jobs", json=body, headers=headers).status_code == 202


def test_a_refused_job_releases_its_idempotency_key(capped: TestClient) -> None:
    dataset = _upload(capped, "s", ROWS).json()
    body = {"dataset_id": dataset["id"], "n_clusters": 2}
    for _ in range(2):
        capped.post("/v1/jobs", json=body, headers={"X-API-Key": "s"})
    keyed = {"X-API-Key": "s", "Idempotency-Key": "retry-me"}
    assert capped.post("/v1/jobs", json=body, headers=keyed).status_code == 429
    assert capped.post("/v1/jobs", json=body, headers=keyed).status_code == 429  # not a 409
    listed = capped.get("/v1/jobs", headers={"X-API-Key": "s"}).json()
    capped.post(f"/v1/jobs/{listed['items'][0]['id']}/cancel", headers={"X-API-Key": "s"})
    assert capped.post("/v1/jobs", json=body, headers=keyed).status_code == 202
