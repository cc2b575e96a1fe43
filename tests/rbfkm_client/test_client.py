"""`Client` and `AsyncClient` against a live service (tests/rbfkm_client/conftest.py)."""

from __future__ import annotations

import asyncio
import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp
from rbfkm_client import ApiError, AsyncClient, Client, Job, JobFailed, Result
from rbfkm_client.media import PARQUET

from tests.rbfkm_client.conftest import KEY, TIGHT_KEY, Live, X
from tests.service.conftest import blobs


def _same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two labelings group the points alike (cluster numbers may differ)."""
    pairs = set(zip(a.tolist(), b.tolist(), strict=True))
    return len(pairs) == len(set(a.tolist())) == len(set(b.tolist()))


@pytest.fixture(scope="module")
def fitted(live: Live) -> tuple[Job, Result]:
    with Client(live.url, KEY) as client:
        job = client.fit(X, n_clusters=3, random_state=0, device="cpu")
        return job, client.result(job)


def test_fit_uploads_waits_and_reads_the_result(fitted: tuple[Job, Result]) -> None:
    job, result = fitted
    assert job.status == "succeeded" and job.fraction == 1.0
    assert result.labels.shape == (300,) and result.labels.dtype == np.int64
    assert result.centroids.shape == (3, 2)
    assert _same_partition(result.labels, np.arange(300) % 3)
    assert result.inertia > 0 and result.n_iter >= 1 and result.converged


def test_the_result_as_data_frames(client: Client, fitted: tuple[Job, Result]) -> None:
    job, result = fitted
    frames = client.result(job, as_frame=True)
    assert isinstance(frames.labels, pd.DataFrame) and frames.labels.index.name == "row"
    assert np.array_equal(frames.labels["label"].to_numpy(), result.labels)
    assert list(frames.centroids.columns) == ["f0", "f1"]
    assert np.allclose(frames.centroids.to_numpy(), result.centroids)
    assert frames.inertia == result.inertia and frames.n_iter == result.n_iter


def test_assignments_are_a_csr_matrix_read_page_by_page(
    client: Client, fitted: tuple[Job, Result]
) -> None:
    job, result = fitted
    whole = client.assignments(job)
    assert isinstance(whole, sp.csr_matrix) and whole.shape == (300, 3)
    assert np.allclose(whole.sum(axis=1), 1.0)
    assert np.array_equal(np.asarray(whole.argmax(axis=1)).ravel(), result.labels)
    paged = client._run(client._api.assignments(job, page_rows=7))  # 43 pages
    assert (paged != whole).nnz == 0


def test_predict_assigns_new_points_as_the_fit_did(
    client: Client, fitted: tuple[Job, Result]
) -> None:
    job, result = fitted
    prediction = client.predict(job, X[:25])
    assert np.array_equal(prediction.labels, result.labels[:25])
    assert prediction.assignments.shape == (25, 3)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    data = blobs(60, 3, 2, seed=11)
    paths = {suffix: tmp_path / f"points{suffix}" for suffix in (".npy", ".csv", ".parquet")}
    np.save(paths[".npy"], data)
    np.savetxt(paths[".csv"], data, delimiter=",", header="a,b,c", comments="")
    pq.write_table(pa.table({"a": data[:, 0], "b": data[:, 1], "c": data[:, 2]}), paths[".parquet"])
    return paths


@pytest.fixture
def file_server(files: dict[str, Path]) -> Iterator[str]:
    """A real HTTP server on loopback serving the files (for uploads by URL)."""
    directory = str(next(iter(files.values())).parent)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=directory)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_upload_takes_arrays_frames_tables_files_and_urls(
    client: Client, files: dict[str, Path], file_server: str
) -> None:
    data = np.load(files[".npy"])
    frame = pd.DataFrame(data, columns=["a", "b", "c"])
    sources = [
        data,
        data.tolist(),
        frame,
        pa.Table.from_pandas(frame),
        *files.values(),
        *(str(path) for path in files.values()),
        *(f"{file_server}/{path.name}" for path in files.values()),
    ]
    for source in sources:
        dataset = client.upload(source)
        assert (dataset.n_samples, dataset.n_features) == (60, 3), source
    # A URL goes by reference: the service read it, and says from where.
    url = f"{file_server}/{files['.npy'].name}"
    assert client.upload(url, name="by-url").raw["source"] == url
    named = client.upload(files[".csv"])
    assert named.name == "points.csv"
    assert client.dataset(named.id) == named


def test_listing_datasets_and_jobs(client: Client, fitted: tuple[Job, Result]) -> None:
    job, _ = fitted
    assert job.dataset_id in {dataset.id for dataset in client.datasets()}
    assert job.id in {listed.id for listed in client.jobs(status="succeeded")}
    assert len(client.jobs(limit=1)) == 1


def test_fit_without_waiting_then_cancel(client: Client) -> None:
    dataset = client.upload(blobs(5000, 8, 20, seed=2))
    job = client.fit(dataset, 200, wait=False, max_iter=10_000)
    assert job.status in ("queued", "running")
    # A queued job is canceled at once; a running one when its worker next checks.
    assert client.cancel(job).status in ("canceled", "running")
    with pytest.raises(JobFailed) as failed:
        client.wait(job)
    assert failed.value.job.status == "canceled"
    client.delete_job(job)
    with pytest.raises(ApiError) as missing:
        client.job(job)
    assert missing.value.status == 404 and missing.value.kind == "job-not-found"


def test_errors_carry_the_problem_detail(client: Client) -> None:
    dataset = client.upload(X[:10])
    with pytest.raises(ApiError) as raised:
        client.fit(dataset, n_clusters=50)
    error = raised.value
    assert error.status == 422 and "n_clusters (50) exceeds n_samples (10)" in error.detail
    assert error.errors[0]["field"] == "body.n_clusters"
    assert str(error).startswith("422 Unprocessable")


def test_a_wrong_key_is_a_401(live: Live) -> None:
    with Client(live.url, "not-a-key") as stranger, pytest.raises(ApiError) as raised:
        stranger.datasets()
    assert raised.value.status == 401 and "API key" in raised.value.detail


def test_a_tenant_over_its_job_quota_gets_the_429(live: Live) -> None:
    from rbfkm_client import Retry

    with Client(live.url, TIGHT_KEY, retry=Retry(attempts=1)) as tight:
        dataset = tight.upload(blobs(20_000, 8, 20, seed=4))
        first = tight.fit(dataset, 100, wait=False, max_iter=10_000)
        try:
            with pytest.raises(ApiError) as raised:
                tight.fit(dataset, 2, wait=False)
            assert raised.value.status == 429 and "quota" in raised.value.detail
        finally:
            tight.cancel(first)


def test_the_progress_bar_follows_the_job(
    client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    client.fit(blobs(2000, 4, 6, seed=5), 6, progress=True, random_state=1)
    shown = capsys.readouterr().err
    assert "100%" in shown and "status=succeeded" in shown


def test_the_async_client_does_the_same(live: Live, fitted: tuple[Job, Result]) -> None:
    _, expected = fitted

    async def session() -> tuple[Result, object, Job]:
        async with AsyncClient(live.url, KEY) as client:
            jobs = await asyncio.gather(
                *(client.fit(X, 3, random_state=0, device="cpu") for _ in range(2))
            )
            result = await client.result(jobs[0])
            table = await client.download(f"/v1/jobs/{jobs[1].id}/result", PARQUET)
            return result, table, await client.job(jobs[1])

    result, table, second = asyncio.run(session())
    assert np.array_equal(result.labels, expected.labels)
    assert second.status == "succeeded"
    assert pq.read_table(pa.BufferReader(table))["label"].to_pylist() == expected.labels.tolist()


def test_waiting_follows_the_jobs_events_rather_than_polling(live: Live) -> None:
    paths: list[str] = []
    with Client(live.url, KEY) as client:
        client._http.event_hooks["request"].append(lambda request: paths.append(request.url.path))
        job = client.fit(blobs(3000, 4, 5, seed=8), 5, random_state=0)
    assert job.status == "succeeded"
    assert f"/v1/jobs/{job.id}/events" in paths
    assert paths.count(f"/v1/jobs/{job.id}") == 1  # the first look only: no polls


class _NoEvents(http.server.BaseHTTPRequestHandler):
    """A reverse proxy to the service that has no event stream (an older service, or a
    proxy that refuses streams): `/events` answers 404, the rest is forwarded."""

    upstream = ""

    def _forward(self) -> None:
        if self.path.split("?")[0].endswith("/events"):
            self._answer(404, {"Content-Type": "application/problem+json"}, b"{}")
            return
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
        reply = httpx.request(
            self.command, self.upstream + self.path, headers=headers, content=body, timeout=60
        )
        keep = {
            k: v
            for k, v in reply.headers.items()
            if k.lower() in ("content-type", "location", "retry-after")
        }
        self._answer(reply.status_code, keep, reply.content)

    def _answer(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_DELETE = _forward

    def log_message(self, *args: object) -> None:
        pass


def test_waiting_polls_when_the_event_stream_is_unavailable(live: Live) -> None:
    handler = type("Handler", (_NoEvents,), {"upstream": live.url})
    proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    paths: list[str] = []
    try:
        with Client(f"http://127.0.0.1:{proxy.server_address[1]}", KEY) as client:
            client._http.event_hooks["request"].append(lambda r: paths.append(r.url.path))
            job = client.fit(blobs(3000, 4, 5, seed=9), 5, random_state=0)
    finally:
        proxy.shutdown()
        proxy.server_close()
    assert job.status == "succeeded"
    assert paths.count(f"/v1/jobs/{job.id}/events") == 2  # two failed streams, then polls
    assert paths.count(f"/v1/jobs/{job.id}") > 1
