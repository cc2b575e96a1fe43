"""Idempotency keys: the store against a real Redis, and `POST /v1/jobs` with the header."""

from __future__ import annotations

import hashlib
import json

import pytest
import redis
from fastapi.testclient import TestClient

from service.app import create_app
from service.errors import IdempotencyKeyInProgress, IdempotencyKeyReused, InvalidIdempotencyKey
from service.idempotency import IdempotencyStore, StoredResponse, fingerprint
from service.schemas import JobCreate
from service.settings import Settings
from tests.service.conftest import assert_problem, upload

A, B = fingerprint({"n": 1}), fingerprint({"n": 2})
DONE = StoredResponse(202, {"id": "j1"}, {"Location": "/v1/jobs/j1"})


@pytest.fixture
def store(redis_client: redis.Redis) -> IdempotencyStore:
    return IdempotencyStore(redis_client, prefix="t", ttl_s=3600, pending_s=30)


# ---- the store ---------------------------------------------------------------------------


def test_fingerprint_ignores_key_order_and_whitespace_only() -> None:
    assert fingerprint({"a": 1, "b": [1, 2]}) == fingerprint({"b": [1, 2], "a": 1})
    assert fingerprint({"a": 1}) != fingerprint({"a": 2})
    assert fingerprint({"a": 1}) != fingerprint({"a": 1.5})
    assert fingerprint([1, 2]) != fingerprint([2, 1])
    assert len(fingerprint({})) == 64
    with pytest.raises(ValueError):
        fingerprint({"a": float("nan")})


def test_first_claim_goes_ahead_under_a_pending_marker(
    store: IdempotencyStore, redis_client: redis.Redis
) -> None:
    assert store.begin("s", "k", A) is None
    name = f"t:idem:s:{hashlib.sha256(b'k').hexdigest()}"
    assert json.loads(redis_client.get(name)) == {"state": "pending", "fingerprint": A}
    assert 0 < redis_client.ttl(name) <= store.pending_s


def test_same_key_same_body_replays_the_stored_response(
    store: IdempotencyStore, redis_client: redis.Redis
) -> None:
    assert store.begin("s", "k", A) is None
    store.complete("s", "k", A, DONE)
    assert store.begin("s", "k", A) == DONE
    assert store.begin("s", "k", A) == DONE, "every retry replays"
    (name,) = redis_client.keys("t:idem:*")
    assert store.pending_s < redis_client.ttl(name) <= store.ttl_s


def test_same_key_other_body_is_refused(store: IdempotencyStore) -> None:
    assert store.begin("s", "k", A) is None
    with pytest.raises(IdempotencyKeyReused) as pending:
        store.begin("s", "k", B)
    store.complete("s", "k", A, DONE)
    with pytest.raises(IdempotencyKeyReused) as done:
        store.begin("s", "k", B)
    for error in (pending.value, done.value):
        assert error.field == "header.idempotency-key" and "'k'" in error.detail
    assert store.begin("s", "k", A) == DONE, "the refusal leaves the stored response"


def test_a_key_still_being_accepted_is_in_progress(store: IdempotencyStore) -> None:
    assert store.begin("s", "k", A) is None
    with pytest.raises(IdempotencyKeyInProgress, match="still being accepted"):
        store.begin("s", "k", A)


def test_keys_are_scoped(store: IdempotencyStore) -> None:
    assert store.begin("alpha", "k", A) is None
    store.complete("alpha", "k", A, DONE)
    assert store.begin("beta", "k", B) is None, "another scope's key is another key"
    other = IdempotencyStore(store.client, prefix="u", ttl_s=60)
    assert other.begin("alpha", "k", B) is None, "and so is another prefix's"
    assert store.begin("alpha", "k", A) == DONE


def test_abandon_lets_a_retry_run_again(store: IdempotencyStore) -> None:
    assert store.begin("s", "k", A) is None
    store.abandon("s", "k")
    assert store.begin("s", "k", B) is None, "nothing of the failed claim is left"
    store.abandon("s", "never-claimed")


@pytest.mark.parametrize("key", ["", "k" * 256])
def test_keys_must_be_1_to_255_characters(store: IdempotencyStore, key: str) -> None:
    with pytest.raises(InvalidIdempotencyKey, match="1 to 255 characters"):
        store.begin("s", key, A)
    assert store.client.keys("t:idem:*") == []


def test_a_255_character_key_is_stored_by_its_hash(store: IdempotencyStore) -> None:
    key = "k" * 255
    assert store.begin("s", key, A) is None
    assert store.client.keys("t:idem:*") == [
        f"t:idem:s:{hashlib.sha256(key.encode()).hexdigest()}".encode()
    ]


# ---- over HTTP -----------------------------------------------------------------------------


def test_idempotency_key(client: TestClient, settings: Settings) -> None:
    meta = upload(client)
    body = {"dataset_id": meta["id"], "n_clusters": 2, "random_state": 1}
    key = {"Idempotency-Key": "abc"}
    first = client.post("/v1/jobs", json=body, headers=key)
    again = client.post("/v1/jobs", json=dict(reversed(body.items())), headers=key)
    assert first.status_code == again.status_code == 202
    assert first.json() == again.json()
    assert first.headers["location"] == again.headers["location"]
    assert again.headers["retry-after"] == "1"
    assert client.get("/v1/jobs").json()["total"] == 1
    other = client.post("/v1/jobs", json={**body, "n_clusters": 3}, headers=key)
    assert "different body" in assert_problem(other, 422)["detail"]
    assert client.post("/v1/jobs", json=body).json()["id"] != first.json()["id"]


def test_a_retry_after_a_lost_response_finds_the_job_it_created(
    client: TestClient, settings: Settings
) -> None:
    # The API died after queueing the job and before storing the response: the marker
    # lapses, and the retry must find that job rather than queue a second one.
    meta = upload(client)
    body = {"dataset_id": meta["id"], "n_clusters": 2}
    key = {"Idempotency-Key": "lost-response"}
    first = client.post("/v1/jobs", json=body, headers=key).json()
    store = redis.Redis.from_url(settings.redis_url)
    store.delete(*store.keys(f"{settings.key_prefix}:idem:*"))
    again = client.post("/v1/jobs", json=body, headers=key)
    assert again.status_code == 202 and again.json()["id"] == first["id"]
    assert client.get("/v1/jobs").json()["total"] == 1


def test_defaults_spelt_out_are_the_same_body(client: TestClient) -> None:
    meta = upload(client)
    body = {"dataset_id": meta["id"], "n_clusters": 2}
    key = {"Idempotency-Key": "defaults"}
    first = client.post("/v1/jobs", json=body, headers=key).json()
    spelt = client.post("/v1/jobs", json={**_defaults(), **body}, headers=key)
    assert spelt.status_code == 202 and spelt.json()["id"] == first["id"]


def test_idempotency_key_in_flight_is_409(client: TestClient, settings: Settings) -> None:
    meta = upload(client)
    body = {"dataset_id": meta["id"], "n_clusters": 2}
    store = IdempotencyStore(
        redis.Redis.from_url(settings.redis_url), prefix=settings.key_prefix, ttl_s=60
    )
    full = {**body, **{k: v for k, v in _defaults().items() if k not in body}}
    assert store.begin("default", "busy", fingerprint(full)) is None  # a request in flight
    response = client.post("/v1/jobs", json=body, headers={"Idempotency-Key": "busy"})
    assert assert_problem(response, 409)["type"].endswith("idempotency-key-in-progress")
    assert response.headers["retry-after"] == "1"
    assert client.get("/v1/jobs").json()["total"] == 0


def _defaults() -> dict:
    return JobCreate(dataset_id="x", n_clusters=1).model_dump(mode="json")


@pytest.mark.parametrize("key", ["", "k" * 256])
def test_a_bad_key_is_a_documented_422(client: TestClient, key: str) -> None:
    meta = upload(client)
    body = {"dataset_id": meta["id"], "n_clusters": 2}
    response = client.post("/v1/jobs", json=body, headers={"Idempotency-Key": key})
    problem = assert_problem(response, 422)
    assert problem["errors"][0]["field"].lower() == "header.idempotency-key"
    assert client.get("/v1/jobs").json()["total"] == 0
    operation = client.get("/openapi.json").json()["paths"]["/v1/jobs"]["post"]
    (param,) = [p for p in operation["parameters"] if p["name"] == "Idempotency-Key"]
    (string,) = [s for s in param["schema"]["anyOf"] if s.get("type") == "string"]
    assert (string["minLength"], string["maxLength"]) == (1, 255)
    assert "400" not in operation["responses"] and "422" in operation["responses"]


def test_the_longest_key_is_accepted(client: TestClient) -> None:
    meta = upload(client)
    body = {"dataset_id": meta["id"], "n_clusters": 2}
    response = client.post("/v1/jobs", json=body, headers={"Idempotency-Key": "k" * 255})
    assert response.status_code == 202, response.text


def test_idempotency_is_scoped_per_tenant(settings: Settings) -> None:
    update = {"api_keys": {"acme": "alpha", "umbrella": "beta"}}
    with TestClient(create_app(settings.model_copy(update=update))) as two:
        alpha = {"X-API-Key": "alpha", "Idempotency-Key": "same"}
        beta = {"Authorization": "Bearer beta", "Idempotency-Key": "same"}
        mine = upload(two, headers={"X-API-Key": "alpha"})
        theirs = upload(two, headers={"X-API-Key": "beta"})
        a = two.post("/v1/jobs", json={"dataset_id": mine["id"], "n_clusters": 2}, headers=alpha)
        b = two.post("/v1/jobs", json={"dataset_id": theirs["id"], "n_clusters": 3}, headers=beta)
        assert b.status_code == 202 and b.json()["id"] != a.json()["id"]
        again = two.post(
            "/v1/jobs", json={"dataset_id": mine["id"], "n_clusters": 2}, headers=alpha
        )
        assert again.json()["id"] == a.json()["id"]


def test_the_keys_of_one_tenant_share_its_idempotency_keys(secured: TestClient) -> None:
    meta = upload(secured, headers={"X-API-Key": "alpha"})
    body = {"dataset_id": meta["id"], "n_clusters": 2}
    first = secured.post(
        "/v1/jobs", json=body, headers={"X-API-Key": "alpha", "Idempotency-Key": "k"}
    )
    again = secured.post(
        "/v1/jobs", json=body, headers={"X-API-Key": "beta", "Idempotency-Key": "k"}
    )
    assert again.status_code == 202 and again.json()["id"] == first.json()["id"]


def test_one_key_by_either_header_is_one_scope(secured: TestClient) -> None:
    meta = upload(secured, headers={"X-API-Key": "alpha"})
    body = {"dataset_id": meta["id"], "n_clusters": 2}
    first = secured.post(
        "/v1/jobs", json=body, headers={"X-API-Key": "alpha", "Idempotency-Key": "both"}
    )
    again = secured.post(
        "/v1/jobs", json=body, headers={"Authorization": "Bearer alpha", "Idempotency-Key": "both"}
    )
    assert again.status_code == 202 and again.json()["id"] == first.json()["id"]
