"""`/v1/datasets` in process on a real Redis: upload in every format, read, list, delete."""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import redis
from fastapi.testclient import TestClient

from service.app import create_app
from service.settings import Settings
from tests.service.conftest import assert_problem, blobs, npy_bytes, upload

X = blobs(30, 2, 3)
SPEC_DATASET_FIELDS = {"id", "name", "n_samples", "n_features", "dtype", "sha256", "size_bytes"}
SPEC_DATASET_FIELDS |= {"created_at", "stored_bytes", "tenant", "weight_column", "source"}


def test_upload_every_format(client: TestClient) -> None:
    json_body = {"data": X.tolist(), "name": "js"}
    csv_header = "a,b\n" + "\n".join(f"{a},{b}" for a, b in X) + "\n"
    pq_buf = io.BytesIO()
    pq.write_table(pa.table({"a": X[:, 0], "b": X[:, 1]}), pq_buf)
    bodies = [
        ("application/json", json.dumps(json_body).encode(), "js"),
        ("text/csv", csv_header.encode(), "csv"),
        ("text/csv; charset=utf-8", csv_header.split("\n", 1)[1].encode(), "csv2"),
        ("application/x-npy", npy_bytes(X), "npy"),
        ("application/vnd.apache.parquet", pq_buf.getvalue(), "pq"),
    ]
    for content_type, data, name in bodies:
        headers = {"Content-Type": content_type}
        response = client.post("/v1/datasets", content=data, headers=headers, params={"name": name})
        assert response.status_code == 201, (content_type, response.text)
        meta = response.json()
        assert response.headers["location"] == f"/v1/datasets/{meta['id']}"
        assert (meta["n_samples"], meta["n_features"], meta["name"]) == (30, 2, name)
        assert set(meta) == SPEC_DATASET_FIELDS
        assert meta["size_bytes"] == len(data)


def test_same_bytes_return_the_stored_dataset(client: TestClient) -> None:
    headers = {"Content-Type": "application/x-npy"}
    first = client.post("/v1/datasets", content=npy_bytes(X), headers=headers)
    again = client.post("/v1/datasets", content=npy_bytes(X), headers=headers)
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json() == again.json()
    assert again.headers["location"] == first.headers["location"]


def test_same_bytes_under_another_name_are_another_dataset(client: TestClient) -> None:
    headers = {"Content-Type": "application/x-npy"}
    first = client.post("/v1/datasets", content=npy_bytes(X), headers=headers, params={"name": "a"})
    other = client.post("/v1/datasets", content=npy_bytes(X), headers=headers, params={"name": "b"})
    assert (first.status_code, other.status_code) == (201, 201)
    assert first.json()["id"] != other.json()["id"]
    assert first.json()["sha256"] == other.json()["sha256"]


def test_dataset_get_list_delete(client: TestClient) -> None:
    ids = [upload(client, X + i)["id"] for i in range(3)]
    assert client.get(f"/v1/datasets/{ids[0]}").json()["id"] == ids[0]
    page = client.get("/v1/datasets", params={"limit": 2}).json()
    assert page["total"] == 3 and [d["id"] for d in page["items"]] == ids[::-1][:2]
    page = client.get("/v1/datasets", params={"offset": 2, "limit": 2}).json()
    assert [d["id"] for d in page["items"]] == ids[:1]
    assert (page["offset"], page["limit"]) == (2, 2)
    assert client.delete(f"/v1/datasets/{ids[0]}").status_code == 204
    assert_problem(client.get(f"/v1/datasets/{ids[0]}"), 404)
    assert_problem(client.delete(f"/v1/datasets/{ids[0]}"), 404)
    assert_problem(client.get("/v1/datasets", params={"limit": 0}), 422)


def test_an_unknown_dataset_is_a_404_naming_it(client: TestClient) -> None:
    body = assert_problem(client.get("/v1/datasets/nope"), 404)
    assert "'nope'" in body["detail"]
    assert body["type"].endswith("dataset-not-found")
    assert body["errors"] == [{"field": "path.dataset_id", "message": "unknown dataset"}]


def test_a_name_over_200_characters_is_a_422(client: TestClient) -> None:
    response = client.post(
        "/v1/datasets",
        content=npy_bytes(X),
        headers={"Content-Type": "application/x-npy"},
        params={"name": "n" * 201},
    )
    assert assert_problem(response, 422)["errors"][0]["field"] == "query.name"


def test_upload_errors_are_problems(client: TestClient, settings: Settings) -> None:
    body = assert_problem(
        client.post("/v1/datasets", content=b"x", headers={"Content-Type": "text/plain"}), 415
    )
    assert "text/plain" in body["detail"]
    body = assert_problem(
        client.post(
            "/v1/datasets",
            content=json.dumps({"data": [[1, 2], [3]]}),
            headers={"Content-Type": "application/json"},
        ),
        422,
    )
    assert body["errors"][0]["field"] == "body.data[1]"
    body = assert_problem(
        client.post("/v1/datasets", content=b"1,2\n3,nan\n", headers={"Content-Type": "text/csv"}),
        422,
    )
    assert "row 1, column 1" in body["detail"]


def test_upload_over_the_limit_is_413(redis_client: redis.Redis, settings: Settings) -> None:
    small = settings.model_copy(update={"max_upload_bytes": 100})
    with TestClient(create_app(small)) as client:
        body = assert_problem(
            client.post(
                "/v1/datasets", content=npy_bytes(X), headers={"Content-Type": "application/x-npy"}
            ),
            413,
        )
        assert "100 bytes" in body["detail"]

        def chunked():  # no Content-Length: the limit holds while streaming
            yield b"1,2\n" * 20
            yield b"3,4\n" * 20

        assert_problem(
            client.post("/v1/datasets", content=chunked(), headers={"Content-Type": "text/csv"}),
            413,
        )
    assert list((settings.data_dir / "tmp").iterdir()) == []


def _csv(client: TestClient, body: bytes, content_type: str = "text/csv", **params: str) -> Any:
    return client.post(
        "/v1/datasets", content=body, headers={"Content-Type": content_type}, params=params
    )


def test_a_first_row_with_one_number_is_data_not_a_header(client: TestClient) -> None:
    # It was taken as a header: 201 with one row.
    body = assert_problem(_csv(client, b"0x10,2\n3,4\n"), 422)
    assert body["detail"].startswith("row 0, column 0 is '0x10'; values must be decimal numbers")
    assert body["errors"] == [{"field": "body.data[0][0]", "message": body["detail"]}]


@pytest.mark.parametrize(
    ("body", "params", "content_type", "rows"),
    [
        (b"a,b\n1,2\n3,4\n", {}, "text/csv", 2),  # every field a word: a header
        (b"1,2\n3,4\n", {}, "text/csv", 2),
        (b"1,2\n3,4\n", {"header": "true"}, "text/csv", 1),
        (b"0x10,2\n3,4\n", {"header": "true"}, "text/csv", 1),
        (b"1,2\n3,4\n", {}, "text/csv; header=present", 1),
        (b"1,2\n3,4\n", {"header": "false"}, "text/csv; header=present", 2),
        (b"1,2\n3,4\n", {"header": "false"}, "text/csv", 2),
    ],
)
def test_the_header_row_is_detected_or_said(
    client: TestClient, body: bytes, params: dict, content_type: str, rows: int
) -> None:
    response = _csv(client, body, content_type, **params, name=f"{params}{content_type}")
    assert response.status_code == 201, response.text
    assert response.json()["n_samples"] == rows


def test_header_false_reports_the_header_as_data(client: TestClient) -> None:
    body = assert_problem(_csv(client, b"x,y\n1,2\n", header="false"), 422)
    assert body["detail"].startswith("row 0, column 0 is 'x'")
    assert "?header=true" in body["detail"]
    assert_problem(_csv(client, b"1,2\n", header="maybe"), 422)


def test_the_header_parameter_is_documented(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    for path in ("/v1/datasets", "/v1/jobs/{job_id}/predict"):
        params = {p["name"]: p for p in paths[path]["post"]["parameters"]}
        assert {"type": "boolean"} in params["header"]["schema"]["anyOf"], path
        assert "header" in params["header"]["description"]


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (b'{"data": [[' + b"1" + b"0" * 5000 + b"]]}", "row 0, column 0 is '1000"),  # 10**5000
        (b'{"data": [[1, 2], [3, 1e999]]}', "row 1, column 1 is '1e999'"),
        (b'{"data": [[1, 2]', "the body is not valid JSON: expecting ',' delimiter at line 0"),
    ],
)
def test_json_errors_are_the_projects_own(client: TestClient, body: bytes, needle: str) -> None:
    response = client.post(
        "/v1/datasets", content=body, headers={"Content-Type": "application/json"}
    )
    detail = assert_problem(response, 422)["detail"]
    assert needle in detail
    assert "set_int_max_str_digits" not in detail and "Expecting" not in detail


@pytest.mark.parametrize(
    ("body", "content_type", "needle"),
    [
        (b"1,2\n3\n", "text/csv", "row 1 has 1 values but row 0 has 2"),
        (b"1,2\n3,x\n", "text/csv", "row 1, column 1 is 'x'"),
        (npy_bytes(X)[:-8], "application/x-npy", "the upload is truncated"),
        (b"PAR1 nope", "application/vnd.apache.parquet", "not a Parquet file"),
    ],
)
def test_file_errors_count_from_zero_in_our_words(
    client: TestClient, body: bytes, content_type: str, needle: str
) -> None:
    detail = assert_problem(_csv(client, body, content_type), 422)["detail"]
    assert needle in detail
    for hint in ("usecols", "at row", "EOF", "magic bytes not found"):
        assert hint not in detail, detail


def test_a_weight_column_is_kept_apart(client: TestClient, settings) -> None:
    weights = np.arange(1, 31, dtype=np.float64)
    csv = "a,w,b\n" + "\n".join(f"{a},{w},{b}" for (a, b), w in zip(X, weights, strict=True))
    headers = {"Content-Type": "text/csv"}
    response = client.post(
        "/v1/datasets", content=csv.encode(), headers=headers, params={"weight_column": "w"}
    )
    assert response.status_code == 201, response.text
    meta = response.json()
    assert (meta["n_features"], meta["weight_column"]) == (2, "w")
    from service.datasets import dataset_weights, load_dataset

    np.testing.assert_array_equal(dataset_weights(settings.data_dir, meta["id"]), weights)
    np.testing.assert_allclose(load_dataset(settings.data_dir, meta["id"]), X)
    plain = client.post("/v1/datasets", content=csv.encode(), headers=headers)
    assert plain.json()["id"] != meta["id"] and plain.json()["n_features"] == 3


def test_a_weight_column_of_parquet(client: TestClient) -> None:
    buf = io.BytesIO()
    pq.write_table(pa.table({"a": X[:, 0], "b": X[:, 1], "w": np.ones(30)}), buf)
    headers = {"Content-Type": "application/vnd.apache.parquet"}
    response = client.post(
        "/v1/datasets", content=buf.getvalue(), headers=headers, params={"weight_column": "w"}
    )
    assert response.status_code == 201, response.text
    assert response.json()["n_features"] == 2


def test_a_weight_column_by_index_of_an_npy_array(client: TestClient, settings) -> None:
    from service.datasets import dataset_weights, load_dataset

    weights = np.arange(1.0, 31.0)
    buf = io.BytesIO()
    np.save(buf, np.column_stack([X[:, 0], weights, X[:, 1]]))
    response = client.post(
        "/v1/datasets",
        content=buf.getvalue(),
        headers={"Content-Type": "application/x-npy"},
        params={"weight_column": "1"},
    )
    assert response.status_code == 201, response.text
    meta = response.json()
    assert (meta["n_features"], meta["weight_column"]) == (2, "1")
    np.testing.assert_array_equal(dataset_weights(settings.data_dir, meta["id"]), weights)
    np.testing.assert_array_equal(load_dataset(settings.data_dir, meta["id"]), X)


@pytest.mark.parametrize(
    ("body", "content_type", "column", "says"),
    [
        (b"a,b\n1,2\n3,4\n", "text/csv", "w", "names no column"),
        (b"1,2\n3,4\n", "text/csv", "w", "0-based index, 0 to 1"),
        (b"1,2\n3,4\n", "text/csv", "2", "0-based index, 0 to 1"),
        (b"1,2\n3,4\n", "text/csv", "-1", "0-based index"),
        (b'{"data": [[1], [2]]}', "application/json", "0", "only column"),
        (b"a,w\n1,-2\n3,4\n", "text/csv", "w", "negative"),
        (b"a,w\n1,0\n3,0\n", "text/csv", "w", "every weight is 0"),
    ],
)
def test_bad_weight_columns_are_422(client, body, content_type, column, says) -> None:
    response = client.post(
        "/v1/datasets",
        content=body,
        headers={"Content-Type": content_type},
        params={"weight_column": column},
    )
    assert response.status_code == 422, response.text
    assert says in response.json()["detail"]
