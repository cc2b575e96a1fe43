"""FastAPI dependencies: the stores the app factory built, and API-key authentication.

Routes receive everything through `Depends`, so tests can override any piece and the
routes stay thin: parse the request, call a store, shape the response.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Depends, Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from service.datasets import DatasetStore
from service.idempotency import IdempotencyStore
from service.problems import ProblemError
from service.settings import Settings
from service.uploads import Spooler

if TYPE_CHECKING:
    from service.queue import JobQueue
    from service.results import ResultStore

_bearer = HTTPBearer(auto_error=False, description="`Authorization: Bearer <API key>`")
_api_key_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="The API key.")
ANONYMOUS = "anonymous"


def get_settings(request: Request) -> Settings:
    """The settings the app was built with."""
    return request.app.state.settings


def get_datasets(request: Request) -> DatasetStore:
    """The dataset store."""
    return request.app.state.datasets


def get_uploads(request: Request) -> Spooler:
    """Where request bodies are spooled, under the upload limit."""
    return request.app.state.uploads


def get_queue(request: Request) -> JobQueue:
    """The job queue (built on first use, so the app starts while Redis is still down)."""
    return request.app.state.queue_factory()


def get_results(request: Request) -> ResultStore:
    """The result store."""
    return request.app.state.results


def get_idempotency(request: Request) -> IdempotencyStore:
    """The idempotency-key store."""
    return request.app.state.idempotency


def require_api_key(
    request: Request,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
    header_key: Annotated[str | None, Security(_api_key_header)],
) -> str:
    """The caller's scope (a hash of its key); 401 when keys are configured and none matches."""
    keys: list[str] = request.app.state.settings.api_keys
    if not keys:
        return ANONYMOUS
    offered = header_key or (bearer.credentials if bearer else None)
    if offered and any(hmac.compare_digest(offered.encode(), key.encode()) for key in keys):
        return hashlib.sha256(offered.encode()).hexdigest()[:32]
    raise ProblemError(
        401,
        "a valid API key is required: send `Authorization: Bearer <key>` or `X-API-Key: <key>`",
        kind="unauthorized",
        errors=[("header.authorization", "missing or unknown API key")],
        headers={"WWW-Authenticate": "Bearer"},
    )


Principal = Annotated[str, Depends(require_api_key)]
AppSettings = Annotated[Settings, Depends(get_settings)]
Datasets = Annotated[DatasetStore, Depends(get_datasets)]
Uploads = Annotated[Spooler, Depends(get_uploads)]
Queue = Annotated[Any, Depends(get_queue)]
Results = Annotated[Any, Depends(get_results)]
Idempotency = Annotated[IdempotencyStore, Depends(get_idempotency)]
