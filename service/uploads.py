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
import itertools
import logging
import os
import tempfile
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rbfkm_client.media import CSV, JSON, NPY, PARQUET

from service.errors import BodyTooLarge, InvalidDataset, UnsupportedMediaType
from service.jsonrows import FLOAT32_MAX as FLOAT32_MAX
from service.jsonrows import NAME_MAX_LENGTH as NAME_MAX_LENGTH
from service.jsonrows import parse_json_rows
from service.jsonrows import quote as _quote

logger = logging.getLogger(__name__)

#: CSV whose first row is a header, or is not (RFC 4180's ``header`` parameter; ``?header=``).
CSV_HEADER = "text/csv; header=present"
CSV_NO_HEADER = "text/csv; header=absent"
CONTENT_TYPES: dict[str, str] = {
    JSON: JSON,
    CSV: CSV,
    NPY: NPY,
    PARQUET: PARQUET,
    "application/x-parquet": PARQUET,
}
_FINITE_BLOCK = 1 << 22  # elements checked per block: bounded extra memory
_CSV_CHARS = 1 << 18  # CSV characters read at a time (a few milliseconds of work each)
#: Every .npy file starts with this (the format version follows).
_NPY_MAGIC = b"\x93NUMPY"
#: A Parquet file starts and ends with this.
_PARQUET_MAGIC = b"PAR1"


def media_type(content_type: str | None, header: bool | None = None) -> str:
    """The supported media type named by a Content-Type header (UnsupportedMediaType if none).

    For CSV, whether the first row is a header: ``header`` (the ``?header=`` query), else
    the Content-Type's own ``header=present|absent`` parameter (RFC 4180), else detected
    from the data (:func:`parse_csv`). Other types ignore both.
    """
    base, _, params = (content_type or "").partition(";")
    base = base.strip().lower()
    if base not in CONTENT_TYPES:
        raise UnsupportedMediaType(
            f"unsupported Content-Type {base or '(none)'!r}; send one of "
            f"{', '.join(sorted({JSON, CSV, NPY, PARQUET}))}"
        )
    media = CONTENT_TYPES[base]
    if media != CSV:
        return media
    if header is None:
        for param in params.split(";"):
            key, _, value = param.partition("=")
            if key.strip().lower() == "header":
                header = {"present": True, "absent": False}.get(value.strip().strip('"').lower())
    return {None: CSV, True: CSV_HEADER, False: CSV_NO_HEADER}[header]


@dataclass
class Upload:
    """A request body spooled to disk."""

    path: Path
    sha256: str
    size: int


class SpoolFile:
    """A body being written to a temp file, hashed and counted as it comes; BodyTooLarge
    once over ``max_bytes`` (the file is removed on any error: use it as a context manager).
    """

    def __init__(self, tmp_dir: Path, max_bytes: int) -> None:
        tmp_dir.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=tmp_dir, suffix=".upload")
        self.path = Path(name)
        self.max_bytes = max_bytes
        self.size = 0
        self._digest = hashlib.sha256()
        self._out = os.fdopen(fd, "wb", buffering=1 << 20)

    def write(self, chunk: bytes) -> None:
        """Append a chunk (BodyTooLarge once the body is over the limit)."""
        self.size += len(chunk)
        if self.size > self.max_bytes:
            raise BodyTooLarge(self.max_bytes)
        self._digest.update(chunk)
        self._out.write(chunk)

    def finish(self, empty: str) -> Upload:
        """The complete body; InvalidDataset saying ``empty`` for a body of no bytes."""
        self._out.close()
        if self.size == 0:
            raise InvalidDataset(empty)
        return Upload(path=self.path, sha256=self._digest.hexdigest(), size=self.size)

    def __enter__(self) -> SpoolFile:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        if kind is not None:
            self._out.close()
            self.path.unlink(missing_ok=True)


async def spool(
    chunks: AsyncIterator[bytes], tmp_dir: Path, max_bytes: int, declared: int | None = None
) -> Upload:
    """Write a streamed body to a temp file, hashing it; BodyTooLarge once over `max_bytes`."""
    if declared is not None and declared > max_bytes:
        raise BodyTooLarge(max_bytes)
    with SpoolFile(tmp_dir, max_bytes) as out:
        async for chunk in chunks:
            out.write(chunk)
        return out.finish("the request body is empty; send the dataset as the body")


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
    #: The columns' names, where the format names them (a CSV header row, Parquet).
    columns: list[str] | None = None


def parse(path: Path, media: str) -> Parsed:
    """Parse a spooled body by media type (one :func:`media_type` returns) and validate it
    (2-D, numeric, finite, non-empty)."""
    parsers: dict[str, Callable[[Path], Parsed]] = {
        JSON: parse_json,
        CSV: parse_csv,
        CSV_HEADER: lambda body: parse_csv(body, header=True),
        CSV_NO_HEADER: lambda body: parse_csv(body, header=False),
        NPY: parse_npy,
        PARQUET: parse_parquet,
    }
    parsed = parsers[media](path)
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
                np.abs(block) > FLOAT32_MAX,
                start,
                f"values must lie within +-{FLOAT32_MAX:.3g}, the float32 range the workers "
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
    """`{"data": [[...], ...], "name": ...}`: rows of equal length, numbers only; parsed
    streaming, in bounded memory (:mod:`service.jsonrows`)."""
    array, name = parse_json_rows(path)
    return Parsed(array, name=name)


def _number(text: str) -> bool:
    """Whether a CSV field is a number as the CSV reader reads one: decimal, ASCII digits
    (Python's float() also takes "1_000" and other scripts' digits; numpy does not)."""
    text = text.strip()
    if not text.isascii() or "_" in text:
        return False
    try:
        float(text)
    except ValueError:
        return False
    return True


def _csv_fields(line: str) -> list[str] | None:
    """The fields of a CSV line, None for a line the reader skips (blank, or a # comment)."""
    content = line.split("#", 1)[0]
    return content.split(",") if content.strip() else None


def _csv_header(path: Path) -> tuple[list[str] | None, int]:
    """The fields of the first row and how many lines it takes to get past it."""
    with path.open("r", encoding="utf-8-sig", newline="") as fh:
        for count, line in enumerate(fh, start=1):
            fields = _csv_fields(line)
            if fields is not None:
                return fields, count
    return None, 0


def _csv_problem(path: Path, skip: int, header: bool | None) -> InvalidDataset:
    """Where a CSV the reader refused goes wrong: the first ragged row, non-number or
    non-UTF-8 byte, by row and column counted from 0 (as every message does), in the
    service's words rather than numpy's."""
    where = " after the header row" if skip else ""
    try:
        return _csv_first_bad(path, skip, header, where) or InvalidDataset(
            "the CSV is not comma-separated decimal numbers"
        )
    except UnicodeDecodeError:
        return InvalidDataset(_NOT_UTF8)


_NOT_UTF8 = "the CSV is not UTF-8 text; send it encoded as UTF-8"


def _csv_first_bad(path: Path, skip: int, header: bool | None, where: str) -> InvalidDataset | None:
    width: int | None = None
    with path.open("r", encoding="utf-8-sig", newline="") as fh:
        rows = (f for f in map(_csv_fields, itertools.islice(fh, skip, None)) if f is not None)
        for i, fields in enumerate(rows):
            if width is None:
                width = len(fields)
            elif len(fields) != width:
                return InvalidDataset(
                    f"row {i} has {len(fields)} values but row 0 has {width}; rows must be of "
                    f"equal length (rows and columns count from 0{where})",
                    field=f"body.data[{i}]",
                )
            for j, value in enumerate(fields):
                if _number(value):
                    continue
                hint = ""
                if i == 0 and not skip:
                    hint = "; send ?header=true if the first row is a header"
                    if header is None:
                        hint = (
                            "; a first row is taken as a header only when none of its fields "
                            "is a number: send ?header=true if it is one"
                        )
                return InvalidDataset(
                    f"row {i}, column {j} is {_quote(value.strip())}; values must be decimal "
                    f"numbers (rows and columns count from 0{where}){hint}",
                    field=f"body.data[{i}][{j}]",
                )
    return None


def _read_csv(path: Path, skip: int) -> np.ndarray:
    """The numbers of a CSV past its first ``skip`` lines, as one ``np.loadtxt`` of the
    whole file reads them, but about :data:`_CSV_CHARS` at a time: each block is a
    short hold of the GIL (a whole file was seconds of it, and the event loop waited), and
    the blocks go into one array preallocated for every line, so the file is read once
    and nothing but that array is held. ValueError where the reader refuses a block."""
    with path.open("rb") as raw:
        capacity = sum(chunk.count(b"\n") for chunk in iter(lambda: raw.read(1 << 20), b"")) + 1
    out: np.ndarray | None = None
    rows = 0
    with path.open("r", encoding="utf-8-sig") as fh:
        lines = itertools.islice(fh, skip, None)
        count = 1000  # lines a block, then as many as make about _CSV_CHARS
        while block := list(itertools.islice(lines, count)):
            count = max(1, _CSV_CHARS * len(block) // max(1, sum(map(len, block))))
            array = np.loadtxt(block, delimiter=",", dtype=np.float64, ndmin=2)
            if array.size == 0:
                continue
            if out is None:
                out = np.empty((capacity, array.shape[1]))
            elif array.shape[1] != out.shape[1]:
                raise ValueError("rows of unequal length")
            out[rows : rows + len(array)] = array
            rows += len(array)
    if out is None:
        return np.loadtxt([], delimiter=",", dtype=np.float64, ndmin=2)
    return out[:rows]


def parse_csv(path: Path, header: bool | None = None) -> Parsed:
    """Comma-separated numbers, one row a line (blank lines and ``#`` comments skipped).

    The first row is a header when ``header`` says so, or (``header`` None) when none of its
    fields is a number: a row such as ``0x10,2`` is data with a bad value, never a header.
    """
    try:
        first, lines = _csv_header(path)
    except UnicodeDecodeError:
        raise InvalidDataset(_NOT_UTF8) from None
    detected = first is not None and not any(_number(field) for field in first)
    skip = lines if (detected if header is None else header) else 0
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "no data": reported below
            array = _read_csv(path, skip)
    except (ValueError, UnicodeDecodeError) as exc:
        logger.debug("the CSV reader refused a body: %s", exc)
        raise _csv_problem(path, skip, header) from None
    if skip and array.size == 0:
        raise InvalidDataset("the CSV has a header row but no data rows")
    columns = [field.strip() for field in first] if skip and first is not None else None
    return Parsed(np.ascontiguousarray(array), columns=columns)


def _npy_problem(path: Path) -> str:
    """Why numpy cannot read a body that starts like a .npy file, in the service's words."""
    fmt = np.lib.format
    with path.open("rb") as fh:
        try:
            version = fmt.read_magic(fh)
        except ValueError:
            return "its header is truncated"
        if version not in ((1, 0), (2, 0), (3, 0)):
            return f"its format version {version[0]}.{version[1]} is unknown (numpy writes 1.0-3.0)"
        read = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
        try:
            shape, _, dtype = read(fh)
        except (ValueError, SyntaxError, TypeError):
            return "its header is truncated or malformed (it must be the dict numpy.save writes)"
        if dtype.hasobject:
            return "it holds Python objects; send a numeric array"
        expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        held = path.stat().st_size - fh.tell()
    if held < expected:
        return (
            f"its header declares shape {tuple(shape)} of {dtype} ({expected} bytes of data) but "
            f"the body holds {held}: the upload is truncated"
        )
    return "it cannot be read as one array"


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
    except (ValueError, OSError, EOFError, SyntaxError, TypeError) as exc:
        logger.debug("numpy refused a .npy body: %s", exc)
        reason = _npy_problem(path)
        raise InvalidDataset(f"the body is not a readable .npy file: {reason}") from None
    if not isinstance(array, np.ndarray):
        raise InvalidDataset("the body is not a .npy file holding one array")
    if array.ndim != 2:
        raise InvalidDataset(f"the array must be 2-D (rows x columns); got shape {array.shape}")
    target = _float_dtype(array.dtype)
    ready = array.dtype == target and array.dtype.isnative and array.flags.c_contiguous
    if ready:
        return Parsed(array, in_place=True)
    return Parsed(np.ascontiguousarray(array, dtype=target))


def _is_parquet(path: Path) -> bool:
    """Whether a body starts and ends with Parquet's magic bytes."""
    size = path.stat().st_size
    if size < 2 * len(_PARQUET_MAGIC):
        return False
    with path.open("rb") as fh:
        head = fh.read(len(_PARQUET_MAGIC))
        fh.seek(size - len(_PARQUET_MAGIC))
        return head == fh.read(len(_PARQUET_MAGIC)) == _PARQUET_MAGIC


def parse_parquet(path: Path) -> Parsed:
    """Numeric columns of a Parquet file, no nulls; float32 if every column is float32."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not _is_parquet(path):
        raise InvalidDataset(
            "the body is not a Parquet file (it does not start and end with the magic bytes "
            "PAR1): send the bytes a Parquet writer writes, or another Content-Type"
        )
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError, ValueError) as exc:
        # Arrow's words name the server's spool file and its own internals: logged, not sent.
        logger.debug("Arrow refused a Parquet body: %s", exc)
        raise InvalidDataset(
            "the body is not a readable Parquet file: its footer, schema or column data is "
            "corrupt or truncated"
        ) from None
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
    return Parsed(out, columns=list(table.column_names))


@contextlib.contextmanager
def parsed_upload(upload: Upload, media: str) -> Iterator[np.ndarray]:
    """Parse a spooled body that is used once (predict) and delete it afterwards."""
    try:
        yield parse(upload.path, media).array
    finally:
        upload.path.unlink(missing_ok=True)
