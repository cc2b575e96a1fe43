"""Request and response models of the HTTP API (pydantic v2).

They are the public contract: clients outside this repository rely on these field names,
so the OpenAPI document is generated from them, with examples.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
)

JobStatus = Literal["queued", "running", "succeeded", "failed", "canceled"]
Auto = Literal["auto"]


def _temperature(value: Any) -> Any:
    """A temperature is a finite number > 0 or ``"auto"``: one error that says so, instead
    of one per member of the union."""
    if value == "auto":
        return value
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number or not math.isfinite(value) or value <= 0:
        raise ValueError(f'must be a finite number > 0 or "auto"; got {value!r}')
    return value


#: ``sigma0`` and ``sigma_min``.
Temperature = Annotated[Annotated[float, Field(gt=0)] | Auto, BeforeValidator(_temperature)]

#: Counts are JSON integers: ``true`` or ``3.0`` is a client error, not ``1`` or ``3``.
StrictCount = Annotated[int, Field(strict=True)]

_DEVICE_HELP = "`auto` (CUDA when there is one), `cpu`, `cuda` or `cuda:N`."


class Problem(BaseModel):
    """RFC 9457 problem details; every error response has this shape."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "type": "urn:rbfkm:problem:validation",
                    "title": "Unprocessable Content",
                    "status": 422,
                    "detail": "n_clusters (10) exceeds n_samples (4) of dataset 9f2c.",
                    "errors": [{"field": "body.n_clusters", "message": "must be <= 4"}],
                }
            ]
        }
    )

    type: str = Field(description="URI that identifies the problem kind.")
    title: str
    status: int
    detail: str
    instance: str | None = None
    errors: list[FieldError] = Field(default_factory=list)


class FieldError(BaseModel):
    """One offending field: where it is (`body.n_clusters`, `query.limit`, `row 3`)."""

    field: str
    message: str


Problem.model_rebuild()


class DatasetInline(BaseModel):
    """`application/json` body of `POST /v1/datasets` and `POST /v1/jobs/{id}/predict`."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"data": [[0.0, 1.0], [0.5, 1.5]], "name": "toy"}]},
    )

    data: list[list[float]] = Field(description="Rows of equal length; numbers only.")
    name: str | None = Field(default=None, max_length=200)


class Dataset(BaseModel):
    """A stored dataset."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "id": "5b0c6f0a7c1e4a8e9d3f2b1a0c9d8e7f",
                    "name": "toy",
                    "n_samples": 300,
                    "n_features": 2,
                    "dtype": "float64",
                    "sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
                    "size_bytes": 4928,
                    "created_at": "2026-01-01T12:00:00Z",
                }
            ]
        }
    )

    id: str
    name: str | None
    n_samples: int
    n_features: int
    dtype: Literal["float32", "float64"]
    sha256: str = Field(description="SHA-256 of the uploaded bytes.")
    size_bytes: int = Field(description="Size of the uploaded body.")
    created_at: datetime


class Page(BaseModel):
    """Paging fields shared by every list response."""

    total: int
    offset: int
    limit: int


class DatasetList(Page):
    """`GET /v1/datasets`."""

    items: list[Dataset]


class JobCreate(BaseModel):
    """`POST /v1/jobs`: a dataset and the engine's parameters (`RBFKMeans`)."""

    model_config = ConfigDict(
        extra="forbid",
        allow_inf_nan=False,
        json_schema_extra={
            "examples": [
                {
                    "dataset_id": "5b0c6f0a7c1e4a8e9d3f2b1a0c9d8e7f",
                    "n_clusters": 3,
                    "assignment": "entmax15",
                    "random_state": 0,
                }
            ]
        },
    )

    dataset_id: str = Field(min_length=1, max_length=128)
    n_clusters: StrictCount = Field(ge=1, description="k; at most the dataset's n_samples.")
    assignment: Literal["entmax15", "softmax", "hard"] = "entmax15"
    sigma0: Temperature = "auto"
    sigma_min: Temperature = "auto"
    cooling: float = Field(default=0.8, gt=0, lt=1, description="Geometric cooling rate.")
    max_iter: StrictCount = Field(default=300, ge=1, le=100_000)
    tol: float = Field(default=1e-4, ge=0)
    init: Literal["k-means++", "random"] | list[list[float]] = Field(
        default="k-means++", description="`k-means++`, `random`, or initial centres (k x d)."
    )
    n_init: StrictCount = Field(default=1, ge=1, le=1000)
    random_state: StrictCount | None = Field(default=None, ge=0, lt=2**32)
    device: str = Field(default="auto", description=_DEVICE_HELP)

    @field_validator("device")
    @classmethod
    def _check_device(cls, value: str) -> str:
        """Reject device strings the workers could never honour."""
        if value in ("auto", "cpu", "cuda"):
            return value
        head, _, index = value.partition(":")
        if head == "cuda" and index.isdigit():
            return value
        raise ValueError("must be auto, cpu, cuda or cuda:N")

    @field_validator("init")
    @classmethod
    def _check_init(cls, value: Any, info: ValidationInfo) -> Any:
        """Initial centres must be k rows of equal length."""
        if isinstance(value, list):
            k = info.data.get("n_clusters")  # absent when n_clusters itself is invalid
            if k is not None and len(value) != k:
                raise ValueError(f"init has {len(value)} rows; it needs n_clusters={k}")
            widths = {len(row) for row in value}
            if len(widths) != 1 or 0 in widths:
                raise ValueError("init rows must be non-empty and of equal length")
        return value

    def engine_params(self) -> dict[str, Any]:
        """The keyword arguments for `RBFKMeans`, defaults filled in."""
        return self.model_dump(exclude={"dataset_id"})


class Progress(BaseModel):
    """Where a running fit is; reported by the engine's callback."""

    fraction: float | None = Field(default=None, ge=0, le=1)
    sigma: float | None = None
    iteration: int | None = None
    objective: float | None = None


class Job(BaseModel):
    """A clustering job (the long-running operation)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "id": "0d6f1b0a2e3c4d5f8a9b7c6d5e4f3a2b",
                    "dataset_id": "5b0c6f0a7c1e4a8e9d3f2b1a0c9d8e7f",
                    "params": {"n_clusters": 3, "assignment": "entmax15", "random_state": 0},
                    "status": "running",
                    "progress": {"fraction": 0.4, "sigma": 0.12, "iteration": 17, "objective": 3.2},
                    "error": None,
                    "created_at": "2026-01-01T12:00:00Z",
                    "started_at": "2026-01-01T12:00:01Z",
                    "finished_at": None,
                    "attempts": 1,
                }
            ]
        }
    )

    id: str
    dataset_id: str
    params: dict[str, Any]
    status: JobStatus
    progress: Progress
    error: str | None = None
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    attempts: int = 0


class JobList(Page):
    """`GET /v1/jobs`."""

    items: list[Job]


class HistoryEntry(BaseModel):
    """One temperature of the annealing path."""

    model_config = ConfigDict(extra="allow")

    sigma: float
    objective: float | None = None
    inertia: float | None = None
    iterations: int | None = None
    mean_nnz: float | None = None


ResultPart = Literal["centroids", "labels", "history"]
RESULT_PARTS: tuple[str, ...] = ("centroids", "labels", "history")


class JobResult(BaseModel):
    """`GET /v1/jobs/{id}/result`; large parts may be left out with `include`/`exclude`."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "centroids": [[0.0, 0.1], [5.0, 5.2]],
                    "labels": [0, 0, 1],
                    "inertia": 1.25,
                    "n_iter": 42,
                    "sigma": 0.001,
                    "device": "cpu",
                    "history": [{"sigma": 2.0, "objective": 10.0, "inertia": 9.0}],
                }
            ]
        }
    )

    centroids: list[list[float]] | None = None
    labels: list[int] | None = None
    inertia: float
    n_iter: int
    sigma: float
    device: str | None = Field(
        default=None,
        description="Where the fit ran (`cpu`, `cuda:N`): a job's `device` the worker's "
        "machine lacks runs on the worker's own.",
    )
    history: list[HistoryEntry] | None = None


class SparseRows(BaseModel):
    """Rows of a CSR matrix; `indptr` starts at 0 for the first row of the page."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "shape": [3, 2],
                    "offset": 0,
                    "limit": 1000,
                    "indptr": [0, 1, 3, 4],
                    "indices": [0, 0, 1, 1],
                    "values": [1.0, 0.7, 0.3, 1.0],
                }
            ]
        }
    )

    shape: tuple[int, int] = Field(description="Shape of the whole matrix (n_samples, k).")
    offset: int = Field(description="First row of this page.")
    limit: int
    indptr: list[int] = Field(description="Row pointers of this page (len = rows + 1).")
    indices: list[int]
    values: list[float]


class Prediction(BaseModel):
    """`POST /v1/jobs/{id}/predict`."""

    labels: list[int]
    assignments: SparseRows


class Health(BaseModel):
    """`GET /healthz` and `GET /readyz`."""

    status: Literal["ok", "unavailable"]
    redis: bool | None = None
    workers: int | None = None
    detail: str | None = None
