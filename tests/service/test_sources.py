"""Datasets by reference: `{"source": URL}` read from a real HTTP server and a real
S3-compatible server (moto's server mode), both on loopback, through the API."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.settings import Settings
from service.sources import REFERENCE_MAX_BYTES, source_media
from tests.service.conftest import (
    FileServer,
    assert_problem,
    blobs,
    npy_bytes,
    s3_client,
    s3_options,
)

DATA = blobs(30, 2, 3)


def parquet_bytes(array: np.ndarray) -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.table({f"x{j}": array[:, j] for j in range(array.shape[1])}), sink)
    return sink.getvalue()


def csv_bytes(array: np.ndarray) -> bytes:
    return ("a,b\n" + "\n".join(f"{x},{y}" for x, y in array)).encode()


FILES = {
    "/points.npy": npy_bytes(DATA),
    "/points.parquet": parquet_bytes(DATA),
    "/points.csv": csv_bytes(DATA),
    "/points.json": json.dumps({"data": DATA.tolist()}).encode(),
    "/points.bin": npy_bytes(DATA),
    "/empty.npy": b"",
}


@pytest.fixture(scope="module")
def files() -> Iterator[FileServer]:
    with FileServer(FILES, redirects={"/moved.npy": "/points.npy"}) as server:
        yield server


def app_client(settings: Settings, **update: Any) -> TestClient:
    return TestClient(create_app(settings.model_copy(update=update)))


def post_source(client: TestClient, source: str, **fields: Any) -> Any:
    return client.post("/v1/datasets", json={"source": source, **fields})


@pytest.mark.parametrize("path", ["/points.npy", "/points.parquet", "/points.csv", "/points.json"])
def test_a_dataset_is_read_from_an_allowed_http_source(
    settings: Settings, files: FileServer, path: str
) -> None:
    with app_client(settings, url_allowlist=["127.0.0.1"]) as client:
        response = post_source(client, files.url + path)
        assert response.status_code == 201, response.text
        meta = response.json()
        assert (meta["n_samples"], meta["n_features"]) == (30, 2)
        assert meta["source"] == files.url + path
        assert meta["name"] == path.lstrip("/")
        stored = np.load(settings.data_dir / "datasets" / f"{meta['id']}.npy")
        np.testing.assert_allclose(stored, DATA, rtol=1e-6)
        again = post_source(client, files.url + path)  # the same bytes again: the same one
        assert again.status_code == 200 and again.json()["id"] == meta["id"]


def test_redirects_are_followed_and_checked(settings: Settings, files: FileServer) -> None:
    with app_client(settings, url_allowlist=["127.0.0.1"]) as client:
        response = post_source(client, files.url + "/moved.npy", name="moved")
        assert response.status_code == 201, response.text
        assert response.json()["name"] == "moved"


def test_a_loopback_source_is_refused_unless_allowed(settings: Settings, files: FileServer) -> None:
    with app_client(settings) as client:
        problem = assert_problem(post_source(client, files.url + "/points.npy"), 422)
    assert problem["type"].endswith("unsafe-url")
    assert problem["errors"] == [{"field": "body.source", "message": "loopback address"}]
    assert "RBFKM_URL_ALLOWLIST" in problem["detail"]


@pytest.mark.parametrize(
    ("path", "message", "hint"),
    [
        ("/missing.npy", "not found", "404"),
        ("/points.bin", "unknown format", "extensions"),
        ("/empty.npy", "", "is empty"),
    ],
)
def test_an_unreadable_http_source_is_a_422_that_says_why(
    settings: Settings, files: FileServer, path: str, message: str, hint: str
) -> None:
    with app_client(settings, url_allowlist=["127.0.0.1"]) as client:
        problem = assert_problem(post_source(client, files.url + path), 422)
    assert hint in problem["detail"]
    if message:
        assert problem["errors"] == [{"field": "body.source", "message": message}]


def test_an_unreachable_source_is_a_422(settings: Settings) -> None:
    from service.embedded import free_port

    closed = f"http://127.0.0.1:{free_port()}/points.npy"
    with app_client(settings, url_allowlist=["127.0.0.1"]) as client:
        problem = assert_problem(post_source(client, closed), 422)
    assert problem["errors"][0]["message"] == "unreachable"


def test_a_source_over_the_upload_limit_is_a_413(settings: Settings, files: FileServer) -> None:
    with app_client(settings, url_allowlist=["127.0.0.1"], max_upload_bytes=100) as client:
        problem = assert_problem(post_source(client, files.url + "/points.npy"), 413)
    assert "RBFKM_MAX_UPLOAD_BYTES" in problem["detail"]
    assert not list((settings.data_dir / "tmp").glob("*.upload"))  # nothing left behind


def test_bad_reference_bodies_are_422s(client: TestClient) -> None:
    cases = [
        ({"source": "ftp://example.org/x.npy"}, "body.source"),
        ({"source": 5}, "body.source"),
        ({"source": "https://example.org/x.npy", "data": [[1.0]]}, "body.data"),
    ]
    for body, field in cases:
        problem = assert_problem(client.post("/v1/datasets", json=body), 422)
        assert problem["errors"][0]["field"] == field, problem


def test_a_large_json_body_with_a_source_field_is_data(client: TestClient) -> None:
    rows = [[0.5] * 10] * (REFERENCE_MAX_BYTES // 40)
    problem = assert_problem(
        client.post("/v1/datasets", json={"source": "https://x/y.npy", "data": rows}), 422
    )
    assert "unknown fields ['source']" in problem["detail"]


def test_source_media_from_extension_then_content_type() -> None:
    assert source_media("s3://b/k.PARQUET", None, None) == "application/vnd.apache.parquet"
    assert source_media("https://h/x?y=1", "text/csv", True) == "text/csv; header=present"
    assert source_media("https://h/points.npy", "text/html", None) == "application/x-npy"


# --- object store ---------------------------------------------------------------------


@pytest.fixture
def bucket(s3_endpoint: str) -> str:
    s3 = s3_client(s3_endpoint)
    s3.create_bucket(Bucket="sources")
    s3.put_object(Bucket="sources", Key="in/points.parquet", Body=parquet_bytes(DATA))
    s3.put_object(Bucket="sources", Key="in/points.csv", Body=csv_bytes(DATA))
    return "sources"


def test_a_dataset_is_read_from_the_object_store(
    settings: Settings, s3_endpoint: str, bucket: str
) -> None:
    options = s3_options(s3_endpoint)
    with app_client(settings, url_allowlist=["127.0.0.1"], storage_options=options) as client:
        for key in ("in/points.parquet", "in/points.csv"):
            response = post_source(client, f"s3://{bucket}/{key}")
            assert response.status_code == 201, response.text
            meta = response.json()
            assert (meta["n_samples"], meta["n_features"], meta["source"]) == (
                30,
                2,
                f"s3://{bucket}/{key}",
            )
        missing = assert_problem(post_source(client, f"s3://{bucket}/in/nothing.npy"), 422)
        assert missing["errors"] == [{"field": "body.source", "message": "not found"}]
        no_bucket = assert_problem(post_source(client, "s3://no-such-bucket/x.npy"), 422)
        assert no_bucket["errors"][0]["message"] == "not found"
        prefix = assert_problem(post_source(client, f"s3://{bucket}/in"), 422)
        assert prefix["errors"][0]["message"] == "not a file"


def test_the_object_store_needs_the_tenants_options_and_an_allowed_endpoint(
    settings: Settings, s3_endpoint: str, bucket: str
) -> None:
    source = f"s3://{bucket}/in/points.parquet"
    with app_client(settings, url_allowlist=["127.0.0.1"]) as client:
        problem = assert_problem(post_source(client, source), 422)
    assert problem["type"].endswith("not-configured")
    assert "RBFKM_STORAGE_OPTIONS" in problem["detail"]
    with app_client(settings, storage_options=s3_options(s3_endpoint)) as client:
        problem = assert_problem(post_source(client, source), 422)
    assert problem["errors"] == [{"field": "body.source", "message": "loopback address"}]
    with app_client(
        settings, url_allowlist=["127.0.0.1"], storage_options=s3_options(s3_endpoint)
    ) as client:
        for url in (f"s3://k:s@{bucket}/x.npy", f"simplecache::s3://{bucket}/x.npy"):
            problem = assert_problem(post_source(client, url), 422)
            assert problem["errors"][0]["field"] == "body.source"


def test_a_scheme_without_its_package_says_which_extra(settings: Settings) -> None:
    pytest.importorskip("fsspec")
    try:
        import gcsfs  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("gcsfs is installed here")
    options = {"*": {"gs": {}}}
    with app_client(settings, storage_options=options) as client:
        problem = assert_problem(post_source(client, "gs://bucket/points.npy"), 422)
    assert "pip install 'rbfkm[gcs]'" in problem["detail"]
    assert problem["errors"] == [{"field": "body.source", "message": "gcsfs is not installed"}]
