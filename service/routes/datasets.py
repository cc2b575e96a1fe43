"""`/v1/datasets`: upload, read, list and delete datasets."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from service.deps import (
    CurrentCaller,
    Datasets,
    OwnedDataset,
    Queue,
    Tenants,
    Uploads,
    require_caller,
)
from service.quotas import check_storage
from service.routes.bodies import DATASET_BODY, CsvHeader, Limit, Offset, problems, spool_body
from service.routes.links import DATASET_LINKS
from service.schemas import Dataset, DatasetList
from service.uploads import NAME_MAX_LENGTH, media_type

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
        "streamed to disk, never held in memory. `201` with `Location`; the same bytes (and "
        "`name`) uploaded again by the same tenant answer `200` with the stored dataset. A "
        "tenant over its quota of stored bytes gets a `429`."
    ),
    responses={
        201: {"description": "Stored", "links": DATASET_LINKS},
        200: {"model": Dataset, "description": "Already stored", "links": DATASET_LINKS},
        **problems(413, 415, 422, 429),
    },
    openapi_extra=DATASET_BODY,
)
async def create_dataset(
    request: Request,
    response: Response,
    caller: CurrentCaller,
    tenants: Tenants,
    datasets: Datasets,
    queue: Queue,
    uploads: Uploads,
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
    try:
        await run_in_threadpool(check_storage, caller.tenant, quota, datasets, queue, upload.size)
    except BaseException:
        upload.path.unlink(missing_ok=True)
        raise
    meta, created = await run_in_threadpool(
        datasets.create, upload, media, name, caller.tenant, weight_column
    )
    response.status_code = 201 if created else 200
    response.headers["Location"] = f"/v1/datasets/{meta['id']}"
    return meta


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
