"""The size limit of every request body: JSON requests and dataset bodies, with and without
a Content-Length, in process and over real HTTP."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import redis
from fastapi.testclient import TestClient

from service.app import create_app
from service.settings import Settings
from tests.service.conftest import assert_problem, npy_bytes
from tests.service.routes.test_bodies import _serve_api

LIMIT = 2000


@pytest.fixture
def small(redis_client: redis.Redis, settings: Settings) -> Iterator[TestClient]:
    """A client of an app whose JSON requests take at most 2000 bytes, uploads 4000."""
    limited = settings.model_copy(
        update={"max_json_body_bytes": LIMIT, "max_upload_bytes": 2 * LIMIT}
    )
    with TestClient(create_app(limited), raise_server_exceptions=False) as client:
        yield client


def job_body(size: int) -> bytes:
    """A job request of about ``size`` bytes (a long ``init``)."""
    rows = ",".join(["[0.5, 1.5]"] * (size // 11))
    return f'{{"dataset_id": "d", "n_clusters": 2, "init": [{rows}]}}'.encode()


def chunks(body: bytes, size: int = 500) -> Iterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


def test_a_job_body_over_the_json_limit_is_a_413_that_says_what_to_do(small: TestClient) -> None:
    headers = {"Content-Type": "application/json"}
    for content in (job_body(3 * LIMIT), chunks(job_body(3 * LIMIT))):  # declared, chunked
        problem = assert_problem(small.post("/v1/jobs", content=content, headers=headers), 413)
        assert problem["type"] == "urn:rbfkm:problem:payload-too-large"
        assert f"limit of {LIMIT} bytes (RBFKM_MAX_JSON_BODY_BYTES)" in problem["detail"]
        assert "POST /v1/datasets" in problem["detail"]
        assert problem["errors"] == [{"field": "body", "message": f"larger than {LIMIT} bytes"}]


def test_a_job_body_under_the_limit_is_read(small: TestClient) -> None:
    body = job_body(LIMIT - 100)
    for content in (body, chunks(body)):
        answer = small.post(
            "/v1/jobs", content=content, headers={"Content-Type": "application/json"}
        )
        assert_problem(answer, 422)  # read and validated: dataset "d" does not exist
        assert "init" in answer.json()["detail"]


def test_dataset_bodies_have_the_upload_limit(small: TestClient) -> None:
    body = json.dumps({"data": [[0.25, 0.5]] * ((3 * LIMIT) // 26)}).encode()
    assert LIMIT < len(body) < 2 * LIMIT
    for content in (body, chunks(body)):
        created = small.post(
            "/v1/datasets", content=content, headers={"Content-Type": "application/json"}
        )
        assert created.status_code in (200, 201), created.text
    big = npy_bytes(np.zeros((LIMIT, 1)))
    for content in (big, chunks(big)):
        problem = assert_problem(
            small.post(
                "/v1/datasets", content=content, headers={"Content-Type": "application/x-npy"}
            ),
            413,
        )
        assert (
            "RBFKM_MAX_UPLOAD_BYTES" in problem["detail"] and ".npy or Parquet" in problem["detail"]
        )
    job = small.post("/v1/jobs", json={"dataset_id": created.json()["id"], "n_clusters": 1})
    predict = f"/v1/jobs/{job.json()['id']}/predict"
    # Declared: refused before the route runs (unread, a chunked one meets the job's 409 first).
    problem = assert_problem(
        small.post(predict, content=big, headers={"Content-Type": "application/x-npy"}), 413
    )
    assert "RBFKM_MAX_UPLOAD_BYTES" in problem["detail"]


def test_other_json_routes_and_unknown_paths_have_the_json_limit(small: TestClient) -> None:
    body = b"x" * (LIMIT + 1)
    for path in ("/v1/jobs/j/cancel", "/nowhere"):
        problem = assert_problem(small.post(path, content=body), 413)
        assert "RBFKM_MAX_JSON_BODY_BYTES" in problem["detail"]
    assert small.get("/healthz").status_code == 200  # no body: untouched


def test_413s_are_counted_by_the_metrics(small: TestClient) -> None:
    small.post(
        "/v1/jobs", content=job_body(3 * LIMIT), headers={"Content-Type": "application/json"}
    )
    metrics = small.get("/metrics").text
    assert 'status="413"' in metrics


# ---- over real HTTP: refused unread, early, the server unharmed -----------------------


def _send_until_answered(base_url: str, head: bytes, pieces: Iterator[bytes]) -> tuple[bytes, int]:
    """Send ``head`` then ``pieces`` until the server answers; the answer and the body bytes
    sent before it came."""
    host, port = base_url.removeprefix("http://").split(":")
    sent = 0
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(head)
        sock.setblocking(False)
        answer = b""
        for piece in pieces:
            with contextlib.suppress(BlockingIOError):
                answer += sock.recv(65536)
            if answer:
                break
            try:
                sock.sendall(piece)
            except (BlockingIOError, BrokenPipeError, ConnectionResetError):
                break
            sent += len(piece)
            time.sleep(0.002)
        sock.setblocking(True)
        deadline = time.monotonic() + 10
        while not _whole_response(answer) and time.monotonic() < deadline:
            more = sock.recv(65536)
            if not more:
                break
            answer += more
    return answer, sent


def _whole_response(answer: bytes) -> bool:
    """Whether ``answer`` holds a response's head and all the body its Content-Length
    announces (the body may come in a later packet than the head)."""
    head, sep, body = answer.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value.strip())
    return True


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
def test_a_large_job_body_is_refused_early_over_http(
    redis_server: str, tmp_path: Path, declared: bool
) -> None:
    redis_url = redis_server.rsplit("/", 1)[0] + "/7"
    proc, base_url, log = _serve_api(redis_url, tmp_path, {"RBFKM_MAX_JSON_BODY_BYTES": "65536"})
    total = 64 * 1024 * 1024  # 64 MiB announced; the server must answer long before
    piece = b"[0.5, 1.5]," * 5000
    try:
        framing = f"Content-Length: {total}" if declared else "Transfer-Encoding: chunked"
        head = (
            f"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"{framing}\r\n\r\n"
        ).encode()
        framed = piece if declared else b"%x\r\n%s\r\n" % (len(piece), piece)
        answer, sent = _send_until_answered(base_url, head, iter([framed] * (total // len(piece))))
        assert answer.startswith(b"HTTP/1.1 413"), answer[:300]
        assert b"RBFKM_MAX_JSON_BODY_BYTES" in answer and b"connection: close" in answer.lower()
        assert sent < 8 * 1024 * 1024, sent  # refused at the limit, not after the whole body
        assert httpx.get(f"{base_url}/healthz", timeout=5).status_code == 200
    finally:
        proc.terminate()
        proc.wait(30)
        redis.Redis.from_url(redis_url).flushdb()
    assert "Traceback" not in log.read_text(), log.read_text()
