"""`Client` and `AsyncClient`: one set of methods, two drivers.

:class:`Operations` defines every method once; each hands its operation (a generator of
:mod:`rbfkm_client.protocol` steps, built by :class:`rbfkm_client.operations.Api`) to
``self._run``. :class:`Client` runs it to the end and returns the value;
:class:`AsyncClient`'s ``_run`` is a coroutine, so the same methods are awaited there.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from rbfkm_client.models import Dataset, Job
from rbfkm_client.operations import Api
from rbfkm_client.protocol import Call, Open, Operation, ReadLine, Retry, Sleep, Step, Stream

#: Where the client looks for the service, and its key, when none is given.
URL_VARIABLE, KEY_VARIABLE = "RBFKM_URL", "RBFKM_API_KEY"
DEFAULT_URL = "http://127.0.0.1:8000"
#: Seconds an HTTP exchange may take (each of connect, read, write, pool).
DEFAULT_TIMEOUT_S = 60.0
_CHUNK = 1 << 20


def service_url(url: str | None = None) -> str:
    """``url``, else ``$RBFKM_URL``, else the address ``rbfkm serve`` listens on."""
    return (url or os.environ.get(URL_VARIABLE) or DEFAULT_URL).rstrip("/")


def key_from_env(key: str | None = None) -> str | None:
    """``key``, else ``$RBFKM_API_KEY`` (None: the service has no keys)."""
    return key or os.environ.get(KEY_VARIABLE) or None


def _file_chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            yield chunk


async def _async_file_chunks(path: Path) -> AsyncIterator[bytes]:
    for chunk in _file_chunks(path):
        yield chunk


class Operations:
    """The client's methods; a subclass supplies its HTTP client (``_connect``) and the
    driver that runs an operation with it (``_run``).

    ``url``: default ``$RBFKM_URL``, else ``http://127.0.0.1:8000``; ``api_key``: default
    ``$RBFKM_API_KEY``. Every call is retried on connection errors, 429 and 502-504 as
    ``retry`` says; ``timeout`` bounds each HTTP exchange.
    """

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        retry: Retry | None = None,
    ) -> None:
        self.url = service_url(url)
        self._api = Api(key_from_env(api_key), retry)
        self._http = self._connect(timeout)

    def _connect(self, timeout: float) -> Any:
        raise NotImplementedError

    def _run(self, operation: Operation[Any]) -> Any:
        raise NotImplementedError

    def _request(self, call: Call, chunks: Callable[[Path], Any]) -> httpx.Request:
        """The httpx request of a call; a file body is streamed by ``chunks``."""
        content = chunks(call.content) if isinstance(call.content, Path) else call.content
        return self._http.build_request(
            call.method,
            call.path,
            params=call.params,
            json=call.json,
            content=content,
            headers=call.headers,
        )

    def upload(
        self, data: Any, name: str | None = None, weight_column: str | int | None = None
    ) -> Dataset:
        """Store a dataset: an ndarray, a pandas DataFrame, a pyarrow Table, the path of a
        ``.npy``/``.csv``/``.parquet``/``.json`` file, or an ``https://``, ``s3://`` or
        ``gs://`` URL of one (sent by reference: the service reads it, with its own
        credentials for the store). The same bytes uploaded again return the stored
        dataset. ``weight_column``: a column of sample weights, taken out of the features
        and used by every fit on the dataset (its name, or its 0-based index in data
        without column names)."""
        return self._run(self._api.upload(data, name, weight_column))

    def dataset(self, dataset: Dataset | str) -> Dataset:
        """A stored dataset."""
        return self._run(self._api.dataset(dataset))

    def datasets(self, limit: int | None = None) -> list[Dataset]:
        """Stored datasets, newest first (all, or ``limit``)."""
        return self._run(self._api.datasets(limit))

    def delete_dataset(self, dataset: Dataset | str) -> None:
        """Delete a dataset."""
        return self._run(self._api.delete_dataset(dataset))

    def fit(
        self,
        dataset: Any,
        n_clusters: int,
        *,
        wait: bool = True,
        progress: bool | None = None,
        timeout: float | None = None,
        **params: Any,
    ) -> Job:
        """Cluster ``dataset`` (a Dataset, its id, or data to upload as for ``upload``)
        into ``n_clusters``, with the engine's ``params`` (``assignment``, ``sigma0``,
        ``random_state``, ``max_runtime_s``, ...; omitted: the service's defaults).

        With ``wait`` it returns the succeeded job (JobFailed if it failed or was
        canceled; WaitTimeout after ``timeout`` seconds), showing a progress bar on a
        terminal (``progress``: True/False to force it on/off); else the queued job.
        """
        return self._run(self._api.fit(dataset, n_clusters, params, wait, progress, timeout))

    def job(self, job: Job | str) -> Job:
        """A job as it is now."""
        return self._run(self._api.job(job))

    def jobs(self, status: str | None = None, limit: int | None = None) -> list[Job]:
        """Jobs, newest first (only those in ``status``; all, or ``limit``)."""
        return self._run(self._api.jobs(status, limit))

    def wait(
        self, job: Job | str, *, progress: bool | None = None, timeout: float | None = None
    ) -> Job:
        """Wait for a job to end (see ``fit``)."""
        return self._run(self._api.wait(job, progress, timeout))

    def cancel(self, job: Job | str) -> Job:
        """Cancel a job: a queued one never runs, a running one stops soon."""
        return self._run(self._api.cancel(job))

    def delete_job(self, job: Job | str) -> None:
        """Delete a job and its result (canceling it first)."""
        return self._run(self._api.delete_job(job))

    def result(self, job: Job | str, *, as_frame: bool = False) -> Any:
        """The result of a succeeded job (:class:`rbfkm_client.Result`): numpy arrays, or
        with ``as_frame`` pandas DataFrames indexed by ``row`` and ``cluster``."""
        return self._run(self._api.result(job, as_frame))

    def assignments(self, job: Job | str) -> Any:
        """The soft assignments (n x k) as a ``scipy.sparse.csr_matrix``."""
        return self._run(self._api.assignments(job))

    def download(self, path: str, media: str, params: dict[str, Any] | None = None) -> bytes:
        """The bytes of a result route (``/v1/jobs/{id}/result``) in ``media``."""
        return self._run(self._api.download(path, media, params))

    def predict(self, job: Job | str, data: Any) -> Any:
        """Assign new points (as for ``upload``) with a fitted job's centres:
        :class:`rbfkm_client.Prediction` (``labels``, ``assignments``)."""
        return self._run(self._api.predict(job, data))


class Client(Operations):
    """A client of an rbfkm service; a context manager, or ``close()`` it."""

    def _connect(self, timeout: float) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=timeout)

    def _run(self, operation: Operation[Any]) -> Any:
        reply: Any = None
        try:
            while True:
                reply = self._do(operation.send(reply))
        except StopIteration as stop:
            return stop.value

    def _do(self, step: Step) -> Any:
        """Take one step; a transport error is the reply, for the operation to judge."""
        try:
            if isinstance(step, Sleep):
                return time.sleep(step.seconds)
            if isinstance(step, Call):
                return self._http.send(self._request(step, _file_chunks))
            if isinstance(step, Open):
                response = self._http.send(self._request(step.call, _file_chunks), stream=True)
                return Stream(response, response.iter_lines())
            if isinstance(step, ReadLine):
                return next(step.stream.lines, None)
            return step.stream.response.close()
        except httpx.TransportError as exc:
            return exc

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient(Operations):
    """The asyncio twin of :class:`Client`: the same methods, awaited; an async context
    manager, or ``await aclose()`` it."""

    def _connect(self, timeout: float) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, timeout=timeout)

    async def _run(self, operation: Operation[Any]) -> Any:  # type: ignore[override]
        reply: Any = None
        try:
            while True:
                reply = await self._do(operation.send(reply))
        except StopIteration as stop:
            return stop.value

    async def _do(self, step: Step) -> Any:
        """Take one step; a transport error is the reply, for the operation to judge."""
        try:
            if isinstance(step, Sleep):
                return await asyncio.sleep(step.seconds)
            if isinstance(step, Call):
                return await self._http.send(self._request(step, _async_file_chunks))
            if isinstance(step, Open):
                request = self._request(step.call, _async_file_chunks)
                response = await self._http.send(request, stream=True)
                return Stream(response, response.aiter_lines())
            if isinstance(step, ReadLine):
                return await anext(step.stream.lines, None)
            return await step.stream.response.aclose()
        except httpx.TransportError as exc:
            return exc

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
