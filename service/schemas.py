"""Request and response models of the HTTP API (pydantic v2).

They are the public contract: clients outside this repository rely on these field names,
so the OpenAPI document is generated from them, with examples.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from service.jobs import JobStatus
from service.parallel import ALL, MAX_PARALLEL
from service.params import EngineFields, engine_fields, integral_float_to_int, model_with
from service.problems import ProblemError
from service.settings import Settings, get_settings
from service.tenants import DEFAULT_TENANT
from service.uploads import FLOAT32_MAX, NAME_MAX_LENGTH

#: A value of a dataset: what the parser keeps (finite, within float32's range).
Value = Annotated[float, Field(ge=-FLOAT32_MAX, le=FLOAT32_MAX, allow_inf_nan=False)]
#: A row of a dataset: at least one value (rows of equal length, which a schema cannot say).
Row = Annotated[list[Value], Field(min_length=1)]


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

    data: list[Row] = Field(
        min_length=1,
        description="At least one row; rows of equal length, of finite numbers within "
        "float32's range (+-3.4e38).",
    )
    name: str | None = Field(default=None, max_length=NAME_MAX_LENGTH)


#: The URL schemes a dataset's ``source`` may have (HTTP, and the object stores).
SOURCE_PATTERN = r"^([Hh][Tt][Tt][Pp][Ss]?|[Ss]3|[Gg][Ss])://"


class DatasetSource(BaseModel):
    """`application/json` body of `POST /v1/datasets` that names the data instead of
    holding it: the service reads it from the URL (see `source`)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"source": "s3://bucket/points.parquet", "name": "points"}]
        },
    )

    source: str = Field(
        min_length=1,
        max_length=2048,
        pattern=SOURCE_PATTERN,
        description="Where the data is: `https://...` (a host that is not public is a `422` "
        "unless the server allows it), or `s3://bucket/key`, `gs://bucket/key` (with the "
        "server's credentials for the caller's tenant, never the request's). Its format is "
        "the key's extension (`.csv`, `.parquet`, `.npy`, `.json`), else its content type; "
        "the limits and errors are an upload's.",
    )
    name: str | None = Field(
        default=None,
        max_length=NAME_MAX_LENGTH,
        description="Name of the dataset (default: the source's file name).",
    )


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
                    "stored_bytes": 4928,
                    "created_at": "2026-01-01T12:00:00Z",
                    "tenant": "default",
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
    stored_bytes: int = Field(description="Size of the stored array (what quotas count).")
    created_at: datetime
    tenant: str = Field(description="The tenant that owns the dataset.")
    weight_column: str | None = Field(
        default=None,
        description="The upload's column of sample weights (`weight_column` on upload), "
        "kept apart from the features; `null`: unweighted.",
    )
    source: str | None = Field(
        default=None, description="The URL the data was read from (`null`: uploaded)."
    )


class Page(BaseModel):
    """Paging fields shared by every list response."""

    total: int
    offset: int
    limit: int


class DatasetList(Page):
    """`GET /v1/datasets`."""

    items: list[Dataset]


class _JobBody(EngineFields):
    """`POST /v1/jobs`: a dataset and the engine's parameters (`RBFKMeans`)."""

    model_config = ConfigDict(
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

    def params(self, settings: Settings | None = None) -> dict[str, Any]:
        """The job's parameters, defaults filled in: what the queue stores and
        `GET /v1/jobs/{id}` shows (the worker reads the engine's with `engine_params`).

        `max_runtime_s` is the effective limit: the job's own, else the server's default
        (`settings`, the environment's when omitted); above the server's cap it is a
        `422` that names the cap.
        """
        params = self.model_dump(exclude={"dataset_id"})
        for name in ("callback_url", "parallel", "output"):  # only when asked for
            if params.get(name) is None:
                params.pop(name, None)
        params["max_runtime_s"] = _runtime_limit(params.get("max_runtime_s"), settings)
        return params


def _runtime_limit(requested: float | None, settings: Settings | None) -> float:
    """A job's time limit: ``requested``, else the default; a 422 above the cap."""
    config = settings or get_settings()
    if requested is None:
        return min(config.max_runtime_s, config.max_runtime_cap_s)
    if requested > config.max_runtime_cap_s:
        cap = config.max_runtime_cap_s
        raise ProblemError(
            422,
            f"max_runtime_s={requested:g} exceeds this server's cap of {cap:g} s "
            "(RBFKM_MAX_RUNTIME_CAP_S); ask for at most that, or reduce n_clusters or the "
            "dataset's n_samples so that the fit takes less time",
            kind="validation",
            errors=[("body.max_runtime_s", f"must be <= {cap:g} (the server's cap)")],
        )
    return requested


def _check_parallel(value: Any) -> Any:
    """One message for a `parallel` no member of its union accepts (`2.0` is `2`)."""
    value = integral_float_to_int(value)
    if value is None or value == ALL:
        return value
    if type(value) is not int or not 1 <= value <= MAX_PARALLEL:
        raise ValueError(f'must be an integer >= 1 and <= {MAX_PARALLEL}, or "all"; got {value!r}')
    return value


#: `POST /v1/jobs`. Its engine fields come from the engine's constraint table
#: (:mod:`service.params`), so the API accepts what the engine accepts, within the caps.
JobCreate = model_with(
    "JobCreate",
    "`POST /v1/jobs`: a dataset, the engine's parameters (`RBFKMeans`) and the job's time "
    "limit (`max_runtime_s`, the service's own).",
    _JobBody,
    dataset_id=(str, Field(min_length=1, max_length=128)),
    **engine_fields(),
    max_runtime_s=(
        float | None,
        Field(
            default=None,
            gt=0,
            allow_inf_nan=False,
            description="Time limit of each attempt, in seconds: a fit still running then "
            "is stopped and the job fails (not retried). Default: the server's "
            "`RBFKM_MAX_RUNTIME_S`; above its `RBFKM_MAX_RUNTIME_CAP_S` a `422`. "
            "`GET /v1/jobs/{id}` shows the effective limit in `params`.",
            examples=[600],
        ),
    ),
    parallel=(
        Annotated[
            Annotated[int, Field(strict=True, ge=1, le=MAX_PARALLEL)] | Literal["all"] | None,
            BeforeValidator(_check_parallel),
        ],
        Field(
            default=None,
            description="Processes that fit the job together, data-parallel: an integer "
            '>= 1, or `"all"`, every one the worker that claims it offers '
            "(`RBFKM_WORKER_PROCS` on the CPU, the GPUs of its machine on CUDA). More than "
            "that worker offers runs on what it offers (the result's `processes` says how "
            "many); the result is the one fit of the whole dataset either way. Default: 1.",
            examples=[2, "all"],
        ),
    ),
    callback_url=(
        str | None,
        Field(
            default=None,
            max_length=2048,
            pattern=r"^[Hh][Tt][Tt][Pp][Ss]?://",
            description="Webhook: POSTed once when the job ends (succeeded, failed, "
            "canceled), signed (Standard Webhooks, the tenant's secret), retried with "
            "back-off; `webhook` of the job records the tries. A host that is not public "
            "(loopback, private, link-local, reserved) is a `422` unless the server "
            "allows it.",
            examples=["https://example.com/hooks/rbfkm"],
        ),
    ),
    output=(
        str | None,
        Field(
            default=None,
            max_length=2048,
            pattern=r"^([Ss]3|[Gg][Ss])://",
            description="An object-store prefix (`s3://bucket/prefix/`, `gs://...`) the "
            "worker writes the results to, as Parquet (`labels.parquet`, "
            "`centroids.parquet`, `assignments.parquet`), with the server's credentials for "
            "the tenant; `output` of the job records the outcome. A store the server has no "
            "options for is a `422`.",
            examples=["s3://bucket/results/run-1/"],
        ),
    ),
)


class Progress(BaseModel):
    """Where a running fit is; reported by the engine's callback."""

    fraction: float | None = Field(default=None, ge=0, le=1)
    sigma: float | None = None
    iteration: int | None = None
    objective: float | None = None


class WebhookDelivery(BaseModel):
    """One try of a job's webhook: the receiver's status code, or why there was none."""

    attempt: int
    at: datetime
    status_code: int | None = None
    error: str | None = None


class Webhook(BaseModel):
    """A job's webhook (its `callback_url`) and its tries so far."""

    url: str
    deliveries: list[WebhookDelivery]
    delivered: bool = Field(description="Whether a try was answered with a 2xx.")


class JobOutput(BaseModel):
    """Where a job's results are written (its `output`) and how that went."""

    url: str
    status: Literal["pending", "written", "failed", "skipped"] = Field(
        description="`pending` until the job has a result; `written`; `failed` (the "
        "result is kept and served all the same); `skipped`: the job ended without one."
    )
    files: list[str] | None = Field(default=None, description="The objects written.")
    error: str | None = Field(default=None, description="Why the write failed.")


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
                    "tenant": "default",
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
    tenant: str = Field(default=DEFAULT_TENANT, description="The tenant that owns the job.")
    webhook: Webhook | None = Field(
        default=None, description="The webhook of a job with a `callback_url`."
    )
    output: JobOutput | None = Field(
        default=None, description="The results' copy of a job with an `output`."
    )


class JobList(Page):
    """`GET /v1/jobs`."""

    items: list[Job]


class DeadLetter(BaseModel):
    """A job the queue gave up on."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "job_id": "0d6f1b0a2e3c4d5f8a9b7c6d5e4f3a2b",
                    "error": "n_clusters=5 exceeds the number of distinct points (3)",
                    "attempts": 1,
                    "failed_at": "2026-01-01T12:00:02Z",
                    "tenant": "default",
                }
            ]
        }
    )

    job_id: str
    error: str = Field(description="The last error of the job.")
    attempts: int = Field(description="How many times the job was claimed by a worker.")
    failed_at: datetime = Field(description="When the job was given up.")
    tenant: str = Field(default=DEFAULT_TENANT, description="The tenant that owned the job.")


class DeadLetterList(Page):
    """`GET /v1/jobs/dead-letters`."""

    items: list[DeadLetter]


class HistoryEntry(BaseModel):
    """One temperature of the annealing path."""

    model_config = ConfigDict(extra="allow")

    sigma: float
    objective: float | None = None
    inertia: float | None = None
    iterations: int | None = None
    mean_nnz: float | None = None


class ResultMetrics(BaseModel):
    """Quality of the partition (internal indices: no ground truth needed); `null` where
    undefined (fewer than 2 non-empty clusters, or one cluster per point)."""

    sizes: list[int] = Field(description="Points per cluster, in the centroids' order.")
    silhouette: float | None = Field(
        default=None,
        description="Mean silhouette on a seeded sample of at most 2 000 rows, in [-1, 1] "
        "(higher is better).",
    )
    davies_bouldin: float | None = Field(
        default=None, description="Davies-Bouldin index on all rows (lower is better)."
    )
    calinski_harabasz: float | None = Field(
        default=None, description="Calinski-Harabasz index on all rows (higher is better)."
    )


class KPathEntry(BaseModel):
    """One count of centres the annealing passed through."""

    k: int
    sigma_appear: float | None = Field(
        default=None,
        description="Temperature at which the count appeared (`null`: reached without annealing).",
    )
    sigma_split: float | None = Field(
        default=None, description="Temperature at which it split again (`null` for the last)."
    )
    inertia: float | None = Field(
        default=None,
        description="Inertia after a short Lloyd finish from its centres, for every count "
        'of an `n_clusters: "auto"` job; with a fixed `n_clusters` only the last count (the '
        "fit itself) has one.",
    )


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
                    "converged": True,
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
    converged: bool = Field(
        default=True,
        description="Whether the fit ended on a K-Means fixed point (its last Lloyd phase "
        "moved the centres by less than `tol`); `false` when `max_iter` ran out first: "
        "raise `max_iter` or `tol`.",
    )
    sigma: float
    device: str | None = Field(
        default=None,
        description="Where the fit ran (`cpu`, `cuda:N`): a job's `device` the worker's "
        "machine lacks runs on the worker's own.",
    )
    processes: int | None = Field(
        default=None,
        ge=1,
        description="Processes that fitted the job together: its `parallel`, at most what "
        "the worker that ran it offers (`RBFKM_WORKER_PROCS` on the CPU, its GPUs on CUDA).",
    )
    history: list[HistoryEntry] | None = None
    n_clusters: int | None = Field(
        default=None,
        description="Clusters fitted: the job's `n_clusters`, or the k that `auto` chose.",
    )
    metrics: ResultMetrics | None = None
    k_path: list[KPathEntry] | None = Field(
        default=None,
        description="The counts of centres annealing passed through (`n_clusters: auto` "
        "chooses among them).",
    )


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

    # Two integers, said with `items` rather than the `prefixItems` a tuple gets: the same
    # constraint, which tools reading `items` only (schemathesis 4, OpenAPI 3.0 ones) follow.
    shape: Annotated[
        tuple[int, int],
        WithJsonSchema(
            {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2}
        ),
    ] = Field(description="Shape of the whole matrix (n_samples, k).")
    offset: int = Field(description="First row of this page.")
    limit: int
    indptr: list[int] = Field(description="Row pointers of this page (len = rows + 1).")
    indices: list[int]
    values: list[float]


#: A point of the projection's plane.
Point2 = Annotated[
    list[float],
    Field(min_length=2, max_length=2),
    WithJsonSchema({"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2}),
]


class Projection(BaseModel):
    """`GET /v1/jobs/{id}/projection`: a seeded sample of the data (at most 5 000 rows) on
    its first two principal axes, computed by the worker when the job finished."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "n_samples": 300,
                    "rows": [0, 1, 2],
                    "points": [[-4.1, 0.3], [5.2, -0.1], [-3.9, 0.2]],
                    "labels": [0, 1, 0],
                    "entropy": [0.0, 0.12, 0.0],
                    "centroids": [[-4.0, 0.2], [5.1, 0.0]],
                    "explained_variance_ratio": [0.93, 0.05],
                }
            ]
        }
    )

    n_samples: int = Field(description="Rows of the dataset the sample is drawn from.")
    rows: list[int] = Field(description="The sampled rows (indices into the dataset), ascending.")
    points: list[Point2] = Field(description="Each sampled row on the two principal axes.")
    labels: list[int] = Field(description="Each sampled row's label.")
    entropy: list[float] = Field(
        description="Shannon entropy (nats) of each sampled row's soft assignment: 0 for a "
        "point in one cluster only, at most ln k."
    )
    centroids: list[Point2] = Field(description="The centroids on the same axes.")
    explained_variance_ratio: list[float] = Field(
        description="The share of the sample's variance each axis explains (0 for an axis "
        "the data lacks).",
        min_length=2,
        max_length=2,
    )


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
