"""Tenants: the forms of RBFKM_API_KEYS, the keyring, and two tenants kept apart over HTTP.

The isolation matrix runs against a real uvicorn server with a real worker and Redis: every
route that addresses a dataset or a job by id is called by its owner, by another tenant and
by an admin, and every list, upload dedupe and idempotency key is checked for leaks.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from service.settings import Settings
from service.tenants import (
    ADMIN_TENANT,
    DEFAULT_TENANT,
    Caller,
    Keyring,
    Quota,
    key_digest,
    normalise_admin_keys,
    normalise_api_keys,
)
from tests.service.conftest import (
    blobs,
    live_server,
    make_settings,
    npy_bytes,
    private_db,
    wait_for,
)

# ---- the configuration ---------------------------------------------------------------------


def test_the_accepted_forms_of_the_api_keys() -> None:
    assert normalise_api_keys("") == normalise_api_keys([]) == normalise_api_keys(None) == {}
    none = {"max_stored_bytes": 0, "max_active_jobs": 0}
    flat = {DEFAULT_TENANT: {"keys": ["a", "b"], **none}}
    assert normalise_api_keys("a, b") == normalise_api_keys('["a", "b"]') == flat
    assert normalise_api_keys(["a", "b"]) == flat
    tenants = normalise_api_keys(
        '{"acme": "a", "umbrella": ["b", "c"], "initech": {"keys": "d", "max_active_jobs": 2}}'
    )
    assert tenants == {
        "acme": {"keys": ["a"], **none},
        "umbrella": {"keys": ["b", "c"], **none},
        "initech": {"keys": ["d"], "max_stored_bytes": 0, "max_active_jobs": 2},
    }
    assert normalise_api_keys(tenants) == tenants  # idempotent: settings and keyring both call it


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('{"bad name": "k"}', "tenant name 'bad name'"),
        ('{"admin": "k"}', "reserved"),
        ('{"a": []}', "non-empty list"),
        ('{"a": [""]}', "non-empty string"),
        ('{"a": "sha256:abc"}', "64 hex digits"),
        ('{"a": {"keys": ["k"], "max_jobs": 1}}', "unknown fields ['max_jobs']"),
        ('{"a": {"keys": ["k"], "max_active_jobs": -1}}', "integer >= 0"),
        ('{"a": {"keys": ["k"], "max_active_jobs": true}}', "integer >= 0"),
        ('{"a": "k", "b": "k"}', "both tenants 'a' and 'b'"),
        ('{"a": "k", "b": "sha256:' + hashlib.sha256(b"k").hexdigest() + '"}', "both tenants"),
        (42, "JSON object of tenants"),
    ],
)
def test_a_bad_configuration_says_what_to_fix(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        normalise_api_keys(value)


def test_a_bad_configuration_stops_the_settings(settings: Settings) -> None:
    with pytest.raises(ValueError, match="reserved"):
        Settings(REDIS_URL="redis://x", api_keys='{"admin": "k"}')
    with pytest.raises(ValueError, match="64 hex digits"):
        Settings(REDIS_URL="redis://x", admin_keys="sha256:00")


def test_admin_keys_are_a_list() -> None:
    assert normalise_admin_keys("r1, r2") == normalise_admin_keys('["r1","r2"]') == ["r1", "r2"]
    assert normalise_admin_keys("") == normalise_admin_keys(None) == []
    with pytest.raises(ValueError):
        normalise_admin_keys('{"a": "b"}')


def test_a_key_is_compared_by_its_digest() -> None:
    digest = hashlib.sha256(b"secret").hexdigest()
    assert key_digest("secret") == key_digest(f"sha256:{digest}") == digest
    assert key_digest(f"sha256:{digest.upper()}") == digest


def test_the_keyring_authenticates_each_form() -> None:
    ring = Keyring(
        {"acme": "a", "umbrella": [f"sha256:{hashlib.sha256(b'u').hexdigest()}"]}, ["root"]
    )
    assert ring.authenticate("a") == Caller("acme")
    assert ring.authenticate("u") == Caller("umbrella")
    assert ring.authenticate("root") == Caller(ADMIN_TENANT, admin=True)
    assert ring.authenticate(None) is ring.authenticate("") is ring.authenticate("x") is None
    assert ring.names == ["acme", "umbrella", ADMIN_TENANT]
    assert not ring.open
    assert Keyring({}).open and Keyring({}).authenticate(None) == Caller(DEFAULT_TENANT)
    assert Keyring({}).names == [DEFAULT_TENANT]


def test_admin_keys_alone_still_require_a_key() -> None:
    ring = Keyring({}, ["root"])
    assert not ring.open and ring.authenticate(None) is None
    assert ring.authenticate("root") == Caller(ADMIN_TENANT, admin=True)


def test_quotas_fall_back_to_the_service_wide_ones() -> None:
    ring = Keyring(
        {"own": {"keys": ["o"], "max_active_jobs": 2}, "plain": "p"},
        default_quota=Quota(max_stored_bytes=100, max_active_jobs=5),
    )
    assert ring.quota("own") == Quota(max_stored_bytes=100, max_active_jobs=2)
    assert ring.quota("plain") == Quota(max_stored_bytes=100, max_active_jobs=5)
    assert Keyring({}).quota(DEFAULT_TENANT) == Quota(0, 0)


def test_what_a_caller_sees() -> None:
    acme = Caller("acme")
    assert acme.sees("acme") and not acme.sees("umbrella") and not acme.sees(None)
    assert Caller(DEFAULT_TENANT).sees(None)  # records older than tenants are the default's
    assert Caller(ADMIN_TENANT, admin=True).sees("umbrella")
    assert acme.scope == "acme" and Caller(ADMIN_TENANT, admin=True).scope is None


# ---- two tenants over HTTP -----------------------------------------------------------------

KEYS = {"acme": "key-acme", "umbrella": "key-umbrella", "admin": "key-root"}
X = blobs(120, 2, 3, seed=3)


@dataclass
class Live:
    clients: dict[str, httpx.Client]
    settings: Settings

    def __getitem__(self, who: str) -> httpx.Client:
        return self.clients[who]


@pytest.fixture(scope="module")
def live(redis_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with private_db(redis_server, 6) as url:
        settings = make_settings(
            url,
            tmp_path_factory.mktemp("tenants"),
            key_prefix="tenants",
            api_keys={"acme": KEYS["acme"], "umbrella": [KEYS["umbrella"]]},
            admin_keys=[KEYS["admin"]],
        )
        with live_server(settings, tmp_path_factory.mktemp("tmp")) as base:
            clients = {
                who: httpx.Client(base_url=base, headers={"X-API-Key": key}, timeout=60)
                for who, key in KEYS.items()
            }
            ready = clients["acme"]
            wait_for(lambda: ready.get("/readyz").status_code == 200, 120, "a worker")
            yield Live(clients, settings)
            for client in clients.values():
                client.close()


def _upload(client: httpx.Client, body: bytes = npy_bytes(X)) -> httpx.Response:
    return client.post("/v1/datasets", content=body, headers={"Content-Type": "application/x-npy"})


def _succeeded_job(client: httpx.Client, dataset_id: str) -> dict[str, Any]:
    body = {"dataset_id": dataset_id, "n_clusters": 3, "assignment": "hard", "random_state": 0}
    job = client.post("/v1/jobs", json=body).json()

    def done() -> dict[str, Any] | None:
        polled = client.get(f"/v1/jobs/{job['id']}").json()
        return polled if polled["status"] in ("succeeded", "failed", "canceled") else None

    finished = wait_for(done, 120, "the job")
    assert finished["status"] == "succeeded", finished
    return finished


def _by_id_routes(dataset_id: str, job_id: str) -> list[tuple[str, str, dict[str, Any]]]:
    """Every route that addresses a dataset or a job by id (deletes last)."""
    csv = {"content": b"0,0\n1,1\n", "headers": {"Content-Type": "text/csv"}}
    return [
        ("GET", f"/v1/datasets/{dataset_id}", {}),
        ("GET", f"/v1/jobs/{job_id}", {}),
        ("GET", f"/v1/jobs/{job_id}/result", {}),
        ("GET", f"/v1/jobs/{job_id}/assignments", {}),
        ("GET", f"/v1/jobs/{job_id}/assignments", {"headers": {"Accept": "application/x-npz"}}),
        ("GET", f"/v1/jobs/{job_id}/projection", {}),
        ("POST", f"/v1/jobs/{job_id}/predict", csv),
        ("POST", f"/v1/jobs/{job_id}/cancel", {}),
        ("DELETE", f"/v1/jobs/{job_id}", {}),
        ("DELETE", f"/v1/datasets/{dataset_id}", {}),
    ]


def _ids(client: httpx.Client, path: str) -> set[str]:
    items = client.get(path, params={"limit": 1000}).json()["items"]
    return {item.get("id") or item["job_id"] for item in items}


def test_two_tenants_never_see_each_other(live: Live) -> None:
    acme, umbrella = live["acme"], live["umbrella"]
    mine = _upload(acme).json()
    job = _succeeded_job(acme, mine["id"])
    assert mine["tenant"] == job["tenant"] == "acme"

    # Another tenant: every by-id route is a 404 exactly like an id that never existed.
    for method, path, extra in _by_id_routes(mine["id"], job["id"]):
        theirs = umbrella.request(method, path, **extra)
        unknown = path.replace(job["id"], "0" * 32).replace(mine["id"], "0" * 32)
        never = umbrella.request(method, unknown, **extra)
        assert theirs.status_code == never.status_code == 404, (method, path, theirs.text)
        assert theirs.json()["type"] == never.json()["type"]
    # ... nothing leaks through the lists, ...
    for path in ("/v1/datasets", "/v1/jobs", "/v1/jobs/dead-letters"):
        assert not _ids(umbrella, path) & {mine["id"], job["id"]}, path
    assert umbrella.get("/v1/jobs", params={"status": "succeeded"}).json()["total"] == 0
    # ... a job cannot name the other tenant's dataset, ...
    refused = umbrella.post("/v1/jobs", json={"dataset_id": mine["id"], "n_clusters": 2})
    assert refused.status_code == 422 and refused.json()["type"].endswith("unknown-dataset")
    # ... and the same bytes are the other tenant's own dataset.
    copy = _upload(umbrella)
    assert copy.status_code == 201 and copy.json()["id"] != mine["id"]
    assert copy.json()["tenant"] == "umbrella"

    # The owner still has everything, untouched by the other tenant's deletes and cancels.
    for method, path, extra in _by_id_routes(mine["id"], job["id"])[:7]:
        assert acme.request(method, path, **extra).status_code == 200, (method, path)
    assert acme.get(f"/v1/jobs/{job['id']}").json()["status"] == "succeeded"


def test_an_admin_sees_and_manages_every_tenant(live: Live) -> None:
    acme, umbrella, admin = live["acme"], live["umbrella"], live["admin"]
    a = _upload(acme, npy_bytes(X + 1)).json()
    u = _upload(umbrella, npy_bytes(X + 2)).json()
    job = _succeeded_job(umbrella, u["id"])
    assert {a["id"], u["id"]} <= _ids(admin, "/v1/datasets")
    assert job["id"] in _ids(admin, "/v1/jobs")
    for method, path, extra in _by_id_routes(u["id"], job["id"])[:7]:
        assert admin.request(method, path, **extra).status_code == 200, (method, path)
    # What an admin creates is the admin tenant's; it may run jobs on any tenant's data.
    own = _upload(admin, npy_bytes(X + 3)).json()
    assert own["tenant"] == ADMIN_TENANT and own["id"] not in _ids(acme, "/v1/datasets")
    on_acme = admin.post("/v1/jobs", json={"dataset_id": a["id"], "n_clusters": 2})
    assert on_acme.status_code == 202 and on_acme.json()["tenant"] == ADMIN_TENANT
    assert admin.delete(f"/v1/datasets/{a['id']}").status_code == 204
    assert acme.get(f"/v1/datasets/{a['id']}").status_code == 404


def test_idempotency_keys_are_per_tenant(live: Live) -> None:
    acme, umbrella = live["acme"], live["umbrella"]
    first = {"Idempotency-Key": "shared-key"}
    a = _upload(acme, npy_bytes(X + 4)).json()
    u = _upload(umbrella, npy_bytes(X + 4)).json()
    ja = acme.post("/v1/jobs", json={"dataset_id": a["id"], "n_clusters": 2}, headers=first)
    ju = umbrella.post("/v1/jobs", json={"dataset_id": u["id"], "n_clusters": 3}, headers=first)
    assert ja.status_code == ju.status_code == 202 and ja.json()["id"] != ju.json()["id"]


def test_metrics_count_each_tenant(live: Live) -> None:
    live["umbrella"].get("/v1/jobs")
    text = live["acme"].get("/metrics").text
    assert 'rbfkm_tenant_http_requests_total{status="200",tenant="umbrella"}' in text
    assert 'rbfkm_tenant_jobs{status="succeeded",tenant="acme"}' in text
    assert 'tenant="admin"' in text
