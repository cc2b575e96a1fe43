"""The API's operations, each written once as a generator of :mod:`rbfkm_client.protocol`
steps, so that the sync and the async client share every line of them."""

from __future__ import annotations

import io
import json
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from rbfkm_client.bodies import (
    EXTENSIONS,
    Body,
    body_of,
    body_of_download,
    is_source,
    is_url,
    source_body,
)
from rbfkm_client.errors import ApiError, JobFailed, WaitTimeout, require
from rbfkm_client.media import ARROW_STREAM, EVENT_STREAM
from rbfkm_client.models import (
    Dataset,
    Job,
    Prediction,
    Result,
    csr_from_pages,
    scalars,
)
from rbfkm_client.progress import JobBar
from rbfkm_client.protocol import Call, Close, Open, Operation, ReadLine, Retry, Sleep, Stream, send

IDEMPOTENCY_HEADER = "Idempotency-Key"
#: Rows per page of the assignments (the API's largest page).
ASSIGNMENT_PAGE_ROWS = 100_000
#: Items per page of the lists (the API's largest page).
LIST_PAGE = 1000
#: First and longest pause between two polls of a job.
POLL_START_S, POLL_MAX_S = 0.05, 1.0
#: Event streams that may fail in a row (no new event) before waiting turns to polling.
EVENT_FAILURES = 2
#: The problem type of an unknown job.
JOB_NOT_FOUND = "urn:rbfkm:problem:job-not-found"


def job_id_of(job: Job | Dataset | str) -> str:
    """The id of a job (or dataset) given as the object or its id."""
    return job if isinstance(job, str) else job.id


class Api:
    """The operations of one service and key, as generators (no I/O of their own)."""

    def __init__(self, api_key: str | None = None, retry: Retry | None = None) -> None:
        self.auth = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.retry = retry or Retry()

    def request(self, method: str, path: str, **options: Any) -> Operation[httpx.Response]:
        """One call with the credentials, retried."""
        headers = {**self.auth, **options.pop("headers", {})}
        return send(Call(method, path, headers=headers, **options), self.retry)

    def json(self, method: str, path: str, **options: Any) -> Operation[Any]:
        """One call's JSON body."""
        response = yield from self.request(method, path, **options)
        return response.json()

    # --- datasets ----------------------------------------------------------------------

    def body(self, data: Any, name: str | None = None) -> Operation[Body]:
        """The body that sends ``data`` (a URL is downloaded first, without credentials)."""
        if not is_url(data):
            return body_of(data, name)
        response = yield from send(Call("GET", data, external=True), self.retry)
        return body_of_download(data, response, name)

    def upload(
        self, data: Any, name: str | None = None, weight_column: str | int | None = None
    ) -> Operation[Dataset]:
        """Store ``data`` as a dataset (the same bytes again return the stored one); a URL
        is sent by reference, for the service to read. ``weight_column``: the column that
        holds sample weights (its name, or its index in data without column names)."""
        weights = {} if weight_column is None else {"weight_column": str(weight_column)}
        if is_source(data):
            body = source_body(data, name)
            stored = yield from self.json("POST", "/v1/datasets", json=body, params=weights)
            return Dataset.from_json(stored)
        body = yield from self.body(data, name)
        params = {**({"name": body.name} if body.name else {}), **weights} or None
        headers = {"Content-Type": body.content_type}
        stored = yield from self.json(
            "POST", "/v1/datasets", content=body.content, params=params, headers=headers
        )
        return Dataset.from_json(stored)

    def dataset(self, dataset: Dataset | str) -> Operation[Dataset]:
        body = yield from self.json("GET", f"/v1/datasets/{job_id_of(dataset)}")
        return Dataset.from_json(body)

    def datasets(self, limit: int | None = None) -> Operation[list[Dataset]]:
        """Stored datasets, newest first (``limit`` of them, or all)."""
        items = yield from self._pages("/v1/datasets", {}, limit)
        return [Dataset.from_json(item) for item in items]

    def delete_dataset(self, dataset: Dataset | str) -> Operation[None]:
        yield from self.request("DELETE", f"/v1/datasets/{job_id_of(dataset)}")

    def _pages(self, path: str, params: dict[str, Any], limit: int | None) -> Operation[list]:
        items: list[Any] = []
        while limit is None or len(items) < limit:
            size = LIST_PAGE if limit is None else min(LIST_PAGE, limit - len(items))
            query = {**params, "offset": len(items), "limit": size}
            page = yield from self.json("GET", path, params=query)
            items.extend(page["items"])
            if not page["items"] or len(items) >= page["total"]:
                break
        return items

    # --- jobs --------------------------------------------------------------------------

    def dataset_id(self, dataset: Any) -> Operation[str]:
        """The id of a dataset given as a Dataset, an id, or data to upload."""
        if isinstance(dataset, Dataset):
            return dataset.id
        if isinstance(dataset, str) and not is_source(dataset) and not _looks_like_file(dataset):
            return dataset
        stored = yield from self.upload(dataset)
        return stored.id

    def submit(self, dataset: Any, n_clusters: int, params: dict[str, Any]) -> Operation[Job]:
        """Start a job; its ``Idempotency-Key`` makes the retries of this call one job."""
        dataset_id = yield from self.dataset_id(dataset)
        body = {"dataset_id": dataset_id, "n_clusters": n_clusters}
        body.update({key: value for key, value in params.items() if value is not None})
        headers = {IDEMPOTENCY_HEADER: uuid.uuid4().hex}
        job = yield from self.json("POST", "/v1/jobs", json=body, headers=headers)
        return Job.from_json(job)

    def job(self, job: Job | str) -> Operation[Job]:
        body = yield from self.json("GET", f"/v1/jobs/{job_id_of(job)}")
        return Job.from_json(body)

    def jobs(self, status: str | None = None, limit: int | None = None) -> Operation[list[Job]]:
        """Jobs, newest first (of one ``status``; ``limit`` of them, or all)."""
        params = {"status": status} if status else {}
        items = yield from self._pages("/v1/jobs", params, limit)
        return [Job.from_json(item) for item in items]

    def cancel(self, job: Job | str) -> Operation[Job]:
        body = yield from self.json("POST", f"/v1/jobs/{job_id_of(job)}/cancel")
        return Job.from_json(body)

    def delete_job(self, job: Job | str) -> Operation[None]:
        yield from self.request("DELETE", f"/v1/jobs/{job_id_of(job)}")

    def wait(
        self,
        job: Job | str,
        progress: bool | None = None,
        timeout: float | None = None,
        check: bool = True,
    ) -> Operation[Job]:
        """Follow the job until it ends, showing a progress bar; JobFailed if it did not
        succeed (with ``check``), WaitTimeout after ``timeout`` seconds. Follows the
        job's server-sent events, or polls where the service sends none."""
        current = yield from self.job(job)
        deadline = None if timeout is None else time.monotonic() + timeout
        bar = JobBar(current, progress)
        try:
            if not current.finished:
                current = yield from self._follow(current, bar, deadline)
        finally:
            bar.close()
        if check and current.status != "succeeded":
            raise JobFailed(current)
        return current

    def _follow(self, job: Job, bar: JobBar, deadline: float | None) -> Operation[Job]:
        """The job's events until it ends, reconnecting with Last-Event-ID; polling once
        the events route fails (an older service, a proxy that buffers) twice in a row."""
        last_id, failures = None, 0
        while not job.finished and failures < EVENT_FAILURES:
            headers = {**self.auth, "Accept": EVENT_STREAM}
            if last_id is not None:
                headers["Last-Event-ID"] = last_id
            stream = yield Open(Call("GET", f"/v1/jobs/{job.id}/events", headers=headers))
            if isinstance(stream, Exception):
                failures += 1
                continue
            try:
                if stream.response.status_code != 200:
                    failures += 1
                    continue
                before = last_id
                job, last_id = yield from self._events(stream, job, last_id, bar, deadline)
                failures = 0 if last_id != before else failures + 1
            finally:
                yield Close(stream)
        if job.finished:
            return job
        return (yield from self._poll(job, bar, deadline))

    def _events(
        self, stream: Stream, job: Job, last_id: str | None, bar: JobBar, deadline: float | None
    ) -> Operation[tuple[Job, str | None]]:
        """Read a stream's events (text/event-stream) until it ends or the job does."""
        fields: dict[str, str] = {}
        while True:
            line = yield ReadLine(stream)
            if line is None or isinstance(line, Exception):
                return job, last_id
            _check_deadline(job, deadline)
            if line.startswith(":"):
                continue
            if line:
                name, _, value = line.partition(":")
                fields[name] = value[1:] if value.startswith(" ") else value
                continue
            kind, data = fields.get("event"), fields.get("data")
            last_id = fields.get("id", last_id)
            fields = {}
            if kind == "deleted":
                raise ApiError(404, f"job {job.id} was deleted", type=JOB_NOT_FOUND)
            if kind in ("status", "progress") and data:
                job = Job.from_json(json.loads(data))
                bar.update(job)
                if job.finished:
                    return job, last_id

    def _poll(self, job: Job, bar: JobBar, deadline: float | None) -> Operation[Job]:
        """Poll the job until it ends, the pause doubling up to a second."""
        pause = POLL_START_S
        while not job.finished:
            _check_deadline(job, deadline)
            yield Sleep(pause)
            pause = min(POLL_MAX_S, pause * 2)
            job = yield from self.job(job.id)
            bar.update(job)
        return job

    def fit(
        self,
        dataset: Any,
        n_clusters: int,
        params: dict[str, Any],
        wait: bool = True,
        progress: bool | None = None,
        timeout: float | None = None,
    ) -> Operation[Job]:
        """Start a job on ``dataset`` (uploaded first unless it is a Dataset or an id)
        and, with ``wait``, wait for it to succeed."""
        job = yield from self.submit(dataset, n_clusters, params)
        if not wait:
            return job
        return (yield from self.wait(job, progress, timeout))

    # --- results -----------------------------------------------------------------------

    def result(self, job: Job | str, as_frame: bool = False) -> Operation[Result]:
        """The result of a succeeded job: numpy arrays, or pandas frames (``as_frame``,
        read as Arrow tables: needs pandas and pyarrow)."""
        path = f"/v1/jobs/{job_id_of(job)}/result"
        if not as_frame:
            body = yield from self.json("GET", path)
            return Result.from_json(body)
        labels = yield from self.table(path, {"include": "labels"})
        centroids = yield from self.table(path, {"include": "centroids"})
        metadata = json.loads(labels.schema.metadata[b"rbfkm"])
        return Result(
            labels=labels.to_pandas().set_index("row"),
            centroids=centroids.to_pandas().set_index("cluster"),
            **scalars(metadata),
        )

    def table(self, path: str, params: dict[str, Any] | None = None) -> Operation[Any]:
        """A result route's answer as a pyarrow Table (Arrow IPC stream)."""
        ipc = require("pyarrow.ipc", "arrow")
        response = yield from self.request(
            "GET", path, params=params, headers={"Accept": ARROW_STREAM}
        )
        return ipc.open_stream(io.BytesIO(response.content)).read_all()

    def download(
        self, path: str, media: str, params: dict[str, Any] | None = None
    ) -> Operation[bytes]:
        """A result route's answer as the bytes of ``media`` (Parquet, Arrow, npz)."""
        response = yield from self.request("GET", path, params=params, headers={"Accept": media})
        return response.content

    def assignments(self, job: Job | str, page_rows: int = ASSIGNMENT_PAGE_ROWS) -> Operation[Any]:
        """The soft assignments (n x k) as a scipy CSR matrix, read page by page."""
        require("scipy.sparse", "sparse")
        path = f"/v1/jobs/{job_id_of(job)}/assignments"
        pages: list[dict[str, Any]] = []
        offset, rows = 0, None
        while rows is None or offset < rows:
            page = yield from self.json("GET", path, params={"offset": offset, "limit": page_rows})
            pages.append(page)
            rows = page["shape"][0]
            offset += page_rows
        return csr_from_pages(pages)

    def predict(self, job: Job | str, data: Any) -> Operation[Prediction]:
        """Assign new points (anything ``upload`` takes) with the fitted job's centres."""
        body = yield from self.body(data)
        headers = {"Content-Type": body.content_type}
        answer = yield from self.json(
            "POST", f"/v1/jobs/{job_id_of(job)}/predict", content=body.content, headers=headers
        )
        return Prediction(np.asarray(answer["labels"], dtype=np.int64), answer["assignments"])


def _check_deadline(job: Job, deadline: float | None) -> None:
    if deadline is not None and time.monotonic() >= deadline:
        raise WaitTimeout(f"job {job.id} is still {job.status}")


def _looks_like_file(value: str) -> bool:
    """A string that names a data file rather than a dataset id."""
    return Path(value).suffix.lower() in EXTENSIONS or Path(value).is_file()
