"""OpenAPI descriptions shared by routes: the dataset body types and the problem responses."""

from __future__ import annotations

from typing import Any

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


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """`responses=` entries documenting problem+json errors (the model registers the schema)."""
    return {status: {"model": Problem, "description": "Problem details"} for status in statuses}
