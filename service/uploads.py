"""Request bodies that carry data: streamed to disk under a size limit, parsed by type.

A body is streamed to a temporary file (hashing and counting as it goes, so the size limit
holds without buffering), then parsed by content type into one 2-D float array and
validated: at least one row and column, numeric, finite, within float32's range. Every
refusal is a domain error (:mod:`service.errors`) naming the row, column or field to fix.
The dataset store keeps what parses (:mod:`service.datasets`); ``predict`` uses a parsed body
once and deletes it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
import warnings
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from service.errors import BodyTooLarge, InvalidDataset, UnsupportedMediaType

JSON = "application/json"
CSV = "text/csv"
NPY = "application/x-npy"
PARQUET = "application/vnd.apache.parquet"
CONTENT_TYPES: dict[str, str] = {
    JSON: JSON,
    CSV: CSV,
    NPY: NPY,
    PARQUET: PARQUET,
    "application/x-parquet": PARQUET,
}
_FINITE_BLOCK = 1 << 22  # elements checked per block: bounded extra memory
#: Values beyond this (float32's largest) would not survive the workers' float32 fit.
_FLOAT32_MAX = float(np.finfo(np.float32).max)
#: Every .npy file starts with this (the format version follows).
_NPY_MAGIC = b"\x93NUMPY"


def media_type(content_type: str | None) -> str:
    """The supported media type named by a Content-Type header (UnsupportedMediaType if none)."""
    base = (content_type or "").split(";", 1)[0].strip().lower()
    if base not in CONTENT_TYPES:
        raise UnsupportedMediaType(
            f"unsupported Content-Type {base or '(none)'!r}; send one of "
            f"{', '.join(sorted({JSON, CSV, NPY, PARQUET}))}"
        )
    return CONTENT_TYPES[base]


@dataclass
class Upload:
    """A request body spooled to disk."""

    path: Path
    sha256: str
    size: int


async def spool(
    chunks: AsyncIterator[bytes], tmp_dir: Path, max_bytes: int, declared: int | None = None
) -> Upload:
    """Write a streamed body to a temp file, hashing it; BodyTooLarge once over `max_bytes`."""
    if declared is not None and declared > max_bytes:
        raise BodyTooLarge(max_bytes)
    tmp_dir.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=tmp_dir, suffix=".upload")
    path = Path(name)
    digest = hashlib.sha256()
    size = 0
    try:
        with os.fdopen(fd, "wb", buffering=1 << 20) as out:
            async for chunk in chunks:
                size += len(chunk)
                if size > max_bytes:
                    raise BodyTooLarge(max_bytes)
                digest.update(chunk)
                out.write(chunk)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    if size == 0:
        path.unlink(missing_ok=True)
        raise InvalidDataset("the request body is empty; send the dataset as the body")
    return Upload(path=path, sha256=digest.hexdigest(), size=size)


@dataclass(frozen=True)
class Spooler:
    """Spools request bodies under one size limit into ``tmp_dir``.

    ``tmp_dir`` is ``{data_dir}/tmp`` in the service: on the datasets' file system, so an
    upload already in the stored format is renamed into place rather than copied.
    """

    tmp_dir: Path
    max_bytes: int

    @classmethod
    def under(cls, data_dir: Path, max_bytes: int) -> Spooler:
        """The spooler of a data directory."""
        return cls(Path(data_dir) / "tmp", max_bytes)

    async def spool(
        self, chunks: AsyncIterator[bytes], content_length: str | None = None
    ) -> Upload:
        """Stream a body to disk; a declared ``Content-Length`` over the limit is refused
        before a byte is read."""
        declared = int(content_length) if content_length and content_length.isdigit() else None
        return await spool(chunks, self.tmp_dir, self.max_bytes, declared)


@dataclass
class Parsed:
    """A parsed body: a C-order float array; `in_place` when it maps the upload file itself."""

    array: np.ndarray
    name: str | None = None
    in_place: bool = False


def parse(path: Path, media: str) -> Parsed:
    """Parse a spooled body by media type and validate it (2-D, numeric, finite, non-empty)."""
    parser = {JSON: parse_json, CSV: parse_csv, NPY: parse_npy, PARQUET: parse_parquet}[media]
    parsed = parser(path)
    check_array(parsed.array)
    return parsed


def check_array(array: np.ndarray) -> None:
    """At least one row and one column, and every value finite (else which row and column)."""
    if array.ndim != 2:
        raise InvalidDataset(f"the data must be 2-D (rows x columns); got {array.ndim}-D")
    n, d = array.shape
    if n < 1 or d < 1:
        raise InvalidDataset(
            f"the data must have at least 1 row and 1 column; got shape ({n}, {d})"
        )
    step = max(1, _FINITE_BLOCK // d)
    for start in range(0, n, step):
        block = array[start : start + step]
        _reject_first(
            block, ~np.isfinite(block), start, "every value must be finite (no NaN or Inf)"
        )
        if block.dtype.itemsize > 4:
            _reject_first(
                block,
                np.abs(block) > _FLOAT32_MAX,
                start,
                f"values must lie within +-{_FLOAT32_MAX:.3g}, the float32 range the workers "
                "fit in (k-means is scale-invariant: scale the data)",
            )


def _reject_first(block: np.ndarray, bad: np.ndarray, start: int, rule: str) -> None:
    """InvalidDataset naming the first value of ``block`` (rows from ``start``) where ``bad``
    holds."""
    if not bad.any():
        return
    row, col = (int(i) for i in np.argwhere(bad)[0])
    value = float(block[row, col])  # "inf", not "np.float64(inf)"
    raise InvalidDataset(
        f"row {start + row}, column {col} is {value}; {rule}; rows and columns count from 0",
        field=f"body.data[{start + row}][{col}]",
    )


def _float_dtype(dtype: np.dtype) -> np.dtype:
    """float32 stays float32 (float16 widens to it); everything else numeric becomes float64."""
    if dtype.kind == "f" and dtype.itemsize <= 4:
        return np.dtype(np.float32)
    if dtype.kind in "fiub":
        return np.dtype(np.float64)
    raise InvalidDataset(f"the data must be numeric; got dtype {dtype}")


def parse_json(path: Path) -> Parsed:
    """`{"data": [[...], ...], "name": ...}`: rows of equal length, numbers only."""
    try:
        with path.open("rb") as fh:
            body = json.load(fh)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise InvalidDataset(f"the body is not valid JSON: {exc}") from None
    if not isinstance(body, dict) or "data" not in body:
        raise InvalidDataset('the JSON body must be an object {"data": [[...], ...], "name": ...}')
    unknown = sorted(set(body) - {"data", "name"})
    if unknown:
        raise InvalidDataset(
            f"unknown fields {unknown}; allowed: data, name", field=f"body.{unknown[0]}"
        )
    name = body.get("name")
    if name is not None and not isinstance(name, str):
        raise InvalidDataset("name must be a string", field="body.name")
    rows = body["data"]
    if not isinstance(rows, list) or not rows:
        raise InvalidDataset("data must be a non-empty list of rows", field="body.data")
    width: int | None = None
    for i, row in enumerate(rows):
        if not isinstance(row, list):
            raise InvalidDataset(f"row {i} is not a list of numbers", field=f"body.data[{i}]")
        if width is None:
            width = len(row)
        elif len(row) != width:
            raise InvalidDataset(
                f"row {i} has {len(row)} values but row 0 has {width}; "
                "rows must be of equal length",
                field=f"body.data[{i}]",
            )
        for j, value in enumerate(row):
            if type(value) is not float and type(value) is not int:
                raise InvalidDataset(
                    f"row {i}, column {j} is {value!r}; values must be numbers",
                    field=f"body.data[{i}][{j}]",
                )
    try:
        array = np.array(rows, dtype=np.float64)
    except OverflowError:
        raise InvalidDataset("a value is too large for a 64-bit float") from None
    return Parsed(array, name=name)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _first_line(path: Path) -> tuple[str, int]:
    """The first non-blank line and how many lines it takes to get past it."""
    with path.open("r", encoding="utf-8-sig", newline="") as fh:
        for count, line in enumerate(fh, start=1):
            if line.strip():
                return line, count
    return "", 0


def parse_csv(path: Path) -> Parsed:
    """Comma-separated numbers; a first row with any non-number is taken as a header."""
    try:
        first, lines = _first_line(path)
    except UnicodeDecodeError as exc:
        raise InvalidDataset(f"the CSV is not UTF-8 text: {exc}") from None
    fields = [field.strip() for field in first.split(",")]
    header = any(field and not _is_number(field) for field in fields)
    skip = lines if header else 0
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "no data": reported below
            array = np.loadtxt(
                path, delimiter=",", skiprows=skip, dtype=np.float64, ndmin=2, encoding="utf-8-sig"
            )
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidDataset(f"the CSV is not numeric: {exc}") from None
    if header and array.size == 0:
        raise InvalidDataset("the CSV has a header row but no data rows")
    return Parsed(np.ascontiguousarray(array))


def parse_npy(path: Path) -> Parsed:
    """A raw `.npy` file; kept as is (renamed into place) when already C-order float32/64."""
    with path.open("rb") as head:
        magic = head.read(len(_NPY_MAGIC))
    if magic != _NPY_MAGIC:
        # np.load would take it for a pickle and suggest allow_pickle, which no client can set.
        raise InvalidDataset(
            "the body is not a .npy file (it does not start with the .npy magic string "
            "\\x93NUMPY): send the bytes numpy.save writes, or another Content-Type"
        )
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise InvalidDataset(f"the body is not a readable .npy file: {exc}") from None
    if not isinstance(array, np.ndarray):
        raise InvalidDataset("the body is not a .npy file holding one array")
    if array.ndim != 2:
        raise InvalidDataset(f"the array must be 2-D (rows x columns); got shape {array.shape}")
    target = _float_dtype(array.dtype)
    ready = array.dtype == target and array.dtype.isnative and array.flags.c_contiguous
    if ready:
        return Parsed(array, in_place=True)
    return Parsed(np.ascontiguousarray(array, dtype=target))


def parse_parquet(path: Path) -> Parsed:
    """Numeric columns of a Parquet file, no nulls; float32 if every column is float32."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        # Arrow names the file it read: the server's spool file, nothing the client sent.
        reason = re.sub(rf"\s*'?{re.escape(str(path))}'?", "", str(exc))
        raise InvalidDataset(f"the body is not a readable Parquet file: {reason}") from None
    for field in table.schema:
        kind = field.type
        if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
            raise InvalidDataset(
                f"column {field.name!r} has type {kind}; all columns must be numeric",
                field=f"body.{field.name}",
            )
    if table.num_columns == 0:
        raise InvalidDataset("the Parquet file has no columns")
    all_f32 = all(pa.types.is_float32(f.type) or pa.types.is_float16(f.type) for f in table.schema)
    out = np.empty((table.num_rows, table.num_columns), dtype=np.float32 if all_f32 else np.float64)
    for j, column in enumerate(table.columns):
        if column.null_count:
            row = int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
            raise InvalidDataset(
                f"row {row}, column {j} ({table.column_names[j]!r}) is null; "
                "every value must be a finite number",
                field=f"body.{table.column_names[j]}[{row}]",
            )
        out[:, j] = column.to_numpy()
    return Parsed(out)


@contextlib.contextmanager
def parsed_upload(upload: Upload, media: str) -> Iterator[np.ndarray]:
    """Parse a spooled body that is used once (predict) and delete it afterwards."""
    try:
        yield parse(upload.path, media).array
    finally:
        upload.path.unlink(missing_ok=True)
