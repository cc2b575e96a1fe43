"""The one mapping from errors to HTTP: every domain error has a status, a type and fields."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service import errors
from service.app import create_app
from service.embedded import EmbeddedRedis, free_port
from service.errors import (
    BodyTooLarge,
    DatasetNotFound,
    IdempotencyKeyContended,
    IdempotencyKeyInProgress,
    IdempotencyKeyReused,
    InvalidDataset,
    InvalidIdempotencyKey,
    NotAcceptable,
    ResultNotFound,
    ServiceError,
    StorageQuotaExceeded,
    TooManyActiveJobs,
    UnsupportedMediaType,
    UploadInterrupted,
)
from service.problems import RETRY_AFTER, RETRY_AFTER_S, problem_of
from tests.service.conftest import PROBLEM, make_settings

DOMAIN_ERRORS = [
    cls
    for _, cls in inspect.getmembers(errors, inspect.isclass)
    if issubclass(cls, ServiceError) and cls is not ServiceError
]


@pytest.mark.parametrize("cls", DOMAIN_ERRORS, ids=lambda cls: cls.__name__)
def test_every_domain_error_has_an_http_form(cls: type[ServiceError]) -> None:
    if cls in (BodyTooLarge, UploadInterrupted):
        exc: ServiceError = cls(1)
    elif cls in (DatasetNotFound, ResultNotFound):
        exc = cls("some-id")
    elif cls is TooManyActiveJobs:
        exc = cls("acme", 2)
    elif cls is StorageQuotaExceeded:
        exc = cls("acme", 10, 5, 12)
    elif cls is NotAcceptable:
        exc = cls("text/csv", ["application/json"])
    else:
        exc = cls("what went wrong")
    assert 400 <= problem_of(exc).status < 500


@pytest.mark.parametrize(
    ("exc", "status", "kind", "errors"),
    [
        (InvalidDataset("row 3 is short", "body.data[3]"), 422, "invalid-dataset",
         [("body.data[3]", "row 3 is short")]),
        (UnsupportedMediaType("send CSV"), 415, "unsupported-media-type",
         [("header.content-type", "unsupported media type")]),
        (BodyTooLarge(10), 413, "payload-too-large", [("body", "larger than 10 bytes")]),
        (ResultNotFound("j"), 404, "result-not-found", [("path.job_id", "no stored result")]),
        (DatasetNotFound("d"), 404, "dataset-not-found", [("path.dataset_id", "unknown dataset")]),
        (InvalidIdempotencyKey("1 to 255", field="header.idempotency-key", message="length"),
         422, "invalid-idempotency-key", [("header.idempotency-key", "length")]),
        (UploadInterrupted(10), 499, "client-closed-request", [("body", "incomplete body")]),
        (IdempotencyKeyReused("other body", field="f", message="m"), 422,
         "idempotency-key-reused", [("f", "m")]),
        (IdempotencyKeyInProgress("wait", field="f", message="m"), 409,
         "idempotency-key-in-progress", [("f", "m")]),
        (IdempotencyKeyContended("retry"), 409, None, []),
    ],
)  # fmt: skip
def test_the_mapping(exc: ServiceError, status: int, kind: str | None, errors: list) -> None:
    problem = problem_of(exc)
    assert (problem.status, problem.kind) == (status, kind)
    assert problem.errors == [{"field": f, "message": m} for f, m in errors]
    retry = isinstance(exc, IdempotencyKeyInProgress | IdempotencyKeyContended)
    assert problem.headers == (RETRY_AFTER if retry else {})


def test_result_not_found_says_why() -> None:
    detail = problem_of(ResultNotFound("j1")).detail
    assert detail == "no result for job 'j1'; the result files were deleted or have expired"


def test_an_unmapped_domain_error_is_a_500_not_a_leak() -> None:
    class Unmapped(ServiceError):
        pass

    problem = problem_of(Unmapped("secret internals"))
    assert problem.status == 500 and "secret" not in problem.detail


def test_one_retry_after_everywhere(tmp_path: Path) -> None:
    assert RETRY_AFTER == {"Retry-After": str(RETRY_AFTER_S)} and RETRY_AFTER_S == 1
    dead = make_settings(f"redis://127.0.0.1:{free_port()}/0", tmp_path)
    with TestClient(create_app(dead), raise_server_exceptions=False) as client:
        response = client.get("/v1/jobs")
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "1"
    assert response.json()["type"] == "urn:rbfkm:problem:redis-unavailable"


def test_a_lost_redis_is_logged_once_and_its_return_too(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The API used to say nothing while Redis was down: one line when it is lost (not one
    per request), one when a request goes through again."""
    server = EmbeddedRedis(tmp_path / "r", port=free_port())
    settings = make_settings(server.url, tmp_path)
    try:
        with TestClient(create_app(settings), raise_server_exceptions=False) as client:
            for _ in range(3):
                assert client.get("/v1/jobs").status_code == 503
            assert caplog.text.count("redis lost (GET /v1/jobs)") == 1, caplog.text
            assert "redis back" not in caplog.text
            server.start()
            assert client.get("/healthz").status_code == 200  # needs no Redis: says nothing
            assert "redis back" not in caplog.text
            assert client.get("/v1/jobs").status_code == 200
            assert caplog.text.count("redis back") == 1, caplog.text
    finally:
        server.stop()


def test_error_responses_with_a_body_of_their_own_keep_it(client: TestClient) -> None:
    # /readyz's 503 is a Health body, not a problem: the document says so.
    paths = client.get("/openapi.json").json()["paths"]
    content = paths["/readyz"]["get"]["responses"]["503"]["content"]
    assert content == {"application/json": {"schema": {"$ref": "#/components/schemas/Health"}}}
    not_found = paths["/v1/jobs/{job_id}"]["get"]["responses"]["404"]["content"]
    assert list(not_found) == [PROBLEM]


def test_a_job_id_is_not_the_dead_letter_list(client: TestClient) -> None:
    # DELETE /v1/jobs/{job_id} takes /v1/jobs/dead-letters, but that path is the list's.
    response = client.options("/v1/jobs/dead-letters")
    assert (response.status_code, response.headers["allow"]) == (204, "GET, OPTIONS")
    assert client.options("/openapi.json").headers["allow"] == "GET, HEAD, OPTIONS"
