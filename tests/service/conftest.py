"""Fixtures for the service tests: settings on a temp data dir, an app on the real Redis."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest
import redis
import uvicorn
from fastapi.testclient import TestClient

from service.app import create_app
from service.embedded import free_port
from service.settings import Settings
from service.supervisor import stop_processes
from service.worker import spawn_workers

PROBLEM = "application/problem+json"


def npy_bytes(array: np.ndarray) -> bytes:
    """An array as the bytes of a `.npy` file."""
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


def blobs(n: int = 240, d: int = 2, k: int = 3, seed: int = 0) -> np.ndarray:
    """Well-separated Gaussian blobs: a dataset every method clusters the same way."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-10, 10, size=(k, d))
    labels = np.arange(n) % k
    return centres[labels] + rng.normal(scale=0.5, size=(n, d))


def assert_problem(response: Any, status: int) -> dict[str, Any]:
    """The body of a problem+json response with `status`, after checking its shape."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    body = response.json()
    assert body["status"] == status
    assert {"type", "title", "detail", "errors"} <= set(body)
    return body


def upload(
    client: TestClient, array: np.ndarray | None = None, headers: dict[str, str] | None = None
) -> dict[str, Any]:
    """Upload `array` (30 points in 3 blobs by default) as `.npy`; the stored metadata."""
    response = client.post(
        "/v1/datasets",
        content=npy_bytes(blobs(30, 2, 3) if array is None else array),
        headers={"Content-Type": "application/x-npy", **(headers or {})},
    )
    assert response.status_code in (200, 201), response.text
    return response.json()


def wait_for(predicate: Callable[[], Any], timeout: float = 20.0, what: str = "") -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what or predicate}")


def committed(queue: Any, job_id: str) -> dict[str, Any] | None:
    """The result metadata a success committed to the job's record (None before one): the
    record the queue's fencing protects, read where the queue keeps it."""
    raw = queue.client.hget(queue.job_key(job_id), "result")
    return None if raw is None else json.loads(raw)


def make_settings(redis_url: str, data_dir: Path, **overrides: object) -> Settings:
    """Settings for a test: a private data dir, the test Redis, no environment surprises."""
    values: dict[str, object] = {
        "REDIS_URL": redis_url,
        "data_dir": data_dir,
        "key_prefix": "test",
        "api_keys": [],
        "workers": 1,
        "device": "cpu",
        "lease_s": 5.0,
    }
    values.update(overrides)
    return Settings(**values)


@pytest.fixture
def settings(redis_client: redis.Redis, redis_server: str, tmp_path: Path) -> Settings:
    """Settings on an empty Redis database and an empty data dir."""
    return make_settings(redis_server, tmp_path / "data")


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    """An in-process client of the app (no workers: jobs stay queued)."""
    with TestClient(create_app(settings), raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture
def secured(settings: Settings) -> Iterator[TestClient]:
    """A client of an app that accepts the API keys "alpha" and "beta"."""
    keyed = settings.model_copy(update={"api_keys": ["alpha", "beta"]})
    with TestClient(create_app(keyed)) as test_client:
        yield test_client


@contextlib.contextmanager
def live_server(settings: Settings, tmp_dir: Path, workers: int = 1) -> Iterator[str]:
    """A real uvicorn server on a free port and ``workers`` spawned worker processes, for
    the end-to-end tests; yields the base URL once uvicorn is up (readiness, which needs
    a worker's heartbeat, is the caller's to wait for)."""
    with pytest.MonkeyPatch.context() as patch:
        # The worker locks its device with a file in the temp dir: keep it private to this
        # test run, so other runs on the machine cannot hold our worker back.
        patch.setenv("TMPDIR", str(tmp_dir))
        processes = spawn_workers(settings, workers) if workers else []
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, 30, "uvicorn")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
        stop_processes(processes)


def chromium() -> str:
    """The path of a Chromium (or Chrome) on this machine; skips the test without one."""
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("Chromium is not installed (apt-get install chromium)")


@contextlib.contextmanager
def private_db(redis_server: str, db: int) -> Iterator[str]:
    """The URL of database ``db`` of the test Redis, one no other test flushes: empty at
    the start and emptied at the end (for module-scoped live servers)."""
    url = redis_server.rsplit("/", 1)[0] + f"/{db}"
    store = redis.Redis.from_url(url)
    store.flushdb()
    try:
        yield url
    finally:
        store.flushdb()
        store.close()


_Server = TypeVar("_Server", bound="LoopbackServer")


class LoopbackServer:
    """A real HTTP server on loopback, in a thread while the ``with`` block runs, answering
    with ``handler`` (a ``BaseHTTPRequestHandler`` class); ``base_url`` its address."""

    def __init__(self, handler: type) -> None:
        import http.server

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self: _Server) -> _Server:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class Receiver(LoopbackServer):
    """A real HTTP server on loopback that records what is POSTed to it (webhooks).

    ``statuses``: the answers to the first requests, in order (then 200)."""

    def __init__(self, statuses: tuple[int, ...] = ()) -> None:
        import http.server

        self.statuses = list(statuses)
        self.received: list[tuple[dict[str, str], bytes]] = []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                receiver.received.append(({k.lower(): v for k, v in self.headers.items()}, body))
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(Handler)
        self.url = f"{self.base_url}/hook"


#: A webhook secret for tests (Standard Webhooks' own example).
WEBHOOK_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


class FileServer(LoopbackServer):
    """A real HTTP server on loopback serving ``files`` (path -> bytes): dataset sources.

    A path not in ``files`` answers 404; ``redirects`` (path -> location) answer 302."""

    def __init__(self, files: dict[str, bytes], redirects: dict[str, str] | None = None) -> None:
        import http.server

        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path in (redirects or {}):
                    self.send_response(302)
                    self.send_header("Location", (redirects or {})[self.path])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = server.files.get(self.path)
                self.send_response(200 if body is not None else 404)
                self.send_header("Content-Length", str(len(body or b"")))
                self.end_headers()
                self.wfile.write(body or b"")

            def log_message(self, *args: object) -> None:
                pass

        self.files = files
        super().__init__(Handler)
        self.url = self.base_url


#: The credentials of the test object store (moto accepts any).
S3_KEY, S3_SECRET = "test-key", "test-secret"


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """An S3-compatible server on loopback (moto's server mode): its endpoint URL; skips
    without moto, s3fs or boto3 (``pip install 'rbfkm[test]'``)."""
    pytest.importorskip("s3fs")
    pytest.importorskip("boto3")
    server_mode = pytest.importorskip("moto.server")
    port = free_port()
    server = server_mode.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def s3_client(endpoint: str) -> Any:
    """A boto3 client of the test object store (to put sources and read outputs)."""
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=S3_KEY,
        aws_secret_access_key=S3_SECRET,
        region_name="us-east-1",
    )


def s3_options(endpoint: str) -> dict[str, dict[str, dict[str, Any]]]:
    """``RBFKM_STORAGE_OPTIONS`` that reach the test object store, for every tenant."""
    return {"*": {"s3": {"key": S3_KEY, "secret": S3_SECRET, "endpoint_url": endpoint}}}
