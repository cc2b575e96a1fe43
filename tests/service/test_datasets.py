"""Dataset parsing (every format, every rejection) and the store against a real Redis."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import redis

from service.datasets import (
    CSV,
    JSON,
    NPY,
    PARQUET,
    DatasetStore,
    Upload,
    load_dataset,
    media_type,
    parse,
    spool,
)
from service.problems import ProblemError

X = np.array([[0.0, 1.5, -2.0], [3.25, 4.0, 5.0]])


def write(tmp_path: Path, data: bytes, name: str = "body") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


def parquet_bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def rejected(path: Path, media: str, status: int = 422) -> ProblemError:
    with pytest.raises(ProblemError) as info:
        parse(path, media)
    assert info.value.status == status
    assert info.value.errors, "a problem lists the offending field"
    return info.value


# ---- media types -------------------------------------------------------------------------


def test_media_type_ignores_parameters_and_case() -> None:
    assert media_type("Application/JSON; charset=utf-8") == JSON
    assert media_type("text/csv") == CSV
    assert media_type("application/x-parquet") == PARQUET


@pytest.mark.parametrize("value", [None, "", "text/plain", "application/octet-stream"])
def test_unsupported_media_type_is_415(value: str | None) -> None:
    with pytest.raises(ProblemError) as info:
        media_type(value)
    assert info.value.status == 415


# ---- JSON --------------------------------------------------------------------------------


def test_json_rows_and_name(tmp_path: Path) -> None:
    path = write(tmp_path, json.dumps({"data": X.tolist(), "name": "toy"}).encode())
    parsed = parse(path, JSON)
    np.testing.assert_array_equal(parsed.array, X)
    assert parsed.array.dtype == np.float64 and parsed.array.flags.c_contiguous
    assert parsed.name == "toy"


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (b"{not json", "not valid JSON"),
        (b"[[1, 2]]", "must be an object"),
        (b'{"data": []}', "non-empty"),
        (b'{"data": [[1, 2], [3]]}', "row 1 has 1 values"),
        (b'{"data": [[1, "2"]]}', "row 0, column 1"),
        (b'{"data": [[1, null]]}', "row 0, column 1"),
        (b'{"data": [[1, true]]}', "row 0, column 1"),
        (b'{"data": [1, 2]}', "row 0 is not a list"),
        (b'{"data": [[1, NaN]]}', "row 0, column 1"),
        (b'{"data": [[1], [Infinity]]}', "row 1, column 0"),
        (b'{"data": [[]]}', "at least 1 row and 1 column"),
        (b'{"data": [[1]], "extra": 1}', "unknown fields"),
        (b'{"data": [[1]], "name": 5}', "name must be a string"),
        (b"[" * 100_000 + b"]" * 100_000, "not valid JSON"),
        (b'{"data": [[1e999999]]}', "row 0, column 0"),
        (b'{"data": [[' + b"9" * 400 + b"]]}", "too large"),
        (b"\xff\xfe{}", "not valid JSON"),
    ],
)
def test_json_rejections_say_where(tmp_path: Path, body: bytes, needle: str) -> None:
    assert needle in rejected(write(tmp_path, body), JSON).detail


# ---- CSV ---------------------------------------------------------------------------------


def test_csv_without_header(tmp_path: Path) -> None:
    path = write(tmp_path, b"0,1.5,-2\n3.25,4,5\n")
    np.testing.assert_array_equal(parse(path, CSV).array, X)


def test_csv_with_header_and_crlf(tmp_path: Path) -> None:
    path = write(tmp_path, b"\xef\xbb\xbfa,b,c\r\n0,1.5,-2\r\n3.25,4,5\r\n")
    np.testing.assert_array_equal(parse(path, CSV).array, X)


def test_csv_single_column(tmp_path: Path) -> None:
    assert parse(write(tmp_path, b"x\n1\n2\n3\n"), CSV).array.shape == (3, 1)


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (b"1,2\n3\n", "not numeric"),
        (b"1,2\n3,abc\n", "not numeric"),
        (b"a,b\n", "no data rows"),
        (b"1,2\nnan,4\n", "row 1, column 0"),
        (b"1,2\n3,inf\n", "row 1, column 1"),
        (b"1,,2\n3,4,5\n", "not numeric"),
        (b"\xff\xfe1,2\n", "not UTF-8"),
        (b"\n\n", "at least 1 row"),
    ],
)
def test_csv_rejections(tmp_path: Path, body: bytes, needle: str) -> None:
    assert needle in rejected(write(tmp_path, body), CSV).detail


# ---- npy ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_npy_in_final_format_is_kept_in_place(tmp_path: Path, dtype: type) -> None:
    parsed = parse(write(tmp_path, npy_bytes(X.astype(dtype))), NPY)
    assert parsed.in_place and parsed.array.dtype == dtype
    np.testing.assert_array_equal(parsed.array, X.astype(dtype))


@pytest.mark.parametrize(
    ("array", "dtype"),
    [
        (np.asfortranarray(X), np.float64),
        (X.astype(">f8"), np.float64),
        (X.astype(np.float16), np.float32),
        (np.arange(6, dtype=np.int32).reshape(2, 3), np.float64),
        (np.arange(6, dtype=np.uint8).reshape(3, 2), np.float64),
    ],
)
def test_npy_is_converted(tmp_path: Path, array: np.ndarray, dtype: type) -> None:
    parsed = parse(write(tmp_path, npy_bytes(array)), NPY)
    assert not parsed.in_place
    assert parsed.array.dtype == dtype and parsed.array.flags.c_contiguous
    np.testing.assert_allclose(parsed.array, array.astype(dtype))


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (b"garbage", "not a .npy file (it does not start with the .npy magic"),
        (npy_bytes(X)[:20], "not a readable .npy"),
        (npy_bytes(np.arange(3.0)), "2-D"),
        (npy_bytes(np.array([["a", "b"]])), "numeric"),
        (npy_bytes(np.zeros((0, 3))), "at least 1 row"),
        (npy_bytes(np.array([[1.0, 2.0], [3.0, np.inf]])), "row 1, column 1"),
        (npy_bytes(np.array([[1 + 2j]])), "numeric"),
    ],
)
def test_npy_rejections(tmp_path: Path, data: bytes, needle: str) -> None:
    assert needle in rejected(write(tmp_path, data), NPY).detail


def test_npy_garbage_does_not_suggest_pickles(tmp_path: Path) -> None:
    assert "pickle" not in rejected(write(tmp_path, b"garbage"), NPY).detail


def test_non_finite_values_read_as_numbers(tmp_path: Path) -> None:
    detail = rejected(write(tmp_path, npy_bytes(np.array([[1.0, -np.inf]]))), NPY).detail
    assert "column 1 is -inf;" in detail


def test_values_beyond_float32_are_refused(tmp_path: Path) -> None:
    # Finite in float64, not in the workers' float32: refused with where and why.
    detail = rejected(write(tmp_path, b'{"data": [[1, 2], [3, -1e300]]}'), JSON).detail
    assert "row 1, column 1 is -1e+300" in detail and "float32" in detail
    big = np.array([[1e39, 0.0]])
    assert "row 0, column 0" in rejected(write(tmp_path, npy_bytes(big)), NPY).detail
    largest = np.array([[np.finfo(np.float32).max, 1e20]])
    assert parse(write(tmp_path, npy_bytes(largest)), NPY).array.shape == (1, 2)


def test_npy_object_arrays_are_refused_not_unpickled(tmp_path: Path) -> None:
    buf = io.BytesIO()
    np.save(buf, np.array([[1, None]], dtype=object), allow_pickle=True)
    rejected(write(tmp_path, buf.getvalue()), NPY)


# ---- Parquet -----------------------------------------------------------------------------


def test_parquet_numeric_columns(tmp_path: Path) -> None:
    table = pa.table({"a": X[:, 0], "b": X[:, 1].astype(np.float32), "c": [-2, 5]})
    parsed = parse(write(tmp_path, parquet_bytes(table)), PARQUET)
    assert parsed.array.dtype == np.float64
    np.testing.assert_array_equal(parsed.array, X)


def test_parquet_all_float32_stays_float32(tmp_path: Path) -> None:
    table = pa.table({"a": X[:, 0].astype(np.float32), "b": X[:, 1].astype(np.float32)})
    assert parse(write(tmp_path, parquet_bytes(table)), PARQUET).array.dtype == np.float32


@pytest.mark.parametrize(
    ("table", "needle"),
    [
        (pa.table({"a": [1.0, 2.0], "s": ["x", "y"]}), "column 's'"),
        (pa.table({"a": [1.0, None, 3.0]}), "row 1, column 0"),
        (pa.table({"a": [1.0, float("nan")]}), "row 1, column 0"),
    ],
)
def test_parquet_rejections(tmp_path: Path, table: pa.Table, needle: str) -> None:
    assert needle in rejected(write(tmp_path, parquet_bytes(table)), PARQUET).detail


def test_parquet_garbage(tmp_path: Path) -> None:
    path = write(tmp_path, b"PAR1 nope")
    detail = rejected(path, PARQUET).detail
    assert "Parquet" in detail
    assert str(path) not in detail and str(tmp_path) not in detail  # no server paths


# ---- spooling ----------------------------------------------------------------------------


async def chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


def test_spool_hashes_and_counts(tmp_path: Path) -> None:
    upload = asyncio.run(spool(chunks(b"ab", b"c"), tmp_path, max_bytes=3))
    assert upload.size == 3 and upload.path.read_bytes() == b"abc"
    assert upload.sha256 == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def test_spool_stops_at_the_limit_and_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(ProblemError) as info:
        asyncio.run(spool(chunks(b"ab", b"cd"), tmp_path, max_bytes=3))
    assert info.value.status == 413
    assert list(tmp_path.iterdir()) == []


def test_spool_refuses_a_declared_length_over_the_limit(tmp_path: Path) -> None:
    with pytest.raises(ProblemError) as info:
        asyncio.run(spool(chunks(b"a"), tmp_path, max_bytes=3, declared=10))
    assert info.value.status == 413


def test_spool_refuses_an_empty_body(tmp_path: Path) -> None:
    with pytest.raises(ProblemError) as info:
        asyncio.run(spool(chunks(), tmp_path, max_bytes=3))
    assert info.value.status == 422


# ---- the store ---------------------------------------------------------------------------


@pytest.fixture
def store(redis_client: redis.Redis, tmp_path: Path) -> DatasetStore:
    return DatasetStore(redis_client, tmp_path / "data", prefix="t", ttl_s=60)


def spooled(store: DatasetStore, data: bytes) -> Upload:
    return asyncio.run(store.spool(chunks(data)))


def test_store_round_trip(store: DatasetStore) -> None:
    meta, created = store.create(spooled(store, npy_bytes(X)), NPY, "x")
    assert created
    assert meta["n_samples"] == 2 and meta["n_features"] == 3 and meta["dtype"] == "float64"
    assert store.get(meta["id"]) == meta
    loaded = load_dataset(store.data_dir, meta["id"])
    assert isinstance(loaded, np.memmap)
    np.testing.assert_array_equal(loaded, X)
    assert list(store.tmp_dir.iterdir()) == []


def test_store_same_bytes_same_name_is_deduplicated(store: DatasetStore) -> None:
    body = json.dumps({"data": X.tolist()}).encode()
    first, created = store.create(spooled(store, body), JSON, None)
    again, created_again = store.create(spooled(store, body), JSON, None)
    other, created_other = store.create(spooled(store, body), JSON, "renamed")
    assert created and not created_again and created_other
    assert again["id"] == first["id"] != other["id"]
    assert other["name"] == "renamed"


def test_store_list_is_paged_newest_first(store: DatasetStore) -> None:
    ids = [store.create(spooled(store, npy_bytes(X + i)), NPY, None)[0]["id"] for i in range(3)]
    page, total = store.list(offset=0, limit=2)
    assert total == 3 and [d["id"] for d in page] == ids[::-1][:2]
    page, _ = store.list(offset=2, limit=2)
    assert [d["id"] for d in page] == ids[:1]


def test_store_delete_removes_file_index_and_dedupe(store: DatasetStore) -> None:
    body = npy_bytes(X)
    meta, _ = store.create(spooled(store, body), NPY, None)
    assert store.delete(meta["id"])
    assert not store.path(meta["id"]).exists()
    assert store.get(meta["id"]) is None and store.list()[1] == 0
    assert not store.delete(meta["id"])
    again, created = store.create(spooled(store, body), NPY, None)
    assert created and again["id"] != meta["id"]


def test_store_forgets_expired_datasets(store: DatasetStore, redis_client: redis.Redis) -> None:
    meta, _ = store.create(spooled(store, npy_bytes(X)), NPY, None)
    redis_client.delete(f"t:dataset:{meta['id']}")  # what expiry does
    assert store.list() == ([], 0)
    assert not store.path(meta["id"]).exists()


def test_store_rejection_leaves_no_files(store: DatasetStore) -> None:
    with pytest.raises(ProblemError):
        store.create(spooled(store, b"1,2\n3\n"), CSV, None)
    assert list(store.tmp_dir.iterdir()) == []
    assert store.list()[1] == 0
