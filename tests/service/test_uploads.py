"""Request bodies: spooling under the limit, parsing every format, every rejection."""

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

from service.errors import BodyTooLarge, InvalidDataset, UnsupportedMediaType
from service.uploads import (
    CSV,
    CSV_HEADER,
    CSV_NO_HEADER,
    JSON,
    NPY,
    PARQUET,
    Spooler,
    media_type,
    parse,
    parsed_upload,
    spool,
)

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


def rejected(path: Path, media: str) -> InvalidDataset:
    with pytest.raises(InvalidDataset) as info:
        parse(path, media)
    assert info.value.field, "the error names the offending field"
    return info.value


# ---- media types -------------------------------------------------------------------------


def test_media_type_ignores_parameters_and_case() -> None:
    assert media_type("Application/JSON; charset=utf-8") == JSON
    assert media_type("text/csv") == CSV
    assert media_type("application/x-parquet") == PARQUET


def test_media_type_says_whether_a_csv_has_a_header() -> None:
    assert media_type("text/csv", header=True) == CSV_HEADER
    assert media_type("text/csv; charset=utf-8; Header=Present") == CSV_HEADER
    assert media_type('text/csv; header="absent"') == CSV_NO_HEADER
    assert media_type("text/csv; header=present", header=False) == CSV_NO_HEADER  # ?header=
    assert media_type("text/csv; header=maybe") == CSV
    assert media_type("application/json", header=True) == JSON  # only CSV has a header


@pytest.mark.parametrize("value", [None, "", "text/plain", "application/octet-stream"])
def test_unsupported_media_type_is_refused(value: str | None) -> None:
    with pytest.raises(UnsupportedMediaType) as info:
        media_type(value)
    assert info.value.field == "header.content-type"
    assert "application/json" in info.value.detail


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
        (b'{"data": [[' + b"9" * 400 + b"]]}", "row 0, column 0 is '9999"),
        (b'{"data": [[1], [' + b"9" * 5000 + b"]]}", "row 1, column 0 is '9999"),
        (b'{"data": [[1, -' + b"9" * 40 + b"]]}", "row 0, column 1 is '-9999"),
        (b'{"data": [[1, 2e999]]}', "row 0, column 1 is '2e999'"),
        (b"\xff\xfe{}", "not valid JSON"),
        (b'{"data": [[1]], "name": "' + b"n" * 201 + b'"}', "at most 200 characters"),
        (b'{"data": [[1, 2]', "line 0, column 16 (character 16"),
        (b'{"data":\n [[1 2]]}', "line 1, column 5"),
        (b'{"data": [[1]]}\xff', "byte 15 is not UTF-8"),
    ],
)
def test_json_rejections_say_where(tmp_path: Path, body: bytes, needle: str) -> None:
    assert needle in rejected(write(tmp_path, body), JSON).detail


#: What numpy, Python and Arrow say that a client cannot act on (or counts from 1).
LIBRARY_WORDS = ("usecols", "set_int_max_str_digits", "float64 at row", "Exceeds the limit")
LIBRARY_WORDS += ("EOF", "allow_pickle", "magic bytes not found", "Expecting", "char ")


def test_integers_of_any_length_are_refused_by_place(tmp_path: Path) -> None:
    huge = b"1" + b"0" * 5000  # 10**5000
    detail = rejected(write(tmp_path, b'{"data": [[' + huge + b"]]}"), JSON).detail
    assert detail.startswith("row 0, column 0 is '1000") and "float32" in detail
    assert len(detail) < 400 and not any(word in detail for word in LIBRARY_WORDS)
    assert parse(write(tmp_path, b'{"data": [[' + b"9" * 38 + b"]]}"), JSON).array[0, 0] == 1e38


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
        (b"1,2\n3\n", "row 1 has 1 values but row 0 has 2"),
        (b"1,2\n3,abc\n", "row 1, column 1 is 'abc'"),
        (b"x,y\n1,2\n3,abc\n", "row 1, column 1 is 'abc'; values must be decimal numbers (rows "
         "and columns count from 0 after the header row)"),
        (b"a,b\n", "no data rows"),
        (b"1,2\nnan,4\n", "row 1, column 0"),
        (b"1,2\n3,inf\n", "row 1, column 1"),
        (b"1,,2\n3,4,5\n", "row 0, column 1 is ''"),
        (b"1,2\n1_000,3\n", "row 1, column 0 is '1_000'"),
        (b"1,2\n\xd9\xa1,3\n", "row 1, column 0 is '\u0661'"),
        (b"1,2\n3,4,\n", "row 1 has 3 values"),
        (b"\xff\xfe1,2\n", "not UTF-8"),
        (b"1,2\n" * 10_000 + b"\xff,1\n", "not UTF-8"),
        (b"\n\n", "at least 1 row"),
        (b"1,2\n" * 1000 + b"3,x" + b"y" * 100 + b"\n", "row 1000, column 1 is 'xyyy"),
    ],
)  # fmt: skip
def test_csv_rejections(tmp_path: Path, body: bytes, needle: str) -> None:
    detail = rejected(write(tmp_path, body), CSV).detail
    assert needle in detail
    assert not any(word in detail for word in LIBRARY_WORDS), detail
    assert len(detail) < 300, "long values are cut"


@pytest.mark.parametrize(
    ("body", "media", "shape"),
    [
        (b"a,b\n1,2\n", CSV, (1, 2)),  # every field of the first row is a word: a header
        (b"x\n1\n2\n", CSV, (2, 1)),
        (b"# note\n\na,b\n1,2\n", CSV, (1, 2)),  # comments and blank lines come before it
        (b"1,2\n3,4\n", CSV, (2, 2)),
        (b"1,2\n3,4\n", media_type("text/csv", header=True), (1, 2)),
        (b"1,2\n3,4\n", media_type("text/csv; header=present"), (1, 2)),
        (b"0x10,2\n3,4\n", media_type("text/csv", header=True), (1, 2)),
        (b"1,2\n3,4\n", media_type("text/csv; header=present", header=False), (2, 2)),
        (b"1,2\n3,4\n", media_type("text/csv; header=absent"), (2, 2)),
    ],
)
def test_csv_header_rows(tmp_path: Path, body: bytes, media: str, shape: tuple) -> None:
    assert parse(write(tmp_path, body), media).array.shape == shape


@pytest.mark.parametrize(
    ("first", "column"), [(b"0x10,2", 0), (b"a,1", 0), (b"1,b", 1), (b"1,,2", 1)]
)
def test_a_first_row_with_a_number_is_data(tmp_path: Path, first: bytes, column: int) -> None:
    # A row with any number in it is data: its other fields are errors, not a header.
    error = rejected(write(tmp_path, first + b"\n3,4\n"), CSV)
    assert error.detail.startswith(f"row 0, column {column} is ")
    assert "?header=true" in error.detail and error.field == f"body.data[0][{column}]"


def test_csv_header_false_makes_the_first_row_data(tmp_path: Path) -> None:
    error = rejected(write(tmp_path, b"a,b\n1,2\n"), media_type("text/csv", header=False))
    assert error.detail.startswith("row 0, column 0 is 'a'; values must be decimal numbers")
    assert "send ?header=true if the first row is a header" in error.detail


def test_csv_header_true_with_only_a_header(tmp_path: Path) -> None:
    only = write(tmp_path, b"1,2\n")
    assert "no data rows" in rejected(only, media_type("text/csv", header=True)).detail


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
        (npy_bytes(X)[:20], "not a readable .npy file: its header is truncated or malformed"),
        (npy_bytes(X)[:7], "not a readable .npy file: its header is truncated"),
        (
            npy_bytes(X)[:-8],
            "header declares shape (2, 3) of float64 (48 bytes of data) but the "
            "body holds 40: the upload is truncated",
        ),
        (b"\x93NUMPY\x09\x00" + npy_bytes(X)[8:], "format version 9.0 is unknown"),
        (npy_bytes(np.arange(3.0)), "2-D"),
        (npy_bytes(np.array([["a", "b"]])), "numeric"),
        (npy_bytes(np.zeros((0, 3))), "at least 1 row"),
        (npy_bytes(np.array([[1.0, 2.0], [3.0, np.inf]])), "row 1, column 1"),
        (npy_bytes(np.array([[1 + 2j]])), "numeric"),
    ],
)
def test_npy_rejections(tmp_path: Path, data: bytes, needle: str) -> None:
    detail = rejected(write(tmp_path, data), NPY).detail
    assert needle in detail
    assert not any(word in detail for word in LIBRARY_WORDS), detail


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


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (b"PAR1 nope", "not a Parquet file (it does not start and end with the magic bytes PAR1)"),
        (b"nope", "not a Parquet file"),
        (b"PAR1 nope PAR1", "not a readable Parquet file: its footer, schema or column data"),
        (parquet_bytes(pa.table({"a": [1.0]}))[:-30] + b"PAR1", "not a readable Parquet file"),
    ],
)
def test_parquet_garbage(tmp_path: Path, data: bytes, needle: str) -> None:
    path = write(tmp_path, data)
    detail = rejected(path, PARQUET).detail
    assert needle in detail
    assert str(tmp_path) not in detail  # no server paths
    assert not any(word in detail for word in LIBRARY_WORDS), detail


# ---- spooling ----------------------------------------------------------------------------


async def chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


def test_spool_hashes_and_counts(tmp_path: Path) -> None:
    upload = asyncio.run(spool(chunks(b"ab", b"c"), tmp_path, max_bytes=3))
    assert upload.size == 3 and upload.path.read_bytes() == b"abc"
    assert upload.sha256 == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def test_spool_stops_at_the_limit_and_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(BodyTooLarge):
        asyncio.run(spool(chunks(b"ab", b"cd"), tmp_path, max_bytes=3))
    assert list(tmp_path.iterdir()) == []


def test_spool_refuses_a_declared_length_over_the_limit(tmp_path: Path) -> None:
    with pytest.raises(BodyTooLarge):
        asyncio.run(spool(chunks(b"a"), tmp_path, max_bytes=3, declared=10))


def test_spool_refuses_an_empty_body(tmp_path: Path) -> None:
    with pytest.raises(InvalidDataset):
        asyncio.run(spool(chunks(), tmp_path, max_bytes=3))


def test_spooler_checks_the_declared_length_first(tmp_path: Path) -> None:
    spooler = Spooler.under(tmp_path, max_bytes=3)
    assert spooler.tmp_dir == tmp_path / "tmp"
    with pytest.raises(BodyTooLarge):
        asyncio.run(spooler.spool(chunks(b"a"), content_length="4"))
    upload = asyncio.run(spooler.spool(chunks(b"1,2"), content_length="3"))
    assert upload.path.parent == tmp_path / "tmp" and upload.size == 3


def test_parsed_upload_is_deleted_after_use(tmp_path: Path) -> None:
    upload = asyncio.run(Spooler.under(tmp_path, 100).spool(chunks(b"1,2\n3,4\n")))
    with parsed_upload(upload, CSV) as array:
        np.testing.assert_array_equal(array, [[1.0, 2.0], [3.0, 4.0]])
    assert not upload.path.exists()
    bad = asyncio.run(Spooler.under(tmp_path, 100).spool(chunks(b"1,x\n")))
    with pytest.raises(InvalidDataset), parsed_upload(bad, CSV):
        pass
    assert not bad.path.exists()
