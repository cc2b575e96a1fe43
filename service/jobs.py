"""Jobs: the one definition of what a job's ``status`` may be, and of its stored record.

The schemas (``Job.status``, the ``status`` filter of ``GET /v1/jobs``), the routes, the
queue and its Lua scripts (rendered from this enum by :mod:`service.lua`) all read
:class:`JobStatus`, so a state cannot be added or renamed in one place and forgotten in
another. :func:`job_record` reads a job's Redis hash into the shape ``GET /v1/jobs/{id}``
serves (``service.schemas.Job``).
"""

from __future__ import annotations

import json
from enum import Enum
from typing import Any

from service.common import json_number, text
from service.tenants import DEFAULT_TENANT


class JobStatus(str, Enum):
    """Where a job is in its life: queued -> running -> succeeded | failed | canceled.

    A ``str`` enum (``enum.StrEnum`` needs Python 3.11; the project supports 3.10): members
    compare equal to, hash like, and serialise (JSON, Redis) as their values.
    """

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELED = "canceled"

    def __str__(self) -> str:
        return self.value


#: Every status, in life-cycle order.
STATUSES: tuple[JobStatus, ...] = tuple(JobStatus)
#: A job in one of these will not change again (its hash expires after the retention).
TERMINAL: frozenset[JobStatus] = frozenset(
    {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELED}
)
#: A job in one of these is still to finish: pollers are told when to look again.
UNFINISHED: frozenset[JobStatus] = frozenset(set(JobStatus) - TERMINAL)

#: The progress of a job no worker has reported on.
EMPTY_PROGRESS: dict[str, Any] = {
    "fraction": None,
    "sigma": None,
    "iteration": None,
    "objective": None,
}


def progress_record(
    fraction: float | None, sigma: float | None, iteration: int | None, objective: float | None
) -> dict[str, Any]:
    """A progress report as stored: JSON-safe (NaN and infinities become null)."""
    return {
        "fraction": json_number(fraction),
        "sigma": json_number(sigma),
        "iteration": None if iteration is None else int(iteration),
        "objective": json_number(objective),
    }


def job_record(raw: dict[Any, Any]) -> dict[str, Any] | None:
    """A job's Redis hash as the API serves it; None for no hash (or half of one)."""
    if not raw:
        return None
    h = {text(k): text(v) for k, v in raw.items()}
    if "id" not in h:  # a hash half-created by hand or expired between calls
        return None
    progress = {**EMPTY_PROGRESS, **json.loads(h.get("progress") or "{}")}
    params = json.loads(h.get("params") or "{}")
    record = {
        "id": h["id"],
        "dataset_id": h.get("dataset_id"),
        "params": params,
        "status": h.get("status"),
        "progress": {k: progress.get(k) for k in EMPTY_PROGRESS},
        "error": h.get("error"),
        "created_at": h.get("created_at"),
        "started_at": h.get("started_at"),
        "finished_at": h.get("finished_at"),
        "attempts": int(h.get("attempts") or 0),
        "tenant": h.get("tenant") or DEFAULT_TENANT,
    }
    webhook = webhook_record(h.get("webhook"), params.get("callback_url"))
    if webhook is not None:  # a job with a callback_url
        record["webhook"] = webhook
    output = output_record(h.get("result"), params.get("output"), record["status"])
    if output is not None:  # a job with an output
        record["output"] = output
    return record


def webhook_record(stored: str | None, url: str | None) -> dict[str, Any] | None:
    """A job's webhook: its tries so far (``service.webhooks`` stores them), or none yet;
    None for a job without a ``callback_url``."""
    if stored:
        return json.loads(stored)
    return None if url is None else {"url": url, "deliveries": [], "delivered": False}


#: ``status`` of a job's ``output`` (:mod:`service.outputs`): before its result, once
#: written, on a failed write, and for a job that ended without a result.
OUTPUT_PENDING, OUTPUT_WRITTEN, OUTPUT_FAILED, OUTPUT_SKIPPED = (
    "pending",
    "written",
    "failed",
    "skipped",
)


def output_record(result: str | None, url: str | None, status: str | None) -> dict[str, Any] | None:
    """A job's ``output``: the worker's record of the write, stored with the result
    (``service.outputs`` writes it); None for a job without an ``output``."""
    if url is None:
        return None
    stored = json.loads(result).get("output") if result else None
    if stored:
        return stored
    ended = status in (JobStatus.FAILED, JobStatus.CANCELED)
    return {"url": url, "status": OUTPUT_SKIPPED if ended else OUTPUT_PENDING}
