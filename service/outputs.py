"""A job's ``output``: its results written as Parquet to an object-store prefix.

A job created with ``"output": "s3://bucket/prefix/"`` has its worker write, once the
result is saved on the data directory and before the job is marked succeeded:

- ``{prefix}labels.parquet`` (``row``, ``label``),
- ``{prefix}centroids.parquet`` (``cluster``, ``f0`` ..),
- ``{prefix}assignments.parquet`` (``row``, ``cluster``, ``weight``),

the tables of :mod:`service.formats` (what ``Accept: application/vnd.apache.parquet``
serves), each carrying the job id, the attempt and the fit's scalars as its ``rbfkm``
metadata. The URL is checked when the job is created (scheme, the tenant's storage options,
an allowed endpoint: :mod:`service.objectstore`); the write uses the same options.

The write's outcome is recorded with the result (``output`` of ``GET /v1/jobs/{id}``:
``written`` with the files, or ``failed`` with the error); a failed write never fails the
job nor loses its result, which the API serves as usual. Two attempts of one job (a worker
presumed dead that was only slow) may both write; each writes whole files, and the
metadata's ``attempt`` says whose they are.
"""

from __future__ import annotations

import logging
from typing import Any

from service.formats import assignments_table, centroids_table, labels_table
from service.jobs import OUTPUT_FAILED, OUTPUT_WRITTEN
from service.objectstore import ObjectUrl, backend_error, filesystem, parse_object_url
from service.results import ResultStore
from service.settings import Settings

log = logging.getLogger(__name__)

FIELD = "body.output"
#: The files a job's output holds, in the order they are written.
FILES: tuple[str, ...] = ("labels.parquet", "centroids.parquet", "assignments.parquet")


def _prefix(url: str) -> ObjectUrl:
    target = parse_object_url(url, FIELD)
    key = target.key if not target.key or target.key.endswith("/") else target.key + "/"
    return ObjectUrl(url, target.scheme, target.bucket, key)


def check_output(url: str, settings: Settings, tenant: str) -> None:
    """Refuse an ``output`` the worker could not write: not an object-store URL, no storage
    options for the tenant, the backend not installed, an endpoint not allowed."""
    filesystem(_prefix(url), settings, tenant, FIELD)


def write_output(
    url: str,
    results: ResultStore,
    job_id: str,
    settings: Settings,
    tenant: str,
    metadata: dict[str, Any],
) -> dict[str, Any]:
    """Write the stored result of ``job_id`` under ``url``; the outcome as recorded."""
    try:
        target = _prefix(url)
        fs = filesystem(target, settings, tenant, FIELD)
        tables = {
            "labels.parquet": labels_table(results.labels(job_id), metadata),
            "centroids.parquet": centroids_table(results.centroids(job_id), metadata),
            "assignments.parquet": assignments_table(results.assignments(job_id), metadata),
        }
        written = []
        for name in FILES:
            path = f"{target.path.rstrip('/')}/{name}"
            _write_parquet(fs, path, tables[name])
            written.append(f"{target.scheme}://{path}")
    except Exception as exc:  # any failure is recorded; the result stays served
        error = backend_error(exc, url, FIELD, "write")
        log.warning("job %s: output to %s failed: %s", job_id, url, error)
        return {"url": url, "status": OUTPUT_FAILED, "error": error.detail}
    log.info("job %s: output written to %s", job_id, url)
    return {"url": url, "status": OUTPUT_WRITTEN, "files": written}


def _write_parquet(fs: Any, path: str, table: Any) -> None:
    import pyarrow.parquet as pq

    with fs.open(path, "wb") as handle:
        pq.write_table(table, handle)


class OutputWriter:
    """A worker's writer of job outputs: its result store and settings (storage options)."""

    def __init__(self, results: ResultStore, settings: Settings) -> None:
        self.results = results
        self.settings = settings

    def __call__(
        self, url: str, job_id: str, tenant: str, metadata: dict[str, Any]
    ) -> dict[str, Any]:
        """Write ``job_id``'s stored result to ``url``; the outcome to record."""
        return write_output(url, self.results, job_id, self.settings, tenant, metadata)
