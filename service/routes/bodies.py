"""OpenAPI pieces shared by routes: the dataset body types, the paging parameters and the
problem responses."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query

from service.schemas import DatasetInline, Problem

DATASET_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "The dataset, by Content-Type.",
        "content": {
            "application/json": {
                "schema": DatasetInline.model_json_schema(),
                "example": {"data": [[0.0, 1.0], [0.5, 1.5]], "name": "toy"},
            },
            "text/csv": {
                "schema": {"type": "string"},
                "example": "x,y\n0.0,1.0\n0.5,1.5\n",
            },
            "application/x-npy": {"schema": {"type": "string", "format": "binary"}},
            "application/vnd.apache.parquet": {"schema": {"type": "string", "format": "binary"}},
        },
    }
}


#: Where a page starts: items (or rows) to skip.
Offset = Annotated[int, Query(ge=0, description="Items (rows) to skip.")]
#: How many items a list page holds at most.
Limit = Annotated[int, Query(ge=1, le=1000, description="Page size.")]


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """`responses=` entries documenting problem+json errors (the model registers the schema)."""
    return {status: {"model": Problem, "description": "Problem details"} for status in statuses}
