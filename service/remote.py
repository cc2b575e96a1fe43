"""Object stores (``s3://``, ``gs://``) through fsspec, with the tenant's credentials.

A request names an object (a dataset's ``source``, a job's ``output``) but never carries
credentials: they come from the server's ``RBFKM_STORAGE_OPTIONS``, per tenant and scheme
(``{"acme": {"s3": {"key": ..., "secret": ..., "endpoint_url": ...}}}``, ``"*"`` for
every other tenant), passed to fsspec as they are (s3fs, gcsfs options). A tenant without
an entry for a scheme cannot use it. A configured ``endpoint_url`` (MinIO, another
S3-compatible server) goes through the same address rules as every URL the service opens
(:mod:`service.urls`): the operator allows a private one in ``RBFKM_URL_ALLOWLIST``.

fsspec and s3fs are the ``remote`` extra; without them an object-store URL is a ``422``
that says so.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from service.errors import NotConfigured, UnsafeUrl
from service.settings import Settings
from service.urls import Allowlist, check_url

#: The object-store schemes, each with the fsspec package that reads it.
STORE_SCHEMES: dict[str, str] = {"s3": "s3fs", "gs": "gcsfs"}


def store_options(url: str, settings: Settings, tenant: str, field: str) -> dict[str, Any]:
    """The fsspec options of ``url``'s store for ``tenant``, once the store is known to be
    configured and its endpoint safe; a domain error saying what is missing otherwise."""
    scheme = urlsplit(url).scheme.lower()
    if scheme not in STORE_SCHEMES:
        raise UnsafeUrl(
            f"{url!r}: the scheme must be one of {', '.join(STORE_SCHEMES)}",
            "unsupported scheme",
            field,
        )
    by_scheme = settings.for_tenant(settings.storage_options, tenant) or {}
    options = by_scheme.get(scheme)
    if options is None:
        raise NotConfigured(
            f"this server has no {scheme}:// storage configured for tenant {tenant!r} "
            "(RBFKM_STORAGE_OPTIONS); ask its operator, or send the data itself",
            field,
            f"no {scheme}:// storage configured",
        )
    endpoint = options.get("endpoint_url") or options.get("client_kwargs", {}).get("endpoint_url")
    if endpoint:
        check_url(endpoint, Allowlist.parse(settings.url_allowlist), field=field)
    return dict(options)


def filesystem(url: str, options: dict[str, Any], field: str) -> tuple[Any, str]:
    """The fsspec filesystem of ``url`` and the path in it (no instance cache: options
    differ between tenants)."""
    try:
        import fsspec
    except ImportError:
        raise NotConfigured(
            "this server cannot read object stores: install its `remote` extra "
            "(pip install 'rbfkm[remote]')",
            field,
        ) from None
    scheme = urlsplit(url).scheme.lower()
    try:
        return fsspec.core.url_to_fs(url, skip_instance_cache=True, **options)
    except ImportError:
        raise NotConfigured(
            f"this server cannot read {scheme}:// (install {STORE_SCHEMES[scheme]})", field
        ) from None
