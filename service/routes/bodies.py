"""What routes share: reading a data body (and which routes take one), its parameters, the
paging parameters, and the OpenAPI pieces that document them."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from typing import Annotated, Any

from fastapi import Query, Request
from starlette.requests import ClientDisconnect

from service.errors import UploadInterrupted
from service.schemas import DatasetInline, DatasetSource, Problem
from service.uploads import Spooler, Upload

logger = logging.getLogger(__name__)

#: The bytes of a file (an empty body is refused).
_BINARY = {"type": "string", "format": "binary", "minLength": 1}

DATASET_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "The dataset, by Content-Type.",
        "content": {
            "application/json": {
                "schema": DatasetInline.model_json_schema(),
                "example": {"data": [[0.0, 1.0], [0.5, 1.5]], "name": "toy"},
            },
            # The bytes of a file, parsed by the server: any text is "a string" on the wire
            # (a body `5` is the CSV of one value), so the schema does not pretend to type it.
            "text/csv": {
                "schema": {
                    **_BINARY,
                    "description": "Comma-separated decimal numbers, one row a line, rows of "
                    "equal length; an optional header row (see `header`).",
                },
                "example": "x,y\n0.0,1.0\n0.5,1.5\n",
            },
            "application/x-npy": {"schema": _BINARY},
            "application/vnd.apache.parquet": {"schema": _BINARY},
        },
    }
}


#: `POST /v1/datasets`: a dataset body as :data:`DATASET_BODY`, or JSON that names where
#: the data is (:class:`~service.schemas.DatasetSource`).
NEW_DATASET_BODY: dict[str, Any] = {
    "requestBody": {
        **DATASET_BODY["requestBody"],
        "description": "The dataset, by Content-Type; or, as JSON, where to read it from.",
        "content": {
            **DATASET_BODY["requestBody"]["content"],
            "application/json": {
                "schema": {
                    "oneOf": [DatasetInline.model_json_schema(), DatasetSource.model_json_schema()]
                },
                "examples": {
                    "data": {"value": {"data": [[0.0, 1.0], [0.5, 1.5]], "name": "toy"}},
                    "source": {"value": {"source": "s3://bucket/points.parquet"}},
                },
            },
        },
    }
}


def takes_upload(operation: Mapping[str, Any]) -> bool:
    """Whether an OpenAPI operation's body is a dataset (documented by :data:`DATASET_BODY`:
    uploads and predict), limited by ``RBFKM_MAX_UPLOAD_BYTES`` rather than
    ``RBFKM_MAX_JSON_BODY_BYTES``."""
    content = operation.get("requestBody", {}).get("content", {})
    return set(content) == set(DATASET_BODY["requestBody"]["content"])


#: The largest `offset` a page may start at: the largest integer every JSON client reads
#: exactly (2^53 - 1), and far inside the 64-bit range Redis takes (a larger one was a 500).
MAX_OFFSET = 2**53 - 1
#: Where a page starts: items (or rows) to skip.
Offset = Annotated[int, Query(ge=0, le=MAX_OFFSET, description="Items (rows) to skip.")]
#: How many items a list page holds at most.
Limit = Annotated[int, Query(ge=1, le=1000, description="Page size.")]
#: Whether the first row of a CSV body is a header (omitted: detected).
CsvHeader = Annotated[
    bool | None,
    Query(
        description="CSV bodies only: whether the first row is a header. Omitted: it is a "
        "header when none of its fields is a number (the Content-Type parameter "
        "`header=present|absent` says the same). Other body types ignore it."
    ),
]


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """`responses=` entries documenting problem+json errors (the model registers the schema)."""
    return {status: {"model": Problem, "description": "Problem details"} for status in statuses}


async def spool_body(request: Request, uploads: Spooler) -> Upload:
    """Spool a request's body to disk under the upload limit.

    A client that goes away mid-body is one log line and an :class:`UploadInterrupted`
    (whose response nobody reads), not an unhandled `ClientDisconnect` and its traceback.
    """
    received = 0

    async def chunks() -> AsyncIterator[bytes]:
        nonlocal received
        try:
            async for chunk in request.stream():
                received += len(chunk)
                yield chunk
        except ClientDisconnect:
            raise UploadInterrupted(received) from None

    try:
        return await uploads.spool(chunks(), request.headers.get("content-length"))
    except UploadInterrupted:
        logger.warning(
            "%s %s: the client disconnected after %d of %s bytes; the upload was discarded",
            request.method,
            request.url.path,
            received,
            request.headers.get("content-length", "?"),
        )
        raise
