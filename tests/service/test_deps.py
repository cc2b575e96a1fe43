"""FastAPI dependencies: the caller from its API key, and the stores the app factory built.

`require_caller` and the store getters are exercised through a real app from `create_app`
with one extra route that reports what the dependencies handed it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Annotated, Any

import pytest
from fastapi import Depends, FastAPI
from fastapi.testclient import TestClient

from service.app import create_app
from service.deps import (
    CurrentCaller,
    Datasets,
    Idempotency,
    Queue,
    Results,
    Uploads,
    get_settings,
)
from service.settings import Settings
from tests.service.conftest import assert_problem


def _with_probe(app: FastAPI) -> FastAPI:
    """`app` plus `GET /probe`, which says what each dependency resolved to."""

    @app.get("/probe")
    def probe(
        caller: CurrentCaller,
        settings: Annotated[Settings, Depends(get_settings)],
        datasets: Datasets,
        uploads: Uploads,
        queue: Queue,
        results: Results,
        idempotency: Idempotency,
    ) -> dict[str, Any]:
        state = app.state
        return {
            "caller": [caller.tenant, caller.admin],
            "settings": settings is state.settings,
            "datasets": datasets is state.datasets,
            "uploads": uploads is state.uploads,
            "queue": queue is state.queue_factory(),
            "results": results is state.results,
            "idempotency": idempotency is state.idempotency,
        }

    return app


GAMMA_DIGEST = hashlib.sha256(b"gamma").hexdigest()
TENANTS = {"acme": "alpha", "umbrella": ["beta", f"sha256:{GAMMA_DIGEST}"]}


@pytest.fixture
def keyed(settings: Settings) -> Iterator[TestClient]:
    """Two tenants (one key given by its digest) and an admin key."""
    update = {"api_keys": TENANTS, "admin_keys": ["root"]}
    with TestClient(_with_probe(create_app(settings.model_copy(update=update)))) as test_client:
        yield test_client


def _caller(client: TestClient, **headers: str) -> list[Any]:
    return client.get("/probe", headers=headers).json()["caller"]


def test_api_keys(secured: TestClient) -> None:
    body = assert_problem(secured.get("/v1/datasets"), 401)
    assert "API key" in body["detail"]
    assert_problem(secured.get("/v1/jobs", headers={"X-API-Key": "gamma"}), 401)
    assert_problem(secured.get("/v1/jobs", headers={"Authorization": "Bearer gamma"}), 401)
    assert secured.get("/v1/jobs", headers={"X-API-Key": "alpha"}).status_code == 200
    assert secured.get("/v1/jobs", headers={"Authorization": "Bearer beta"}).status_code == 200


def test_a_401_says_how_to_authenticate(secured: TestClient) -> None:
    response = secured.get("/v1/jobs")
    body = assert_problem(response, 401)
    assert response.headers["www-authenticate"] == "Bearer"
    assert body["type"].endswith("unauthorized")
    assert body["errors"] == [
        {"field": "header.authorization", "message": "missing or unknown API key"}
    ]
    assert "Authorization: Bearer <key>" in body["detail"] and "X-API-Key" in body["detail"]


def test_other_schemes_and_empty_keys_are_refused(secured: TestClient) -> None:
    assert_problem(secured.get("/v1/jobs", headers={"Authorization": "Basic alpha"}), 401)
    assert_problem(secured.get("/v1/jobs", headers={"Authorization": "alpha"}), 401)
    assert_problem(secured.get("/v1/jobs", headers={"X-API-Key": ""}), 401)
    assert_problem(secured.get("/v1/jobs", headers={"X-API-Key": "alph"}), 401)


def test_a_flat_key_list_is_one_tenant(settings: Settings) -> None:
    app = create_app(settings.model_copy(update={"api_keys": ["alpha", "beta"]}))
    with TestClient(_with_probe(app)) as flat:
        assert _caller(flat, **{"X-API-Key": "alpha"}) == ["default", False]
        assert _caller(flat, Authorization="Bearer beta") == ["default", False]


def test_the_caller_is_the_keys_tenant_whichever_header_carries_it(keyed: TestClient) -> None:
    assert _caller(keyed, **{"X-API-Key": "alpha"}) == ["acme", False]
    assert _caller(keyed, Authorization="Bearer alpha") == ["acme", False]
    assert _caller(keyed, **{"X-API-Key": "beta"}) == ["umbrella", False]
    assert _caller(keyed, **{"X-API-Key": "gamma"}) == ["umbrella", False]  # by its digest
    assert _caller(keyed, **{"X-API-Key": "root"}) == ["admin", True]
    assert_problem(keyed.get("/probe", headers={"X-API-Key": f"sha256:{GAMMA_DIGEST}"}), 401)


def test_x_api_key_is_read_before_the_bearer_token(keyed: TestClient) -> None:
    both = {"X-API-Key": "beta", "Authorization": "Bearer alpha"}
    assert keyed.get("/probe", headers=both).json()["caller"] == ["umbrella", False]


def test_without_configured_keys_everyone_is_the_default_tenant(settings: Settings) -> None:
    with TestClient(_with_probe(create_app(settings))) as open_client:
        assert _caller(open_client) == ["default", False]
        assert _caller(open_client, **{"X-API-Key": "anything"}) == ["default", False]


def test_the_dependencies_hand_out_what_the_factory_built(keyed: TestClient) -> None:
    resolved = keyed.get("/probe", headers={"X-API-Key": "alpha"}).json()
    assert resolved.pop("caller")
    assert resolved == dict.fromkeys(resolved, True) and len(resolved) == 6


def test_the_settings_dependency_can_be_overridden(settings: Settings) -> None:
    app = _with_probe(create_app(settings))
    other = settings.model_copy(update={"key_prefix": "other"})
    app.dependency_overrides[get_settings] = lambda: other
    with TestClient(app) as overridden:
        assert overridden.get("/probe").json()["settings"] is False
    app.dependency_overrides.clear()
    with TestClient(app) as plain:
        assert plain.get("/probe").json()["settings"] is True
