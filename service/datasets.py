"""Parsing and storing uploaded datasets.

A body is streamed to a temporary file under ``{data_dir}/tmp`` (hashing and counting as it
goes, so the size limit holds without buffering), parsed by content type into one 2-D float
array, validated, and written atomically to ``{data_dir}/datasets/{id}.npy`` — the layout the
workers load with ``np.load(path, mmap_mode="r")``. A ``.npy`` upload that is already in the
final format is renamed into place: no copy at all. Metadata lives in Redis under
``{prefix}:dataset:{id}`` with an index ``{prefix}:datasets`` (a sorted set by creation time).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
import uuid
import warnings
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import redis

from service.problems import ProblemError
from service.settings import Settings

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
    """The supported media type named by a Content-Type header, or a 415 problem."""
    base = (content_type or "").split(";", 1)[0].strip().lower()
    if base not in CONTENT_TYPES:
        raise ProblemError(
            415,
            f"unsupported Content-Type {base or '(none)'!r}; send one of "
            f"{', '.join(sorted({JSON, CSV, NPY, PARQUET}))}",
            kind="unsupported-media-type",
            errors=[("header.content-type", "unsupported media type")],
        )
    return CONTENT_TYPES[base]


def _invalid(detail: str, field: str = "body") -> ProblemError:
    return ProblemError(422, detail, kind="invalid-dataset", errors=[(field, detail)])


@dataclass
class Upload:
    """A request body spooled to disk."""

    path: Path
    sha256: str
    size: int


async def spool(
    chunks: AsyncIterator[bytes], tmp_dir: Path, max_bytes: int, declared: int | None = None
) -> Upload:
    """Write a streamed body to a temp file, hashing it; 413 as soon as it exceeds `max_bytes`."""
    if declared is not None and declared > max_bytes:
        raise _too_large(max_bytes)
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
                    raise _too_large(max_bytes)
                digest.update(chunk)
                out.write(chunk)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    if size == 0:
        path.unlink(missing_ok=True)
        raise _invalid("the request body is empty; send the dataset as the body")
    return Upload(path=path, sha256=digest.hexdigest(), size=size)


def _too_large(max_bytes: int) -> ProblemError:
    return ProblemError(
        413,
        f"the body exceeds the limit of {max_bytes} bytes (RBFKM_MAX_UPLOAD_BYTES)",
        kind="payload-too-large",
        errors=[("body", f"larger than {max_bytes} bytes")],
    )


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
        raise _invalid(f"the data must be 2-D (rows x columns); got {array.ndim}-D")
    n, d = array.shape
    if n < 1 or d < 1:
        raise _invalid(f"the data must have at least 1 row and 1 column; got shape ({n}, {d})")
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
    """422 naming the first value of ``block`` (rows from ``start``) where ``bad`` holds."""
    if not bad.any():
        return
    row, col = (int(i) for i in np.argwhere(bad)[0])
    value = float(block[row, col])  # "inf", not "np.float64(inf)"
    raise _invalid(
        f"row {start + row}, column {col} is {value}; {rule}; rows and columns count from 0",
        field=f"body.data[{start + row}][{col}]",
    )


def _float_dtype(dtype: np.dtype) -> np.dtype:
    """float32 stays float32 (float16 widens to it); everything else numeric becomes float64."""
    if dtype.kind == "f" and dtype.itemsize <= 4:
        return np.dtype(np.float32)
    if dtype.kind in "fiub":
        return np.dtype(np.float64)
    raise _invalid(f"the data must be numeric; got dtype {dtype}")


def parse_json(path: Path) -> Parsed:
    """`{"data": [[...], ...], "name": ...}`: rows of equal length, numbers only."""
    try:
        with path.open("rb") as fh:
            body = json.load(fh)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise _invalid(f"the body is not valid JSON: {exc}") from None
    if not isinstance(body, dict) or "data" not in body:
        raise _invalid('the JSON body must be an object {"data": [[...], ...], "name": ...}')
    unknown = sorted(set(body) - {"data", "name"})
    if unknown:
        raise _invalid(f"unknown fields {unknown}; allowed: data, name", field=f"body.{unknown[0]}")
    name = body.get("name")
    if name is not None and not isinstance(name, str):
        raise _invalid("name must be a string", field="body.name")
    rows = body["data"]
    if not isinstance(rows, list) or not rows:
        raise _invalid("data must be a non-empty list of rows", field="body.data")
    width: int | None = None
    for i, row in enumerate(rows):
        if not isinstance(row, list):
            raise _invalid(f"row {i} is not a list of numbers", field=f"body.data[{i}]")
        if width is None:
            width = len(row)
        elif len(row) != width:
            raise _invalid(
                f"row {i} has {len(row)} values but row 0 has {width}; "
                "rows must be of equal length",
                field=f"body.data[{i}]",
            )
        for j, value in enumerate(row):
            if type(value) is not float and type(value) is not int:
                raise _invalid(
                    f"row {i}, column {j} is {value!r}; values must be numbers",
                    field=f"body.data[{i}][{j}]",
                )
    try:
        array = np.array(rows, dtype=np.float64)
    except OverflowError:
        raise _invalid("a value is too large for a 64-bit float") from None
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
        raise _invalid(f"the CSV is not UTF-8 text: {exc}") from None
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
        raise _invalid(f"the CSV is not numeric: {exc}") from None
    if header and array.size == 0:
        raise _invalid("the CSV has a header row but no data rows")
    return Parsed(np.ascontiguousarray(array))


def parse_npy(path: Path) -> Parsed:
    """A raw `.npy` file; kept as is (renamed into place) when already C-order float32/64."""
    with path.open("rb") as head:
        magic = head.read(len(_NPY_MAGIC))
    if magic != _NPY_MAGIC:
        # np.load would take it for a pickle and suggest allow_pickle, which no client can set.
        raise _invalid(
            "the body is not a .npy file (it does not start with the .npy magic string "
            "\\x93NUMPY): send the bytes numpy.save writes, or another Content-Type"
        )
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise _invalid(f"the body is not a readable .npy file: {exc}") from None
    if not isinstance(array, np.ndarray):
        raise _invalid("the body is not a .npy file holding one array")
    if array.ndim != 2:
        raise _invalid(f"the array must be 2-D (rows x columns); got shape {array.shape}")
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
        raise _invalid(f"the body is not a readable Parquet file: {reason}") from None
    for field in table.schema:
        kind = field.type
        if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
            raise _invalid(
                f"column {field.name!r} has type {kind}; all columns must be numeric",
                field=f"body.{field.name}",
            )
    if table.num_columns == 0:
        raise _invalid("the Parquet file has no columns")
    all_f32 = all(pa.types.is_float32(f.type) or pa.types.is_float16(f.type) for f in table.schema)
    out = np.empty((table.num_rows, table.num_columns), dtype=np.float32 if all_f32 else np.float64)
    for j, column in enumerate(table.columns):
        if column.null_count:
            row = int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
            raise _invalid(
                f"row {row}, column {j} ({table.column_names[j]!r}) is null; "
                "every value must be a finite number",
                field=f"body.{table.column_names[j]}[{row}]",
            )
        out[:, j] = column.to_numpy()
    return Parsed(out)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _now() -> datetime:
    return datetime.now(timezone.utc)


def dataset_path(data_dir: Path, dataset_id: str) -> Path:
    """Where the array of a dataset lives; shared with the workers."""
    return Path(data_dir) / "datasets" / f"{dataset_id}.npy"


def load_dataset(data_dir: Path, dataset_id: str) -> np.ndarray:
    """The array of a dataset, memory-mapped (what a worker fits on)."""
    return np.load(dataset_path(data_dir, dataset_id), mmap_mode="r")


class DatasetStore:
    """Datasets: arrays under `{data_dir}/datasets`, metadata in Redis."""

    def __init__(
        self,
        client: redis.Redis,
        data_dir: Path,
        *,
        prefix: str = "rbfkm",
        ttl_s: int = 7 * 24 * 3600,
        max_upload_bytes: int = 2 * 1024**3,
    ) -> None:
        self.client = client
        self.data_dir = Path(data_dir)
        self.prefix = prefix
        self.ttl_s = ttl_s
        self.max_upload_bytes = max_upload_bytes
        self.tmp_dir = self.data_dir / "tmp"
        self.dir = self.data_dir / "datasets"

    @classmethod
    def from_settings(cls, client: redis.Redis, settings: Settings) -> DatasetStore:
        """The store the settings describe."""
        return cls(
            client,
            settings.data_dir,
            prefix=settings.key_prefix,
            ttl_s=settings.result_ttl_s,
            max_upload_bytes=settings.max_upload_bytes,
        )

    def _key(self, dataset_id: str) -> str:
        return f"{self.prefix}:dataset:{dataset_id}"

    @property
    def _index(self) -> str:
        return f"{self.prefix}:datasets"

    def _sha_key(self, sha256: str, name: str | None) -> str:
        tag = hashlib.sha256((name or "").encode()).hexdigest()[:16]
        return f"{self.prefix}:dataset-sha256:{sha256}:{tag}"

    def path(self, dataset_id: str) -> Path:
        """The `.npy` file of a dataset."""
        return dataset_path(self.data_dir, dataset_id)

    async def spool(
        self, chunks: AsyncIterator[bytes], content_length: str | None = None
    ) -> Upload:
        """Stream a body to disk under the size limit."""
        declared = int(content_length) if content_length and content_length.isdigit() else None
        return await spool(chunks, self.tmp_dir, self.max_upload_bytes, declared)

    def create(self, upload: Upload, media: str, name: str | None) -> tuple[dict[str, Any], bool]:
        """Parse, validate and store a spooled body; `(dataset, created)`.

        The same bytes with the same `name` argument uploaded again return the stored
        dataset with `created=False`. The spooled file is consumed either way.
        """
        sha_key = self._sha_key(upload.sha256, name)
        try:
            existing = self._find_same(sha_key)
            if existing is not None:
                return existing, False
            parsed = parse(upload.path, media)
            dataset_id = uuid.uuid4().hex
            self._write(parsed, upload.path, self.path(dataset_id))
            array = parsed.array
            meta = {
                "id": dataset_id,
                "name": parsed.name if parsed.name is not None else name,
                "n_samples": int(array.shape[0]),
                "n_features": int(array.shape[1]),
                "dtype": str(array.dtype),
                "sha256": upload.sha256,
                "size_bytes": upload.size,
                "created_at": _now().isoformat(),
            }
            self._save(meta, sha_key)
            return meta, True
        finally:
            upload.path.unlink(missing_ok=True)

    def _write(self, parsed: Parsed, upload_path: Path, final: Path) -> None:
        """Atomically place the array at `final` (a rename when it is the upload itself)."""
        final.parent.mkdir(parents=True, exist_ok=True)
        if parsed.in_place:
            os.replace(upload_path, final)
            return
        tmp = final.with_name(f".{final.name}.tmp")
        with tmp.open("wb") as fh:
            np.save(fh, parsed.array, allow_pickle=False)
        os.replace(tmp, final)

    def _save(self, meta: dict[str, Any], sha_key: str) -> None:
        fields = {key: "" if value is None else str(value) for key, value in meta.items()}
        fields["sha_key"] = sha_key
        created = datetime.fromisoformat(meta["created_at"]).timestamp()
        pipe = self.client.pipeline()
        pipe.hset(self._key(meta["id"]), mapping=fields)
        pipe.expire(self._key(meta["id"]), self.ttl_s)
        pipe.zadd(self._index, {meta["id"]: created})
        pipe.set(sha_key, meta["id"], ex=self.ttl_s)
        pipe.execute()

    def _find_same(self, sha_key: str) -> dict[str, Any] | None:
        found = self.client.get(sha_key)
        return self.get(_text(found)) if found is not None else None

    @staticmethod
    def _decode(raw: dict[Any, Any]) -> dict[str, Any]:
        meta = {_text(k): _text(v) for k, v in raw.items()}
        return {
            "id": meta["id"],
            "name": meta["name"] or None,
            "n_samples": int(meta["n_samples"]),
            "n_features": int(meta["n_features"]),
            "dtype": meta["dtype"],
            "sha256": meta["sha256"],
            "size_bytes": int(meta["size_bytes"]),
            "created_at": meta["created_at"],
        }

    def get(self, dataset_id: str) -> dict[str, Any] | None:
        """The metadata of a dataset, or None (also once its retention has lapsed)."""
        raw = self.client.hgetall(self._key(dataset_id))
        if not raw:
            self._forget(dataset_id)
            return None
        if not self.path(dataset_id).exists():
            return None
        return self._decode(raw)

    def list(self, *, offset: int = 0, limit: int = 50) -> tuple[list[dict[str, Any]], int]:
        """A page of datasets, newest first, and the total."""
        ids = [_text(i) for i in self.client.zrevrange(self._index, offset, offset + limit - 1)]
        pipe = self.client.pipeline()
        for dataset_id in ids:
            pipe.hgetall(self._key(dataset_id))
        items = []
        for dataset_id, raw in zip(ids, pipe.execute(), strict=True):
            if raw:
                items.append(self._decode(raw))
            else:
                self._forget(dataset_id)
        return items, int(self.client.zcard(self._index))

    def delete(self, dataset_id: str) -> bool:
        """Remove a dataset's metadata and file; False if there was none."""
        raw = self.client.hgetall(self._key(dataset_id))
        if not raw:
            return False
        sha_key = _text(raw.get(b"sha_key", raw.get("sha_key", "")))
        pipe = self.client.pipeline()
        pipe.delete(self._key(dataset_id))
        if sha_key:
            pipe.delete(sha_key)
        pipe.zrem(self._index, dataset_id)
        pipe.execute()
        self.path(dataset_id).unlink(missing_ok=True)
        return True

    def _forget(self, dataset_id: str) -> None:
        """Drop what is left of an expired dataset (index entry and file)."""
        if self.client.zrem(self._index, dataset_id):
            self.path(dataset_id).unlink(missing_ok=True)

    def load(self, dataset_id: str) -> np.ndarray:
        """The dataset's array, memory-mapped."""
        return load_dataset(self.data_dir, dataset_id)


@contextlib.contextmanager
def parsed_upload(upload: Upload, media: str) -> Iterator[np.ndarray]:
    """Parse a spooled body that is used once (predict) and delete it afterwards."""
    try:
        yield parse(upload.path, media).array
    finally:
        upload.path.unlink(missing_ok=True)
