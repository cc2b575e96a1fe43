"""Data to send: arrays, data frames, Arrow tables and files, as the bodies the API reads.

An array or a data frame travels as ``.npy`` (exact, compact, no optional dependency); an
Arrow table as Parquet; a file as itself, its type told by its extension. A dataset's URL
(http(s), s3, gs) goes by reference: the service reads it (:func:`source_body`); rows to
predict are sent themselves, a URL of them fetched by the client first.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np

from rbfkm_client.media import CSV, JSON, NPY, PARQUET

#: File extensions and the media type a file of each is sent as.
EXTENSIONS: dict[str, str] = {
    ".npy": NPY,
    ".csv": CSV,
    ".parquet": PARQUET,
    ".pq": PARQUET,
    ".json": JSON,
}


@dataclass(frozen=True)
class Body:
    """A request body: bytes, or a file streamed from disk; its type and a name."""

    content: bytes | Path
    content_type: str
    name: str | None = None


def is_url(value: Any) -> bool:
    """Whether ``value`` is an http(s) URL (rather than a path or a dataset id)."""
    return isinstance(value, str) and urlparse(value).scheme in ("http", "https")


#: The URL schemes the service reads a dataset from itself (``{"source": URL}``).
SOURCE_SCHEMES: tuple[str, ...] = ("http", "https", "s3", "gs")


def is_source(value: Any) -> bool:
    """Whether ``value`` is a URL the service can read a dataset from (http(s), s3, gs)."""
    return isinstance(value, str) and urlparse(value).scheme.lower() in SOURCE_SCHEMES


def source_body(url: str, name: str | None = None) -> dict[str, str]:
    """The JSON body that has the service read the dataset at ``url`` itself."""
    return {"source": url, **({"name": name} if name else {})}


def media_of(name: str, content_type: str | None = None) -> str:
    """The media type of a file named ``name`` (or its server's ``content_type``)."""
    suffix = Path(urlparse(name).path).suffix.lower()
    if suffix in EXTENSIONS:
        return EXTENSIONS[suffix]
    base = (content_type or "").split(";")[0].strip().lower()
    if base in EXTENSIONS.values():
        return base
    raise ValueError(
        f"cannot tell the format of {name!r}: name a file ending in "
        f"{', '.join(EXTENSIONS)}, or pass an array, a DataFrame or an Arrow table"
    )


def npy_bytes(array: np.ndarray) -> bytes:
    """An array as the bytes of a ``.npy`` file."""
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def _is_frame(data: Any) -> bool:
    return type(data).__module__.startswith("pandas") and hasattr(data, "to_numpy")


def _is_arrow(data: Any) -> bool:
    return type(data).__module__.startswith("pyarrow") and hasattr(data, "schema")


def body_of(data: Any, name: str | None = None) -> Body:
    """The body that sends ``data``: an ndarray (or anything ``np.asarray`` takes), a
    pandas DataFrame, a pyarrow Table, or the path of a ``.npy``/``.csv``/``.parquet``/
    ``.json`` file. URLs are fetched beforehand (:func:`body_of_download`)."""
    if isinstance(data, (str, os.PathLike)):
        path = Path(data)
        if not path.is_file():
            raise FileNotFoundError(f"no file {str(path)!r} to upload")
        return Body(path, media_of(path.name), name or path.name)
    if _is_arrow(data):
        import pyarrow.parquet as pq

        sink = io.BytesIO()
        pq.write_table(data, sink)
        return Body(sink.getvalue(), PARQUET, name)
    array = data.to_numpy() if _is_frame(data) else np.asarray(data)
    if array.dtype.kind not in "fiub":
        raise TypeError(
            f"the data must be numeric; got dtype {array.dtype} (convert or drop the "
            "non-numeric columns first)"
        )
    if array.dtype.kind != "f":
        array = array.astype(np.float64)
    return Body(npy_bytes(np.ascontiguousarray(array)), NPY, name)


def body_of_download(url: str, response: Any, name: str | None = None) -> Body:
    """The body of a file fetched from ``url`` (its type from the URL or the response)."""
    media = media_of(url, response.headers.get("content-type"))
    default_name = Path(urlparse(url).path).name or None
    return Body(response.content, media, name or default_name)
