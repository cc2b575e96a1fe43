"""Datasets by reference: ``POST /v1/datasets`` with ``{"source": URL}`` has the service read
the data from an ``http(s)://`` URL or an object store (``s3://``, ``gs://``).

What it reads becomes an upload like any other: streamed to the same temp file under the
same ``RBFKM_MAX_UPLOAD_BYTES`` (a declared size over it is refused before a byte is read),
parsed by the same parsers with the same errors. Its format is the key's extension
(``.csv``, ``.parquet``/``.pq``, ``.npy``, ``.json``), else the response's (object's)
content type.

The read happens within the request, in a worker thread, bounded by
``RBFKM_SOURCE_TIMEOUT_S`` (each network step, and the whole read). HTTP(S) goes through
:func:`service.urls.open_http` (every hop checked by the URL safety rules, the checked
address pinned), not through fsspec's HTTP file system, which resolves and redirects on
its own; object stores go through fsspec with the tenant's options
(:mod:`service.objectstore`). Every failure is a domain error: unsafe URL, store not
configured, source missing, refused, unreachable or too slow, too large.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import httpx
from rbfkm_client.bodies import EXTENSIONS

from service.errors import BodyTooLarge, ServiceError, SourceUnavailable, UnsupportedMediaType
from service.objectstore import backend_error, filesystem, is_object_url, parse_object_url
from service.settings import Settings
from service.uploads import SpoolFile, Upload, media_type
from service.urls import Allowlist, open_http

#: The largest JSON body read as a reference (a URL and a name fit many times over).
REFERENCE_MAX_BYTES = 16 * 1024
#: Bytes read from a source at a time.
CHUNK = 1 << 20
FIELD = "body.source"
_TOO_LARGE_HINT = "; point source at a smaller file (or a denser format: .npy or Parquet)"


def reference_in(upload: Upload) -> dict[str, Any] | None:
    """The object of a small JSON body that has a ``source`` field (a dataset by
    reference); None for any other body (the JSON parser then reads it as data)."""
    if upload.size > REFERENCE_MAX_BYTES:
        return None
    try:
        document = json.loads(upload.path.read_bytes())
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if isinstance(document, dict) and "source" in document:
        return document
    return None


@dataclass
class Fetched:
    """A source read to a temp file: the upload, its media type and a default name."""

    upload: Upload
    media: str
    name: str | None


def source_media(url: str, content_type: str | None, header: bool | None) -> str:
    """The media type of a source: the key's extension, else its content type."""
    suffix = PurePosixPath(urlsplit(url).path).suffix.lower()
    if suffix in EXTENSIONS:
        return media_type(EXTENSIONS[suffix], header)
    try:
        return media_type(content_type, header)
    except UnsupportedMediaType:
        raise SourceUnavailable(
            f"cannot tell the format of {url!r}: its name does not end in "
            f"{', '.join(EXTENSIONS)} and its content type is {content_type or '(none)'!r}; "
            "point source at a file with one of those extensions",
            "unknown format",
        ) from None


class _Deadline:
    """The time a source's read may take in all."""

    def __init__(self, url: str, seconds: float) -> None:
        self.url = url
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def check(self) -> None:
        if time.monotonic() > self.end:
            raise SourceUnavailable(
                f"reading {self.url!r} took longer than {self.seconds:g} s "
                "(RBFKM_SOURCE_TIMEOUT_S); point source at a faster or smaller file",
                "timed out",
            )


def _spool(chunks: Iterable[bytes], tmp_dir: Path, max_bytes: int, deadline: _Deadline) -> Upload:
    with SpoolFile(tmp_dir, max_bytes) as out:
        for chunk in chunks:
            out.write(chunk)
            deadline.check()
        return out.finish(f"the source {deadline.url!r} is empty; point it at a dataset")


def _refuse_declared(size: int | None, max_bytes: int) -> None:
    if size is not None and size > max_bytes:
        raise BodyTooLarge(max_bytes, hint=_TOO_LARGE_HINT)


def _read_http(
    url: str, settings: Settings, tmp_dir: Path, header: bool | None, deadline: _Deadline
) -> Fetched:
    allowlist = Allowlist.parse(settings.url_allowlist)
    max_bytes = settings.max_upload_bytes
    try:
        with (
            httpx.Client(timeout=settings.source_timeout_s) as http,
            open_http(http, url, allowlist, field=FIELD) as response,
        ):
            _check_status(url, response.status_code)
            media = source_media(url, response.headers.get("content-type"), header)
            declared = response.headers.get("content-length", "")
            _refuse_declared(int(declared) if declared.isdigit() else None, max_bytes)
            upload = _spool(response.iter_bytes(CHUNK), tmp_dir, max_bytes, deadline)
    except httpx.TimeoutException:
        raise SourceUnavailable(
            f"{url!r} did not answer within {settings.source_timeout_s:g} s "
            "(RBFKM_SOURCE_TIMEOUT_S); check that it is up and retry",
            "timed out",
        ) from None
    except httpx.HTTPError as exc:
        raise SourceUnavailable(
            f"could not read {url!r}: {type(exc).__name__}: {exc}; check that the host is up "
            "and reachable from the server",
            "unreachable",
        ) from None
    return Fetched(upload, media, _file_name(url))


def _check_status(url: str, status: int) -> None:
    """A 2xx goes on; anything else says what the source's server answered."""
    if 200 <= status < 300:
        return
    if status in (401, 403):
        raise SourceUnavailable(
            f"{url!r} answered {status}: the server sends no credentials to HTTP sources; "
            "make the file readable without them (e.g. a pre-signed URL)",
            "access denied",
        )
    if status == 404:
        raise SourceUnavailable(f"{url!r} answered 404: no such file; check the URL", "not found")
    raise SourceUnavailable(
        f"{url!r} answered {status}; point source at a URL that answers 200", f"answered {status}"
    )


def _chunks(handle: Any) -> Iterator[bytes]:
    while chunk := handle.read(CHUNK):
        yield chunk


def _read_object(
    url: str,
    settings: Settings,
    tenant: str,
    tmp_dir: Path,
    header: bool | None,
    deadline: _Deadline,
) -> Fetched:
    target = parse_object_url(url, FIELD)
    fs = filesystem(target, settings, tenant, FIELD)
    try:
        info = fs.info(target.path)
        if info.get("type") == "directory":
            raise SourceUnavailable(
                f"{url!r} is a prefix, not an object; name one file", "not a file"
            )
        media = source_media(url, info.get("ContentType") or info.get("contentType"), header)
        _refuse_declared(info.get("size"), settings.max_upload_bytes)
        with fs.open(target.path, "rb", block_size=CHUNK) as handle:
            upload = _spool(_chunks(handle), tmp_dir, settings.max_upload_bytes, deadline)
    except ServiceError:
        raise
    except Exception as exc:  # the backends raise their own kinds; each becomes a 422
        raise backend_error(exc, url, FIELD) from None
    return Fetched(upload, media, _file_name(url))


def _file_name(url: str) -> str | None:
    return PurePosixPath(urlsplit(url).path).name or None


def fetch(
    url: str, settings: Settings, tenant: str, tmp_dir: Path, header: bool | None = None
) -> Fetched:
    """Read the dataset at ``url`` for ``tenant`` into ``tmp_dir`` (blocking: run it in a
    thread)."""
    deadline = _Deadline(url, settings.source_timeout_s)
    if is_object_url(url):
        return _read_object(url, settings, tenant, tmp_dir, header, deadline)
    return _read_http(url, settings, tmp_dir, header, deadline)
