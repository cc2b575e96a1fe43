"""What the OpenAPI document says that depends on the deployment's settings.

The routes and models describe the API of every deployment; two of its facts are the
settings' and are written into each app's document when it is first built, so that the
document states exactly what this server does (`tests/service/test_openapi_contract.py`
checks it against a live server):

- whether a request needs a key: with no `RBFKM_API_KEYS` every request is served as the
  tenant `default`, so the operations carry no `security` requirement (and the document no
  security schemes) rather than asking for a key nobody checks;
- the largest `max_runtime_s` a job may ask for, `RBFKM_MAX_RUNTIME_CAP_S`, as the field's
  `maximum` (above it the API answers a `422`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI

from service.settings import Settings
from service.tenants import Keyring

Document = dict[str, Any]


def amend_openapi(app: FastAPI, amend: Callable[[Document], None]) -> None:
    """Have `amend` edit `app`'s OpenAPI document once, when it is first built (FastAPI
    keeps the built document in `app.openapi_schema` and serves that afterwards)."""
    build = app.openapi

    def openapi() -> Document:
        if app.openapi_schema:
            return app.openapi_schema
        schema = build()
        amend(schema)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def without_security(schema: Document) -> None:
    """No operation asks for credentials (a deployment without keys)."""
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            operation.pop("security", None)
    schema.get("components", {}).pop("securitySchemes", None)


def with_runtime_cap(schema: Document, cap_s: float) -> None:
    """`max_runtime_s` of a job request at most `cap_s`."""
    field = schema["components"]["schemas"]["JobCreate"]["properties"]["max_runtime_s"]
    for option in field.get("anyOf", [field]):
        if option.get("type") == "number":
            option["maximum"] = cap_s


def document_deployment(app: FastAPI, settings: Settings, keyring: Keyring) -> None:
    """Write the settings' part of the contract into `app`'s document."""

    def amend(schema: Document) -> None:
        if keyring.open:
            without_security(schema)
        with_runtime_cap(schema, settings.max_runtime_cap_s)

    amend_openapi(app, amend)
