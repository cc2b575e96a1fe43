"""FastAPI dependencies: the stores the app factory built, the caller, and what it owns.

Routes receive everything through `Depends`, so tests can override any piece and the
routes stay thin: parse the request, call a store, shape the response. A route that
addresses a dataset or a job by its id takes `OwnedDataset` or `OwnedJob`, which answer 404
for an id the caller's tenant does not own: the one place tenants are kept apart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Depends, Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from service.datasets import DatasetStore
from service.idempotency import IdempotencyStore
from service.problems import ProblemError, not_found
from service.settings import Settings
from service.tenants import Caller, Keyring
from service.uploads import Spooler

if TYPE_CHECKING:
    from service.queue import JobQueue
    from service.results import ResultStore

_bearer = HTTPBearer(auto_error=False, description="`Authorization: Bearer <API key>`")
_api_key_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="The API key.")


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


def get_keyring(request: Request) -> Keyring:
    """The tenants and keys the app was built with."""
    return request.app.state.keyring


def require_caller(
    request: Request,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
    header_key: Annotated[str | None, Security(_api_key_header)],
) -> Caller:
    """The caller: its tenant and whether it is an admin (the default tenant when no keys
    are configured); 401 when keys are configured and none matches."""
    offered = header_key or (bearer.credentials if bearer else None)
    caller = get_keyring(request).authenticate(offered)
    if caller is None:
        raise ProblemError(
            401,
            "a valid API key is required: send `Authorization: Bearer <key>` or `X-API-Key: <key>`",
            kind="unauthorized",
            errors=[("header.authorization", "missing or unknown API key")],
            headers={"WWW-Authenticate": "Bearer"},
        )
    request.state.tenant = caller.tenant  # for the per-tenant request metrics
    return caller


CurrentCaller = Annotated[Caller, Depends(require_caller)]


def owned_dataset(dataset_id: str, caller: CurrentCaller, request: Request) -> dict[str, Any]:
    """The dataset the path names, if the caller may see it; 404 otherwise (also for
    another tenant's: its ids do not exist for this caller)."""
    meta = get_datasets(request).get(dataset_id)
    if meta is None or not caller.sees(meta["tenant"]):
        raise not_found("dataset", dataset_id)
    return meta


def owned_job(job_id: str, caller: CurrentCaller, request: Request) -> dict[str, Any]:
    """The job the path names, if the caller may see it; 404 otherwise."""
    job = get_queue(request).get(job_id)
    if job is None or not caller.sees(job["tenant"]):
        raise not_found("job", job_id)
    return job


OwnedDataset = Annotated[dict[str, Any], Depends(owned_dataset)]
OwnedJob = Annotated[dict[str, Any], Depends(owned_job)]
Tenants = Annotated[Keyring, Depends(get_keyring)]
AppSettings = Annotated[Settings, Depends(get_settings)]
Datasets = Annotated[DatasetStore, Depends(get_datasets)]
Uploads = Annotated[Spooler, Depends(get_uploads)]
Queue = Annotated[Any, Depends(get_queue)]
Results = Annotated[Any, Depends(get_results)]
Idempotency = Annotated[IdempotencyStore, Depends(get_idempotency)]
