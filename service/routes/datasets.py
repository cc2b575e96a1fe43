"""`/v1/datasets`: upload, read, list and delete datasets."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from rbfkm_client.media import JSON
from starlette.concurrency import run_in_threadpool

from service.deps import (
    AppSettings,
    CurrentCaller,
    Datasets,
    OwnedDataset,
    Queue,
    Tenants,
    Uploads,
    require_caller,
)
from service.quotas import check_storage
from service.routes.bodies import NEW_DATASET_BODY, CsvHeader, Limit, Offset, problems, spool_body
from service.routes.links import DATASET_LINKS
from service.schemas import Dataset, DatasetList, DatasetSource
from service.settings import Settings
from service.sources import fetch, reference_in
from service.tenants import Caller
from service.uploads import NAME_MAX_LENGTH, Spooler, Upload, media_type

router = APIRouter(
    prefix="/v1/datasets",
    tags=["datasets"],
    dependencies=[Depends(require_caller)],
    responses=problems(401, 422),
)


@router.post(
    "",
    status_code=201,
    response_model=Dataset,
    summary="Upload a dataset",
    description=(
        'The body is the dataset: JSON `{"data": [[...]], "name": ...}`, CSV (numbers, an '
        "optional header row: `header`), a `.npy` file or a Parquet file (numeric columns). "
        "Errors name the row and column, counting from 0. The body is "
        "streamed to disk, never held in memory. Or, by reference, JSON "
        '`{"source": "s3://bucket/key.parquet" | "gs://..." | "https://..."}`: the server '
        "reads the file within the request, with the same limits and errors, and the "
        "credentials its operator configured for the tenant; a source it cannot read is a "
        "`422` saying why. `201` with `Location`; the same bytes (and "
        "`name`) uploaded again by the same tenant answer `200` with the stored dataset. A "
        "tenant over its quota of stored bytes gets a `429`."
    ),
    responses={
        201: {"description": "Stored", "links": DATASET_LINKS},
        200: {"model": Dataset, "description": "Already stored", "links": DATASET_LINKS},
        **problems(413, 415, 422, 429),
    },
    openapi_extra=NEW_DATASET_BODY,
)
async def create_dataset(
    request: Request,
    response: Response,
    caller: CurrentCaller,
    tenants: Tenants,
    datasets: Datasets,
    queue: Queue,
    uploads: Uploads,
    settings: AppSettings,
    name: Annotated[
        str | None, Query(max_length=NAME_MAX_LENGTH, description="Name (for non-JSON bodies).")
    ] = None,
    header: CsvHeader = None,
    weight_column: Annotated[
        str | None,
        Query(
            max_length=NAME_MAX_LENGTH,
            description="A column of sample weights, taken out of the features and used by "
            "every fit on the dataset: its name (CSV with a header row, Parquet), or its "
            "0-based index for data without column names (.npy, JSON rows, CSV without a "
            "header).",
        ),
    ] = None,
) -> dict:
    media = media_type(request.headers.get("content-type"), header)
    quota = tenants.quota(caller.tenant)
    declared = request.headers.get("content-length", "")
    incoming = int(declared) if declared.isdigit() else 0
    await run_in_threadpool(check_storage, caller.tenant, quota, datasets, queue, incoming)
    upload = await spool_body(request, uploads)
    source = None
    if media == JSON:
        reference = await run_in_threadpool(reference_in, upload)
        if reference is not None:
            upload.path.unlink(missing_ok=True)
            wanted = _source_body(reference)
            upload, media, name = await _read_source(wanted, settings, caller, uploads, header)
            name, source = wanted.name or name, wanted.source
    try:
        await run_in_threadpool(check_storage, caller.tenant, quota, datasets, queue, upload.size)
    except BaseException:
        upload.path.unlink(missing_ok=True)
        raise
    meta, created = await run_in_threadpool(
        datasets.create, upload, media, name, caller.tenant, weight_column, source
    )
    response.status_code = 201 if created else 200
    response.headers["Location"] = f"/v1/datasets/{meta['id']}"
    return meta


def _source_body(reference: dict) -> DatasetSource:
    """A JSON body with a ``source``, validated as a :class:`DatasetSource` (a 422 naming
    the fields otherwise, as for any JSON body)."""
    try:
        return DatasetSource.model_validate(reference)
    except ValidationError as exc:
        raise RequestValidationError(
            [{**error, "loc": ("body", *error["loc"])} for error in exc.errors()]
        ) from None


async def _read_source(
    wanted: DatasetSource, settings: Settings, caller: Caller, uploads: Spooler, header: bool | None
) -> tuple[Upload, str, str | None]:
    """The data at ``wanted.source``, spooled as an upload: (upload, media type, its file
    name)."""
    fetched = await run_in_threadpool(
        fetch, wanted.source, settings, caller.tenant, uploads.tmp_dir, header
    )
    return fetched.upload, fetched.media, fetched.name


@router.get("", response_model=DatasetList, summary="List datasets (newest first)")
def list_datasets(
    caller: CurrentCaller, datasets: Datasets, offset: Offset = 0, limit: Limit = 50
) -> dict:
    items, total = datasets.list(offset=offset, limit=limit, tenant=caller.scope)
    return {"items": items, "total": total, "offset": offset, "limit": limit}


@router.get(
    "/{dataset_id}",
    response_model=Dataset,
    summary="Get a dataset",
    responses={
        200: {"links": {k: DATASET_LINKS[k] for k in ("DeleteDataset", "CreateJob")}},
        **problems(404),
    },
)
def get_dataset(dataset: OwnedDataset) -> dict:
    return dataset


@router.delete(
    "/{dataset_id}", status_code=204, summary="Delete a dataset", responses=problems(404)
)
def delete_dataset(dataset: OwnedDataset, datasets: Datasets) -> Response:
    datasets.delete(dataset["id"])
    return Response(status_code=204)
