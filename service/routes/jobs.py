"""`/v1/jobs`: start clustering jobs, poll them, read results, predict with the fitted model."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import numpy as np
import pyarrow as pa
import scipy.sparse as sp
from fastapi import APIRouter, Depends, Header, Query, Request, Response
from fastapi.responses import FileResponse, JSONResponse, StreamingResponse
from rbfkm_client.media import ARROW_STREAM, EVENT_STREAM, JSON, NPZ, PARQUET, TABLE_TYPES
from starlette.concurrency import run_in_threadpool

from service.budget import check_job_memory
from service.deps import (
    AppSettings,
    CurrentCaller,
    Datasets,
    Idempotency,
    OwnedJob,
    Queue,
    Results,
    Tenants,
    Uploads,
    require_caller,
)
from service.events import job_events
from service.formats import (
    assignments_table,
    centroids_table,
    encode,
    labels_table,
    negotiate,
)
from service.idempotency import _MAX_KEY_LENGTH as MAX_KEY_LENGTH
from service.idempotency import HEADER as IDEMPOTENCY_HEADER
from service.idempotency import StoredResponse, fingerprint, idempotent_job_id
from service.jobs import UNFINISHED, JobStatus
from service.outputs import check_output
from service.problems import RETRY_AFTER, ProblemError
from service.routes.bodies import (
    DATASET_BODY,
    CsvHeader,
    Limit,
    Offset,
    problems,
    spool_body,
)
from service.routes.links import JOB_LINKS
from service.schemas import (
    RESULT_PARTS,
    DeadLetterList,
    Job,
    JobCreate,
    JobList,
    JobResult,
    Prediction,
    Projection,
    SparseRows,
)
from service.settings import Settings
from service.tenants import Caller
from service.threads import most_worker_threads
from service.uploads import media_type, parsed_upload
from service.webhooks import check_callback

router = APIRouter(
    prefix="/v1/jobs",
    tags=["jobs"],
    dependencies=[Depends(require_caller)],
    responses=problems(401, 422),
)


def _succeeded_or_409(job: dict[str, Any]) -> dict[str, Any]:
    """The job, if it has a result; 409 with the reason otherwise."""
    status = job["status"]
    if status != JobStatus.SUCCEEDED:
        detail = f"job {job['id']!r} is {status}; the result exists once it has succeeded"
        if status == JobStatus.FAILED and job.get("error"):
            detail += f" (error: {job['error']})"
        headers = dict(RETRY_AFTER) if status in UNFINISHED else None
        raise ProblemError(409, detail, kind="job-not-succeeded", headers=headers)
    return job


def _job_body(job: dict[str, Any]) -> dict[str, Any]:
    return Job.model_validate(job).model_dump(mode="json")


def _job_headers(job: dict[str, Any]) -> dict[str, str]:
    headers = {"Location": f"/v1/jobs/{job['id']}"}
    if job["status"] in UNFINISHED:
        headers.update(RETRY_AFTER)
    return headers


def _check_against_dataset(
    body: JobCreate, params: dict[str, Any], datasets: Any, settings: Settings, caller: Caller
) -> None:
    """Parameters that only make sense for this dataset: one the caller may see, k <= n,
    init width = d, and a job that fits a worker's memory."""
    meta = datasets.get(body.dataset_id)
    if meta is None or not caller.sees(meta["tenant"]):
        # 422, not 404: the resource addressed (/v1/jobs) exists, a field of the body is wrong.
        raise ProblemError(
            422,
            f"dataset_id {body.dataset_id!r} names no dataset; upload it with POST /v1/datasets",
            kind="unknown-dataset",
            errors=[("body.dataset_id", "unknown dataset")],
        )
    n, d = meta["n_samples"], meta["n_features"]
    if body.n_clusters != "auto" and body.n_clusters > n:
        raise ProblemError(
            422,
            f"n_clusters ({body.n_clusters}) exceeds n_samples ({n}) of dataset "
            f"{body.dataset_id!r}; choose n_clusters <= {n}",
            kind="validation",
            errors=[("body.n_clusters", f"must be <= {n} (the dataset's n_samples)")],
        )
    if isinstance(body.init, list) and len(body.init[0]) != d:
        raise ProblemError(
            422,
            f"init rows have {len(body.init[0])} values; the dataset has {d} features",
            kind="validation",
            errors=[("body.init", f"rows must have {d} values")],
        )
    threads = most_worker_threads(settings.threads_per_worker)
    check_job_memory(meta, params, settings.max_job_bytes, threads)


def check_service_urls(params: dict[str, Any], settings: Settings, tenant: str) -> None:
    """The job's webhook and output: configured for the tenant, and hosts the service may
    reach."""
    if params.get("callback_url"):
        check_callback(params["callback_url"], settings, tenant)
    if params.get("output"):
        check_output(params["output"], settings, tenant)


@router.post(
    "",
    status_code=202,
    response_model=Job,
    summary="Start a clustering job",
    description=(
        "Validates the parameters against the dataset and queues the fit. `202` with "
        "`Location: /v1/jobs/{id}`. With an `Idempotency-Key` header (scoped per tenant) a "
        "retry with the same body returns the same job; another body is a `422`; a retry "
        "while the first is still being accepted is a `409`. A job whose memory on a worker "
        "would exceed `RBFKM_MAX_JOB_BYTES` is a `422` that says what to change. A tenant "
        "with its quota of queued and running jobs gets a `429` with `Retry-After`."
    ),
    responses={202: {"links": JOB_LINKS}, **problems(409, 422, 429)},
)
def create_job(
    body: JobCreate,
    caller: CurrentCaller,
    tenants: Tenants,
    queue: Queue,
    datasets: Datasets,
    idempotency: Idempotency,
    settings: AppSettings,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias=IDEMPOTENCY_HEADER,
            min_length=1,
            max_length=MAX_KEY_LENGTH,
            description="Makes retries safe (1-255 characters; another length is a `422`).",
        ),
    ] = None,
) -> JSONResponse:
    body_hash = fingerprint(body.model_dump(mode="json"))
    if idempotency_key is not None:
        stored = idempotency.begin(caller.tenant, idempotency_key, body_hash)
        if stored is not None:
            return JSONResponse(stored.body, status_code=stored.status, headers=stored.headers)
    try:
        params = body.params(settings)
        _check_against_dataset(body, params, datasets, settings, caller)
        check_service_urls(params, settings, caller.tenant)
        job = queue.submit(
            body.dataset_id,
            params,
            job_id=None
            if idempotency_key is None
            else idempotent_job_id(caller.tenant, idempotency_key, body_hash),
            tenant=caller.tenant,
            max_active=tenants.quota(caller.tenant).max_active_jobs,
        )
        content = _job_body(job)
        headers = _job_headers(job)
    except BaseException:
        if idempotency_key is not None:
            idempotency.abandon(caller.tenant, idempotency_key)
        raise
    if idempotency_key is not None:
        idempotency.complete(
            caller.tenant, idempotency_key, body_hash, StoredResponse(202, content, headers)
        )
    return JSONResponse(content, status_code=202, headers=headers)


@router.get("", response_model=JobList, summary="List jobs (newest first)")
def list_jobs(
    caller: CurrentCaller,
    queue: Queue,
    status: Annotated[JobStatus | None, Query(description="Only jobs in this status.")] = None,
    offset: Offset = 0,
    limit: Limit = 50,
) -> dict[str, Any]:
    items, total = queue.list(status=status, offset=offset, limit=limit, tenant=caller.scope)
    return {"items": items, "total": total, "offset": offset, "limit": limit}


@router.get(
    "/dead-letters",
    response_model=DeadLetterList,
    summary="List dead-lettered jobs (newest first)",
)
def list_dead_letters(
    caller: CurrentCaller,
    queue: Queue,
    offset: Offset = 0,
    limit: Limit = 50,
) -> dict[str, Any]:
    """Jobs the queue gave up on: failed on bad input, failed on their last allowed attempt,
    or claimed `max_attempts` times by workers that died.

    `GET /v1/jobs/dead-letters?offset=0&limit=50` answers `200` with
    `{"items": [{"job_id", "error", "attempts", "failed_at"}], "total", "offset", "limit"}`:
    the job, its last error, how many times it was claimed and when it was given up. The
    list outlives the jobs (their records expire after the retention period; it is capped
    at about 100 000 entries instead), so it says what failed and why after
    `GET /v1/jobs/{id}` no longer can.
    """
    items, total = queue.dead_letters(offset=offset, limit=limit, tenant=caller.scope)
    return {"items": items, "total": total, "offset": offset, "limit": limit}


@router.get(
    "/{job_id}",
    response_model=Job,
    summary="Poll a job",
    description="`Retry-After` (seconds) is set while the job is queued or running.",
    responses={
        200: {"links": {k: v for k, v in JOB_LINKS.items() if k != "GetJob"}},
        **problems(404),
    },
)
def get_job(job: OwnedJob) -> JSONResponse:
    return JSONResponse(_job_body(job), headers=_job_headers(job))


@router.delete(
    "/{job_id}",
    status_code=204,
    summary="Delete a job and its result (cancels it first)",
    responses=problems(404),
)
def delete_job(job: OwnedJob, queue: Queue, results: Results) -> Response:
    job_id = job["id"]
    if job["status"] in UNFINISHED:
        queue.cancel(job_id)
    queue.delete(job_id)
    results.delete(job_id)
    return Response(status_code=204)


@router.post(
    "/{job_id}/cancel",
    response_model=Job,
    summary="Cancel a job",
    description=(
        "A queued job never runs; a running one stops at its next iteration. Canceling a "
        "finished job is a `409`."
    ),
    responses={
        200: {"links": {k: JOB_LINKS[k] for k in ("GetJob", "DeleteJob")}},
        **problems(404, 409),
    },
)
def cancel_job(job: OwnedJob, queue: Queue) -> JSONResponse:
    job_id = job["id"]
    if job["status"] not in UNFINISHED and job["status"] != JobStatus.CANCELED:
        raise ProblemError(409, f"job {job_id!r} has already {job['status']}", kind="job-finished")
    job = queue.cancel(job_id) or job
    return JSONResponse(_job_body(job), headers=_job_headers(job))


#: One event of the stream (its fields, as SSE parsers hand them over).
EVENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "event": {"type": "string", "enum": ["status", "progress", "deleted"]},
        "id": {"type": "string", "description": "The state the event reports."},
        "data": {
            "type": "string",
            "contentMediaType": JSON,
            "description": "The job, as `GET /v1/jobs/{id}` (`{}` for `deleted`).",
        },
        "retry": {"type": "integer", "minimum": 0},
    },
}


@router.get(
    "/{job_id}/events",
    summary="Follow a job: server-sent events",
    description=(
        "A `text/event-stream` of the job's changes, so that clients need not poll: "
        "`event: status` when its status changes, `event: progress` when its progress does, "
        "each with the job (as `GET /v1/jobs/{id}`) as `data`; the stream ends after the "
        "event of a finished job (`event: deleted` if the job is deleted), or after five "
        "minutes (reconnect). Each event's `id` names the state it reports: with "
        "`Last-Event-ID` the stream starts with the job's state only if it differs, so a "
        "reconnecting client never gets the final event twice."
    ),
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "The event stream",
            "content": {EVENT_STREAM: {"schema": EVENT_SCHEMA}},
        },
        **problems(404),
    },
)
async def job_events_stream(
    job: OwnedJob,
    queue: Queue,
    last_event_id: Annotated[
        str | None,
        Header(
            alias="Last-Event-ID",
            max_length=200,
            description="The id of the last event received (on reconnecting).",
        ),
    ] = None,
) -> StreamingResponse:
    job_id = job["id"]

    async def read() -> dict[str, Any] | None:
        return await run_in_threadpool(queue.get, job_id)

    return StreamingResponse(
        job_events(read, _job_body, last_event_id),
        media_type=EVENT_STREAM,
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _parts(request: Request) -> set[str]:
    """The large result parts to send: all, or the `include`d ones (none for an empty list),
    minus the `exclude`d ones; each a comma-separated list, or the parameter repeated.

    A dependency declared before the job's, so that a malformed request is a 422 before
    the job is looked up."""

    def split(field: str) -> set[str] | None:
        values = request.query_params.getlist(field)
        if not values:
            return None
        names = {name.strip() for value in values for name in value.split(",") if name.strip()}
        unknown = names - set(RESULT_PARTS)
        if unknown:
            raise ProblemError(
                422,
                f"unknown result parts {sorted(unknown)} in {field}; choose from "
                f"{list(RESULT_PARTS)}, comma-separated",
                kind="validation",
                errors=[(f"query.{field}", f"unknown: {', '.join(map(repr, sorted(unknown)))}")],
            )
        return names

    chosen = split("include")
    return (set(RESULT_PARTS) if chosen is None else chosen) - (split("exclude") or set())


def _parts_parameter(name: str, description: str) -> dict[str, Any]:
    """An OpenAPI query parameter that is a comma-separated list of result parts."""
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "style": "form",
        "explode": False,
        "schema": {"type": "array", "items": {"type": "string", "enum": list(RESULT_PARTS)}},
    }


def _listable(value: Any) -> Any:
    return value.tolist() if isinstance(value, np.ndarray) else value


#: Responses whose body depends on `Accept` say so, for caches.
VARY_ACCEPT = {"Vary": "Accept"}
#: The OpenAPI content of a result table (the bytes of a file).
BINARY = {"type": "string", "format": "binary"}
TABLE_CONTENT: dict[str, Any] = {media: {"schema": BINARY} for media in TABLE_TYPES}
_EXTENSIONS = {PARQUET: "parquet", ARROW_STREAM: "arrows"}


def _accepts(*offered: str) -> Callable[[Request], str]:
    """A dependency: the offered media type the request's `Accept` prefers (a `406` when
    it takes none). Read from the request, not declared as a header parameter: `Accept`
    is content negotiation, which the responses' content types document."""

    def accepted(request: Request) -> str:
        return negotiate(request.headers.get("accept"), offered)

    return accepted


def _table_part(parts: set[str], explicit: bool) -> str:
    """The one result part a table carries: labels unless left out, or the one `include`
    names; a `422` when `include` names none or both."""
    tables = [part for part in ("labels", "centroids") if part in parts]
    if not tables or (explicit and len(tables) > 1):
        raise ProblemError(
            422,
            "a Parquet or Arrow result is one table: include=labels (the default) or "
            "include=centroids",
            kind="validation",
            errors=[("query.include", "name one of labels, centroids")],
        )
    return tables[0]


def _table_response(table: pa.Table, media: str, stem: str) -> Response:
    """A table as a download of type `media`."""
    filename = f"{stem}.{_EXTENSIONS[media]}"
    headers = {"Content-Disposition": f'attachment; filename="{filename}"', **VARY_ACCEPT}
    return Response(encode(table, media), media_type=media, headers=headers)


@router.get(
    "/{job_id}/result",
    response_model=JobResult,
    response_model_exclude_none=True,
    summary="The result of a succeeded job",
    description=(
        "`409` until the job has succeeded. `include=centroids,labels,history` keeps only "
        "the named large parts, `exclude=labels` leaves parts out; the scalars are always sent. "
        "Another part name is a `422`. With `Accept: application/vnd.apache.parquet` or "
        "`application/vnd.apache.arrow.stream` one table: the labels (`row`, `label`; the "
        "default) or, with `include=centroids`, the centres (`cluster`, `f0`..`f{d-1}`), the "
        "scalars in the schema's `rbfkm` metadata (JSON). An `Accept` that takes none of "
        "these types is a `406`."
    ),
    responses={200: {"content": TABLE_CONTENT}, **problems(404, 406, 409, 422)},
    openapi_extra={
        "parameters": [
            _parts_parameter("include", "Parts to keep (comma-separated); omitted: all."),
            _parts_parameter("exclude", "Parts to leave out (comma-separated)."),
        ]
    },
)
def get_result(
    media: Annotated[str, Depends(_accepts(JSON, *TABLE_TYPES))],
    parts: Annotated[set[str], Depends(_parts)],
    request: Request,
    job: OwnedJob,
    results: Results,
) -> Response:
    job_id = _succeeded_or_409(job)["id"]
    summary = results.summary(job_id)
    body: dict[str, Any] = {
        "inertia": float(summary["inertia"]),
        "n_iter": int(summary["n_iter"]),
        "converged": bool(summary.get("converged", True)),  # older results: not recorded
        "sigma": float(summary["sigma"]),
        "device": str(summary["device"]),
    }
    if media != JSON:
        part = _table_part(parts, bool(request.query_params.getlist("include")))
        if part == "labels":
            table = labels_table(results.labels(job_id), body)
        else:
            table = centroids_table(results.centroids(job_id), body)
        return _table_response(table, media, f"{job_id}-{part}")
    if "centroids" in parts:
        body["centroids"] = _listable(summary["centroids"])
    if "labels" in parts:
        body["labels"] = _listable(results.labels(job_id))
    if "history" in parts:
        body["history"] = _listable(summary.get("history", []))
    for name in ("n_clusters", "metrics", "k_path", "processes"):  # older results: not recorded
        if name in summary:
            body[name] = summary[name]
    return JSONResponse(body, headers=VARY_ACCEPT)


def csr_rows(matrix: sp.csr_matrix, offset: int, limit: int) -> dict[str, Any]:
    """Rows `[offset, offset + limit)` of a CSR matrix, `indptr` relative to the page."""
    n, k = matrix.shape
    page = matrix[offset : offset + limit]
    return {
        "shape": [int(n), int(k)],
        "offset": offset,
        "limit": limit,
        "indptr": (page.indptr - page.indptr[0]).tolist(),
        "indices": page.indices.tolist(),
        "values": page.data.astype(np.float64).tolist(),
    }


@router.get(
    "/{job_id}/assignments",
    response_model=SparseRows,
    summary="Soft assignments (CSR), paged by rows",
    description=(
        "JSON CSR rows `[offset, offset + limit)`; with `Accept: application/x-npz` the "
        "whole matrix as scipy's sparse `.npz` (`scipy.sparse.load_npz`); with "
        "`Accept: application/vnd.apache.parquet` or `application/vnd.apache.arrow.stream` "
        "the whole matrix as a table of its non-zero weights (`row`, `cluster`, `weight`; "
        "the shape in the schema's `rbfkm` metadata). Another `Accept` is a `406`."
    ),
    responses={
        200: {"content": {NPZ: {"schema": BINARY}, **TABLE_CONTENT}},
        **problems(404, 406, 409),
    },
)
def get_assignments(
    media: Annotated[str, Depends(_accepts(JSON, NPZ, *TABLE_TYPES))],
    job: OwnedJob,
    results: Results,
    offset: Offset = 0,
    limit: Annotated[int, Query(ge=1, le=100_000, description="Rows per page.")] = 1000,
) -> Response:
    job_id = _succeeded_or_409(job)["id"]
    if media == NPZ:
        return FileResponse(
            results.assignments_path(job_id),
            media_type=NPZ,
            filename=f"{job_id}-assignments.npz",
            headers=VARY_ACCEPT,
        )
    matrix = results.assignments(job_id)
    if media != JSON:
        return _table_response(assignments_table(matrix), media, f"{job_id}-assignments")
    page = csr_rows(sp.csr_matrix(matrix), offset, limit)
    next_offset = offset + limit
    headers = dict(VARY_ACCEPT)
    if next_offset < matrix.shape[0]:
        link = f"/v1/jobs/{job_id}/assignments?offset={next_offset}&limit={limit}"
        headers["Link"] = f'<{link}>; rel="next"'
    return JSONResponse(page, headers=headers)


@router.get(
    "/{job_id}/projection",
    response_model=Projection,
    summary="A 2-D picture of the clusters",
    description=(
        "A seeded sample of the dataset (at most 5 000 rows, the same on every read) on its "
        "first two principal axes, with each sampled row's index, label and the entropy of "
        "its soft assignment, and the centroids on the same axes: what the web page at "
        "`/ui/` draws. The worker computes it when the job finishes. `409` until the job has "
        "succeeded; `404` for a result stored without one (by an older version)."
    ),
    responses=problems(404, 409),
)
def get_projection(job: OwnedJob, results: Results) -> JSONResponse:
    job_id = _succeeded_or_409(job)["id"]
    return JSONResponse(results.projection(job_id).as_json())


def _predict(model: Any, x: np.ndarray) -> dict[str, Any]:
    expected = getattr(model, "n_features_in_", x.shape[1])
    if x.shape[1] != expected:
        raise ProblemError(
            422,
            f"the points have {x.shape[1]} features; the model was fitted on {expected}",
            kind="invalid-dataset",
            errors=[("body", f"needs {expected} columns")],
        )
    try:
        labels = np.asarray(model.predict(x))
        soft = sp.csr_matrix(model.soft_assign(x))
    except (ValueError, TypeError) as exc:
        raise ProblemError(
            422, str(exc), kind="invalid-dataset", errors=[("body", str(exc))]
        ) from None
    return {"labels": labels.tolist(), "assignments": csr_rows(soft, 0, max(1, x.shape[0]))}


@router.post(
    "/{job_id}/predict",
    response_model=Prediction,
    summary="Assign new points with the fitted model",
    description="Same body types (and `header` for CSV) as `POST /v1/datasets`; nothing is stored.",
    responses=problems(404, 409, 413, 415, 422),
    openapi_extra=DATASET_BODY,
)
async def predict(
    job: OwnedJob,
    request: Request,
    results: Results,
    uploads: Uploads,
    header: CsvHeader = None,
) -> JSONResponse:
    media = media_type(request.headers.get("content-type"), header)
    job_id = _succeeded_or_409(job)["id"]
    upload = await spool_body(request, uploads)

    def work() -> dict[str, Any]:
        with parsed_upload(upload, media) as x:
            return _predict(results.model(job_id), np.array(x))  # writable, for torch

    return JSONResponse(await run_in_threadpool(work))
