"""Bodies of uploads: arrays, frames, tables and files (no service needed)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from rbfkm_client.bodies import body_of, is_source, is_url, media_of, source_body
from rbfkm_client.media import CSV, NPY, PARQUET


def test_an_array_travels_as_npy_keeping_float32() -> None:
    body = body_of(np.ones((3, 2), dtype=np.float32))
    assert body.content_type == NPY
    assert np.load(io.BytesIO(body.content)).dtype == np.float32
    assert np.load(io.BytesIO(body_of([[1, 2], [3, 4]]).content)).dtype == np.float64


def test_a_frame_as_npy_and_a_table_as_parquet() -> None:
    frame = pd.DataFrame({"a": [1.0, 2.0], "b": [3, 4]})
    assert np.array_equal(np.load(io.BytesIO(body_of(frame).content)), [[1, 3], [2, 4]])
    table = body_of(pa.table({"a": [1.0, 2.0]}), name="t")
    assert (table.content_type, table.name) == (PARQUET, "t")
    assert pq.read_table(io.BytesIO(table.content))["a"].to_pylist() == [1.0, 2.0]


def test_non_numeric_data_is_refused_before_it_travels() -> None:
    with pytest.raises(TypeError, match="numeric"):
        body_of(pd.DataFrame({"a": ["x", "y"]}))


def test_files_by_extension(tmp_path: Path) -> None:
    path = tmp_path / "points.CSV"
    path.write_text("1,2\n")
    body = body_of(path)
    assert (body.content, body.content_type, body.name) == (path, CSV, "points.CSV")
    with pytest.raises(FileNotFoundError):
        body_of(tmp_path / "missing.npy")
    assert media_of("http://host/x.parquet?sig=1") == PARQUET
    assert media_of("http://host/data", "application/x-npy; q=1") == NPY
    with pytest.raises(ValueError, match="cannot tell the format"):
        media_of("notes.txt")


def test_urls() -> None:
    assert is_url("https://example.org/x.npy") and not is_url("x.npy")
    assert not is_url("5b0c6f0a7c1e4a8e9d3f2b1a0c9d8e7f")
    for url in ("s3://bucket/x.parquet", "GS://bucket/x.csv", "https://example.org/x.npy"):
        assert is_source(url), url
    assert not is_source("x.npy") and not is_source("ftp://example.org/x.npy")
    assert source_body("s3://b/k.npy") == {"source": "s3://b/k.npy"}
    assert source_body("s3://b/k.npy", "k") == {"source": "s3://b/k.npy", "name": "k"}
