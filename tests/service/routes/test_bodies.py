"""The OpenAPI pieces shared by the routes: dataset bodies, paging parameters, problems."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import redis
from fastapi.testclient import TestClient

from service.embedded import free_port
from service.routes.bodies import DATASET_BODY, MAX_OFFSET, problems
from service.schemas import DatasetInline, Problem
from tests.service.conftest import PROBLEM, assert_problem, wait_for

ROOT = Path(__file__).resolve().parents[3]

MEDIA = {"application/json", "text/csv", "application/x-npy", "application/vnd.apache.parquet"}
LISTS = ("/v1/datasets", "/v1/jobs", "/v1/jobs/dead-letters")


def test_problems_document_each_status_with_the_problem_model() -> None:
    responses = problems(404, 409)
    assert set(responses) == {404, 409}
    for entry in responses.values():
        assert entry == {"model": Problem, "description": "Problem details"}
    assert problems() == {}


def test_the_dataset_body_is_documented_on_every_route_that_takes_one(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    for path in ("/v1/datasets", "/v1/jobs/{job_id}/predict"):
        content = paths[path]["post"]["requestBody"]["content"]
        assert set(content) == MEDIA, path
        assert paths[path]["post"]["requestBody"]["required"] is True


def test_the_documented_examples_are_accepted(client: TestClient) -> None:
    content = DATASET_BODY["requestBody"]["content"]
    inline = content["application/json"]["example"]
    assert DatasetInline.model_validate(inline).name == "toy"
    created = client.post("/v1/datasets", json=inline)
    assert created.status_code == 201, created.text
    assert (created.json()["n_samples"], created.json()["n_features"]) == (2, 2)
    csv = client.post(
        "/v1/datasets",
        content=content["text/csv"]["example"],
        headers={"Content-Type": "text/csv"},
    )
    assert csv.status_code == 201, csv.text
    assert (csv.json()["n_samples"], csv.json()["n_features"]) == (2, 2)


@pytest.mark.parametrize("path", LISTS)
def test_paging_bounds_hold_on_every_list(client: TestClient, path: str) -> None:
    assert client.get(path, params={"offset": 0, "limit": 1000}).status_code == 200
    limit = assert_problem(client.get(path, params={"limit": 1001}), 422)
    assert limit["errors"][0]["field"] == "query.limit"
    offset = assert_problem(client.get(path, params={"offset": -1}), 422)
    assert offset["errors"][0]["field"] == "query.offset"


@pytest.mark.parametrize("path", LISTS)
def test_paging_parameters_are_documented(client: TestClient, path: str) -> None:
    operation = client.get("/openapi.json").json()["paths"][path]["get"]
    params = {p["name"]: p for p in operation["parameters"]}
    assert params["offset"]["schema"]["minimum"] == 0
    assert (params["limit"]["schema"]["minimum"], params["limit"]["schema"]["maximum"]) == (1, 1000)
    assert params["offset"]["description"] and params["limit"]["description"]
    assert list(operation["responses"]["422"]["content"]) == [PROBLEM]


@pytest.mark.parametrize("path", [*LISTS, "/v1/jobs/{job_id}/assignments"])
@pytest.mark.parametrize("offset", [MAX_OFFSET + 1, 314879849031288225792, 10**40])
def test_offsets_beyond_the_bound_are_a_422_not_a_500(
    client: TestClient, path: str, offset: int
) -> None:
    # GET /v1/jobs?offset=314879849031288225792 was a 500: Redis takes 64-bit offsets only.
    if "{job_id}" in path:  # a job the caller owns: an unknown one is a 404 first
        dataset = client.post("/v1/datasets", json={"data": [[0.0], [1.0]]}).json()
        job = client.post("/v1/jobs", json={"dataset_id": dataset["id"], "n_clusters": 1})
        path = path.format(job_id=job.json()["id"])
    problem = assert_problem(client.get(path, params={"offset": offset, "limit": 332}), 422)
    assert problem["errors"][0]["field"] == "query.offset"
    assert str(MAX_OFFSET) in problem["detail"]


@pytest.mark.parametrize("path", LISTS)
def test_the_largest_offset_is_an_empty_page(client: TestClient, path: str) -> None:
    page = client.get(path, params={"offset": MAX_OFFSET, "status": "failed"})
    assert page.status_code == 200, page.text
    assert page.json()["items"] == [] and page.json()["offset"] == MAX_OFFSET


def test_every_paging_parameter_is_bounded_in_the_schema(client: TestClient) -> None:
    for path, operations in client.get("/openapi.json").json()["paths"].items():
        for operation in operations.values():
            for param in operation.get("parameters", []):
                if param["name"] in ("offset", "limit"):
                    schema = param["schema"]
                    assert "minimum" in schema and "maximum" in schema, (path, param)


def test_file_bodies_are_documented_as_bytes(client: TestClient) -> None:
    # A CSV body `5` is one value: the schema types the bytes no more than the API does.
    content = client.get("/openapi.json").json()["paths"]["/v1/datasets"]["post"]["requestBody"]
    for media in ("text/csv", "application/x-npy", "application/vnd.apache.parquet"):
        schema = content["content"][media]["schema"]
        assert (schema["type"], schema["format"], schema["minLength"]) == ("string", "binary", 1)
    one = client.post("/v1/datasets", content=b"5", headers={"Content-Type": "text/csv"})
    assert one.status_code == 201 and (one.json()["n_samples"], one.json()["n_features"]) == (1, 1)
    empty = client.post("/v1/datasets", content=b"", headers={"Content-Type": "text/csv"})
    assert "body is empty" in assert_problem(empty, 422)["detail"]


def test_json_bodies_document_their_minimum_lengths(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    for path in ("/v1/datasets", "/v1/jobs/{job_id}/predict"):
        schema = paths[path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        inline = schema["oneOf"][0] if "oneOf" in schema else schema  # or a source (datasets)
        data = inline["properties"]["data"]
        assert data["minItems"] == 1 and data["items"]["minItems"] == 1, path
    for body in ({"data": []}, {"data": [[]]}):
        assert_problem(client.post("/v1/datasets", json=body), 422)


# ---- a client that goes away mid-body ----------------------------------------------------


def _serve_api(
    redis_url: str, tmp_path: Path, settings: dict[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], str, Path]:
    """`rbfkm api` as a real process (its log in a file), ``settings`` in its environment;
    its URL."""
    port = free_port()
    log = tmp_path / "api.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RBFKM_", "REDIS_URL"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    args = ["api", "--redis-url", redis_url, "--port", str(port), "--data-dir", str(tmp_path)]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "service.cli", *args],
            cwd=tmp_path,
            env={**env, "RBFKM_KEY_PREFIX": "disconnect", **(settings or {})},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base_url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        assert proc.poll() is None, log.read_text()
        try:
            return httpx.get(f"{base_url}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(up, 60, "rbfkm api")
    return proc, base_url, log


def _half_a_body(base_url: str, path: str, content_type: str, body: bytes) -> None:
    """Send the headers and half of `body` on a raw socket, then hang up."""
    host, port = base_url.removeprefix("http://").split(":")
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(head + body[: len(body) // 2])
        time.sleep(0.3)  # the server is reading the body when the client goes


def test_a_client_that_disconnects_mid_upload_is_one_log_line(
    redis_server: str, tmp_path: Path
) -> None:
    redis_url = redis_server.rsplit("/", 1)[0] + "/6"
    proc, base_url, log = _serve_api(redis_url, tmp_path)
    csv = b"1.5,2.5\n" * 200_000
    job = b'{"dataset_id": "d", "n_clusters": 2, "init": [' + b"[0.5, 1.5]," * 100_000 + b"]}"
    try:
        _half_a_body(base_url, "/v1/datasets", "text/csv", csv)
        _half_a_body(base_url, "/v1/jobs", "application/json", job)

        def logged() -> list[str]:
            return [line for line in log.read_text().splitlines() if "disconnected" in line]

        lines = wait_for(lambda: len(logged()) >= 2 and logged(), 20, "a line for each")
        # The server is still healthy and takes the next upload whole.
        with httpx.Client(base_url=base_url, timeout=30) as http:
            assert http.get("/healthz").status_code == 200
            created = http.post("/v1/datasets", content=csv, headers={"Content-Type": "text/csv"})
            assert created.status_code == 201, created.text
            assert created.json()["n_samples"] == 200_000
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        redis.Redis.from_url(redis_url).flushdb()
    text = log.read_text()
    assert "Traceback" not in text and "Exception in ASGI application" not in text, text
    assert len(lines) == 2, text
    assert "POST /v1/datasets: the client disconnected after" in lines[0]
    assert "the upload was discarded" in lines[0]
    assert "POST /v1/jobs: the client disconnected" in lines[1]
    assert list((tmp_path / "tmp").iterdir()) == []  # no half upload left behind
