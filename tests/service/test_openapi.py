"""The settings' part of the OpenAPI document: authentication and the runtime cap."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.testclient import TestClient

from service.app import create_app
from service.openapi import amend_openapi
from service.settings import Settings
from tests.service.conftest import assert_problem, upload


def _document(settings: Settings, **overrides: Any) -> dict[str, Any]:
    return create_app(settings.model_copy(update=overrides)).openapi()


def _operations(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [op for ops in document["paths"].values() for op in ops.values()]


def test_without_keys_no_operation_asks_for_credentials(client: TestClient) -> None:
    # It asked for a bearer token or an X-API-Key that the server never checked.
    document = client.get("/openapi.json").json()
    assert all("security" not in op for op in _operations(document))
    assert "securitySchemes" not in document["components"]


def test_with_keys_every_v1_operation_asks_for_one(settings: Settings) -> None:
    document = _document(settings, api_keys={"acme": {"keys": ["k"]}})
    for path, operations in document["paths"].items():
        for operation in operations.values():
            expected = [{"HTTPBearer": []}, {"APIKeyHeader": []}]
            assert operation.get("security") == (expected if path.startswith("/v1/") else None)
    assert set(document["components"]["securitySchemes"]) == {"HTTPBearer", "APIKeyHeader"}


def test_the_runtime_cap_is_the_fields_maximum(settings: Settings) -> None:
    document = _document(settings, max_runtime_cap_s=600.0)
    field = document["components"]["schemas"]["JobCreate"]["properties"]["max_runtime_s"]
    number = next(option for option in field["anyOf"] if option.get("type") == "number")
    assert (number["exclusiveMinimum"], number["maximum"]) == (0, 600.0)


def test_the_api_takes_the_documented_maximum_and_refuses_above_it(settings: Settings) -> None:
    with TestClient(create_app(settings.model_copy(update={"max_runtime_cap_s": 600.0}))) as c:
        meta = upload(c)
        job = {"dataset_id": meta["id"], "n_clusters": 2}
        assert c.post("/v1/jobs", json={**job, "max_runtime_s": 600}).status_code == 202
        assert_problem(c.post("/v1/jobs", json={**job, "max_runtime_s": 600.001}), 422)


def test_amendments_apply_once_and_stack() -> None:
    app = FastAPI()
    calls: list[str] = []
    amend_openapi(app, lambda doc: calls.append("first") or doc.setdefault("x-first", 1))
    amend_openapi(app, lambda doc: calls.append("second") or doc.setdefault("x-second", 2))
    document = app.openapi()
    assert app.openapi() is document
    assert (document["x-first"], document["x-second"], calls) == (1, 2, ["first", "second"])
