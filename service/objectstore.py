"""Object stores (``s3://``, ``gs://``) through fsspec: where a dataset's ``source`` is read
from and a job's ``output`` is written to.

The client names a bucket and a key, never how to reach them: the credentials and the
endpoint come from the operator's ``RBFKM_STORAGE_OPTIONS``, per tenant (``"*"`` for every
other tenant), as the fsspec backend takes them (s3fs: ``key``, ``secret``,
``endpoint_url``, ...). A tenant without options for a scheme cannot use it, so one
tenant never reads with credentials meant for another. An ``endpoint_url`` goes through
the URL safety rules (:mod:`service.urls`): an object store on a private, loopback or
link-local address must be on ``RBFKM_URL_ALLOWLIST`` (``minio`` in docker-compose).

The backends are optional (``pip install 'rbfkm[s3]'``): without one, its scheme is a
:class:`~service.errors.NotConfigured` naming the package, and the service runs on.
Backend failures become :class:`~service.errors.SourceUnavailable`: a missing key, access
refused, or an unreachable store, each saying what to change.
"""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from service.errors import NotConfigured, ServiceError, SourceUnavailable, UnsafeUrl
from service.settings import Settings
from service.urls import Allowlist, check_url

log = logging.getLogger(__name__)

#: The object-store schemes, the package that implements each, and the extra that has it.
BACKENDS: dict[str, tuple[str, str]] = {"s3": ("s3fs", "s3"), "gs": ("gcsfs", "gcs")}
SCHEMES: tuple[str, ...] = tuple(BACKENDS)


@dataclass(frozen=True)
class ObjectUrl:
    """A checked ``scheme://bucket/key`` URL."""

    url: str
    scheme: str
    bucket: str
    key: str

    @property
    def path(self) -> str:
        """The path fsspec takes (no scheme)."""
        return f"{self.bucket}/{self.key}" if self.key else self.bucket


def is_object_url(url: str) -> bool:
    """Whether ``url`` names an object store (rather than HTTP)."""
    return urlsplit(url).scheme.lower() in BACKENDS


def parse_object_url(url: str, field: str) -> ObjectUrl:
    """``url`` as bucket and key; UnsafeUrl for anything else (credentials, a query,
    fsspec's chained ``a::b`` URLs, no bucket)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in BACKENDS:
        raise UnsafeUrl(
            f"{url!r}: the scheme must be one of {', '.join(SCHEMES)}", "unsupported scheme", field
        )
    if "::" in url or "@" in parts.netloc or parts.query or parts.fragment:
        raise UnsafeUrl(
            f"{url!r}: give a plain {scheme}://bucket/key (no credentials, query or chained "
            "URL; the server holds the credentials)",
            "not a plain object URL",
            field,
        )
    if not parts.netloc:
        raise UnsafeUrl(f"{url!r} names no bucket", "no bucket", field)
    return ObjectUrl(url, scheme, parts.netloc, parts.path.lstrip("/"))


def storage_options(settings: Settings, tenant: str, scheme: str, field: str) -> dict[str, Any]:
    """The tenant's options for ``scheme``; NotConfigured when the operator gave none."""
    options = settings.for_tenant(settings.storage_options, tenant) or {}
    if scheme not in options:
        raise NotConfigured(
            f"this server has no {scheme}:// storage options for tenant {tenant!r} "
            "(RBFKM_STORAGE_OPTIONS), so it cannot reach that store on its behalf; ask its "
            "operator, or upload the data as the request body",
            field,
            f"no {scheme} storage options",
        )
    return dict(options[scheme])


def _check_endpoint(options: dict[str, Any], settings: Settings, field: str) -> None:
    """The operator's endpoint obeys the URL safety rules (allow-listed if not public)."""
    endpoint = options.get("endpoint_url") or options.get("client_kwargs", {}).get("endpoint_url")
    if endpoint:
        check_url(str(endpoint), Allowlist.parse(settings.url_allowlist), field=field)


def filesystem(url: ObjectUrl, settings: Settings, tenant: str, field: str) -> Any:
    """The fsspec file system that reaches ``url`` with the tenant's options."""
    package, extra = BACKENDS[url.scheme]
    if importlib.util.find_spec(package) is None:
        raise NotConfigured(
            f"{url.scheme}:// needs the package {package} on this server "
            f"(pip install 'rbfkm[{extra}]'); ask its operator, or upload the data as the "
            "request body",
            field,
            f"{package} is not installed",
        )
    options = storage_options(settings, tenant, url.scheme, field)
    _check_endpoint(options, settings, field)
    import fsspec

    return fsspec.filesystem(url.scheme, **options)


def backend_error(exc: BaseException, url: str, field: str, verb: str = "read") -> ServiceError:
    """A backend's exception as a domain error that says what to change."""
    if isinstance(exc, ServiceError):
        return exc
    if isinstance(exc, FileNotFoundError):
        return SourceUnavailable(
            f"{url!r} does not exist (no such bucket or key); check the URL", "not found", field
        )
    if isinstance(exc, PermissionError):
        return SourceUnavailable(
            f"access to {url!r} was refused with this server's credentials for the store; "
            "grant them access to it, or ask the operator",
            "access denied",
            field,
        )
    log.info("object store: %s of %s failed: %r", verb, url, exc)
    return SourceUnavailable(
        f"could not {verb} {url!r}: {type(exc).__name__}: {exc}; check that the store is "
        "reachable and retry",
        "store unavailable",
        field,
    )
