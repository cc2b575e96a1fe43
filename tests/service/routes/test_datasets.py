"""`/v1/datasets` in process on a real Redis: upload in every format, read, list, delete."""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import redis
from fastapi.testclient import TestClient

from service.app import create_app
from service.settings import Settings
from tests.service.conftest import assert_problem, blobs, npy_bytes, upload

X = blobs(30, 2, 3)
SPEC_DATASET_FIELDS = {"id", "name", "n_samples", "n_features", "dtype", "sha256", "size_bytes"}
SPEC_DATASET_FIELDS.add("created_at")


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
