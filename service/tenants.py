"""Tenants: who a caller is, what it may see, and how much it may hold.

``RBFKM_API_KEYS`` names the tenants and their keys, in one of three forms:

- unset or empty: no authentication; every caller is the tenant ``default``;
- a JSON list or comma-separated keys: one tenant, ``default``, with those keys;
- a JSON object mapping a tenant name to a key, a list of keys, or an object
  ``{"keys": [...], "max_stored_bytes": N, "max_active_jobs": N}`` with the tenant's own
  quotas (0 or absent: the service-wide ``RBFKM_TENANT_MAX_*`` setting).

A key may be written ``sha256:<64 hex digits>`` (its SHA-256 digest), so a configuration
need not hold the secret itself. ``RBFKM_ADMIN_KEYS`` lists keys, in the same two list
forms, of callers who see every tenant's data; what an admin creates belongs to the tenant
``admin`` (a name no configured tenant may take).

Every dataset, job, result, idempotency key and upload dedupe belongs to one tenant. A
caller who is not the owner (or an admin) is told the id does not exist, never that it is
forbidden, so ids do not leak across tenants.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from service.settings import Settings

#: The tenant of a service without keys, of a flat key list, and of records older than
#: tenants.
DEFAULT_TENANT = "default"
#: The tenant that owns what an admin key creates.
ADMIN_TENANT = "admin"
#: A tenant name: it becomes part of Redis keys and metric labels.
TENANT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_DIGEST = re.compile(r"sha256:([0-9a-fA-F]{64})")
_QUOTAS = ("max_stored_bytes", "max_active_jobs")


def key_digest(key: str) -> str:
    """The SHA-256 hex digest a key is compared by (``sha256:<hex>`` is taken as given)."""
    match = _DIGEST.fullmatch(key)
    if match:
        return match.group(1).lower()
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True)
class Quota:
    """What one tenant may hold at once; 0 means no limit."""

    max_stored_bytes: int = 0
    max_active_jobs: int = 0


@dataclass(frozen=True)
class Caller:
    """An authenticated caller: the tenant it acts as, and whether it sees every tenant."""

    tenant: str
    admin: bool = False

    def sees(self, owner: str | None) -> bool:
        """Whether a record owned by ``owner`` (None: a record older than tenants) exists
        for this caller."""
        return self.admin or (owner or DEFAULT_TENANT) == self.tenant

    @property
    def scope(self) -> str | None:
        """The tenant whose records a listing shows; None for every tenant (an admin)."""
        return None if self.admin else self.tenant


def _keys_of(value: Any, where: str) -> list[str]:
    keys = [value] if isinstance(value, str) else value
    if not isinstance(keys, list) or not keys:
        raise ValueError(f"{where}: give a key, a non-empty list of keys, or an object")
    for key in keys:
        if not isinstance(key, str) or not key.strip():
            raise ValueError(f"{where}: every key must be a non-empty string")
        if key.startswith("sha256:") and not _DIGEST.fullmatch(key):
            raise ValueError(f"{where}: `sha256:` must be followed by 64 hex digits")
    return [key.strip() for key in keys]


def _tenant_entry(name: str, value: Any) -> dict[str, Any]:
    """One tenant's keys and quotas in the normal form ``{"keys": [...], quotas...}``."""
    if not isinstance(name, str) or not TENANT_NAME.fullmatch(name):
        raise ValueError(
            f"tenant name {name!r}: use 1-64 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit"
        )
    if name == ADMIN_TENANT:
        raise ValueError(f"tenant name {ADMIN_TENANT!r} is reserved for RBFKM_ADMIN_KEYS")
    if not isinstance(value, Mapping):
        value = {"keys": value}
    unknown = set(value) - {"keys", *_QUOTAS}
    if unknown:
        raise ValueError(f"tenant {name!r}: unknown fields {sorted(unknown)}")
    entry: dict[str, Any] = {"keys": _keys_of(value.get("keys"), f"tenant {name!r}")}
    for field in _QUOTAS:
        limit = value.get(field, 0)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ValueError(f"tenant {name!r}: {field} must be an integer >= 0")
        entry[field] = limit
    return entry


def _split(text: str) -> Any:
    """A JSON value, or comma-separated keys."""
    text = text.strip()
    if text.startswith(("[", "{")):
        return json.loads(text)
    return [key.strip() for key in text.split(",") if key.strip()]


def normalise_api_keys(value: Any) -> dict[str, dict[str, Any]]:
    """``RBFKM_API_KEYS`` in any accepted form as ``{tenant: {"keys": [...], quotas}}``;
    ValueError saying what to fix otherwise. A key may belong to one tenant only."""
    if isinstance(value, str):
        value = _split(value)
    if value is None or (isinstance(value, (list, tuple)) and not value):
        return {}
    if isinstance(value, (list, tuple)):
        value = {DEFAULT_TENANT: list(value)}
    if not isinstance(value, Mapping):
        raise ValueError("give a JSON object of tenants, a JSON list or comma-separated keys")
    tenants = {name: _tenant_entry(name, entry) for name, entry in value.items()}
    owners: dict[str, str] = {}
    for name, entry in tenants.items():
        for key in entry["keys"]:
            other = owners.setdefault(key_digest(key), name)
            if other != name:
                raise ValueError(f"a key is given to both tenants {other!r} and {name!r}")
    return tenants


def normalise_admin_keys(value: Any) -> list[str]:
    """``RBFKM_ADMIN_KEYS`` (a JSON list or comma-separated keys) as a list."""
    if isinstance(value, str):
        value = _split(value)
    if not value:
        return []
    if not isinstance(value, (list, tuple)):
        raise ValueError("give a JSON list or comma-separated keys")
    return _keys_of(list(value), "RBFKM_ADMIN_KEYS")


class Keyring:
    """The configured keys: authenticates a key to a :class:`Caller` and gives quotas."""

    def __init__(
        self, api_keys: Any, admin_keys: Any = (), *, default_quota: Quota | None = None
    ) -> None:
        self.tenants = normalise_api_keys(api_keys)
        admins = normalise_admin_keys(admin_keys)
        self.default_quota = default_quota or Quota()
        self._entries: list[tuple[bytes, Caller]] = [
            (key_digest(key).encode(), Caller(name))
            for name, entry in self.tenants.items()
            for key in entry["keys"]
        ]
        self._entries += [(key_digest(key).encode(), Caller(ADMIN_TENANT, True)) for key in admins]

    @classmethod
    def from_settings(cls, settings: Settings) -> Keyring:
        """The keyring the settings describe."""
        quota = Quota(settings.tenant_max_stored_bytes, settings.tenant_max_active_jobs)
        return cls(settings.api_keys, settings.admin_keys, default_quota=quota)

    @property
    def open(self) -> bool:
        """No keys configured: every request is the default tenant, unauthenticated."""
        return not self._entries

    @property
    def names(self) -> list[str]:
        """Every tenant a caller can act as: the configured ones (``default`` when none
        is), and ``admin`` when admin keys are set."""
        admin = [ADMIN_TENANT] if any(caller.admin for _, caller in self._entries) else []
        return (list(self.tenants) or [DEFAULT_TENANT]) + admin

    def authenticate(self, offered: str | None) -> Caller | None:
        """The caller a key stands for, or None. Every entry is compared, in constant time
        each, so the answer's timing does not say which keys exist."""
        if self.open:
            return Caller(DEFAULT_TENANT)
        if not offered:
            return None
        digest = hashlib.sha256(offered.encode()).hexdigest().encode()
        found = None
        for stored, caller in self._entries:
            if hmac.compare_digest(digest, stored) and found is None:
                found = caller
        return found

    def quota(self, tenant: str) -> Quota:
        """The tenant's own quotas where set, the service-wide ones otherwise."""
        entry = self.tenants.get(tenant, {})
        return Quota(
            max_stored_bytes=entry.get("max_stored_bytes") or self.default_quota.max_stored_bytes,
            max_active_jobs=entry.get("max_active_jobs") or self.default_quota.max_active_jobs,
        )
