"""The dataset store: arrays on the shared data directory, metadata in Redis.

An array lives at ``{data_dir}/datasets/{id}.npy``, written atomically (or, for a ``.npy``
upload already in the final format, renamed into place: no copy at all), the layout the
workers load with ``np.load(path, mmap_mode="r")`` through :func:`load_dataset`, the one
loader API and workers share. Metadata lives under ``{prefix}:dataset:{id}`` with an index
``{prefix}:datasets`` (a sorted set by creation time), and one per tenant,
``{prefix}:tenant:{tenant}:datasets``; a dataset's ``tenant`` field names its owner.
Parsing the uploaded bodies is :mod:`service.uploads`'; a missing dataset is a
:class:`~service.errors.DatasetNotFound`.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import redis

from service.common import is_safe_id, text, utc_now
from service.errors import DatasetNotFound
from service.settings import Settings
from service.tenants import DEFAULT_TENANT
from service.uploads import Parsed, Upload, parse
from service.weights import load_weights, take_weight_column, weights_path


def dataset_path(data_dir: Path | str, dataset_id: str) -> Path:
    """Where the array of a dataset lives; DatasetNotFound for an id that cannot name one
    (ids become file names: no separators, no leading dot)."""
    if not is_safe_id(dataset_id):
        raise DatasetNotFound(dataset_id)
    return Path(data_dir) / "datasets" / f"{dataset_id}.npy"


def dataset_weights(data_dir: Path | str, dataset_id: str) -> np.ndarray | None:
    """The sample weights of a dataset, ``None`` when it has none."""
    return load_weights(dataset_path(data_dir, dataset_id))


def load_dataset(data_dir: Path | str, dataset_id: str) -> np.ndarray:
    """The array of a dataset, memory-mapped (what a worker fits on); DatasetNotFound when
    there is none."""
    path = dataset_path(data_dir, dataset_id)
    if not path.is_file():
        raise DatasetNotFound(dataset_id)
    return np.load(path, mmap_mode="r")


class DatasetStore:
    """Datasets: arrays under `{data_dir}/datasets`, metadata in Redis."""

    def __init__(
        self,
        client: redis.Redis,
        data_dir: Path,
        *,
        prefix: str = "rbfkm",
        ttl_s: int = 7 * 24 * 3600,
    ) -> None:
        self.client = client
        self.data_dir = Path(data_dir)
        self.prefix = prefix
        self.ttl_s = ttl_s
        self.dir = self.data_dir / "datasets"

    @classmethod
    def from_settings(cls, client: redis.Redis, settings: Settings) -> DatasetStore:
        """The store the settings describe."""
        return cls(
            client,
            settings.data_dir,
            prefix=settings.key_prefix,
            ttl_s=settings.result_ttl_s,
        )

    def _key(self, dataset_id: str) -> str:
        return f"{self.prefix}:dataset:{dataset_id}"

    def _index(self, tenant: str | None = None) -> str:
        """The sorted set of every dataset, or of one tenant's."""
        if tenant is None:
            return f"{self.prefix}:datasets"
        return f"{self.prefix}:tenant:{tenant}:datasets"

    def _sha_key(self, sha256: str, name: str | None, media: str, tenant: str) -> str:
        """Where the same tenant's same bytes, name and way of parsing them (a CSV header
        or not) are found again; another tenant's upload of them is a dataset of its own."""
        tag = hashlib.sha256(f"{tenant}\n{media}\n{name or ''}".encode()).hexdigest()[:16]
        return f"{self.prefix}:dataset-sha256:{sha256}:{tag}"

    def path(self, dataset_id: str) -> Path:
        """The `.npy` file of a dataset."""
        return dataset_path(self.data_dir, dataset_id)

    def create(
        self,
        upload: Upload,
        media: str,
        name: str | None,
        tenant: str = DEFAULT_TENANT,
        weight_column: str | None = None,
        source: str | None = None,
    ) -> tuple[dict[str, Any], bool]:
        """Parse, validate and store a spooled body as ``tenant``'s; `(dataset, created)`.

        The same bytes with the same `name` argument, parsed the same way, uploaded again by
        the same tenant return the stored dataset with `created=False`. The spooled file is
        consumed either way. ``weight_column``: the column of sample weights
        (:mod:`service.weights`), taken out of the features. ``source``: the URL the body
        was read from (:mod:`service.sources`), kept on the dataset.
        """
        parsing = media if weight_column is None else f"{media};weights={weight_column}"
        sha_key = self._sha_key(upload.sha256, name, parsing, tenant)
        try:
            existing = self._find_same(sha_key)
            if existing is not None:
                return existing, False
            parsed = parse(upload.path, media)
            weights = None
            if weight_column is not None:
                parsed, weights = take_weight_column(parsed, weight_column)
            dataset_id = uuid.uuid4().hex
            path = self.path(dataset_id)
            if weights is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                np.save(weights_path(path), weights, allow_pickle=False)
            self._write(parsed, upload.path, path)
            array = parsed.array
            meta = {
                "id": dataset_id,
                "name": parsed.name if parsed.name is not None else name,
                "n_samples": int(array.shape[0]),
                "n_features": int(array.shape[1]),
                "dtype": str(array.dtype),
                "sha256": upload.sha256,
                "size_bytes": upload.size,
                "stored_bytes": path.stat().st_size,
                "created_at": utc_now().isoformat(),
                "tenant": tenant,
                "weight_column": weight_column,
                "source": source,
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
        pipe.zadd(self._index(), {meta["id"]: created})
        pipe.zadd(self._index(meta["tenant"]), {meta["id"]: created})
        pipe.set(sha_key, meta["id"], ex=self.ttl_s)
        pipe.execute()

    def _find_same(self, sha_key: str) -> dict[str, Any] | None:
        found = self.client.get(sha_key)
        return self.get(text(found)) if found is not None else None

    @staticmethod
    def _decode(raw: dict[Any, Any]) -> dict[str, Any]:
        meta = {text(k): text(v) for k, v in raw.items()}
        return {
            "id": meta["id"],
            "name": meta["name"] or None,
            "n_samples": int(meta["n_samples"]),
            "n_features": int(meta["n_features"]),
            "dtype": meta["dtype"],
            "sha256": meta["sha256"],
            "size_bytes": int(meta["size_bytes"]),
            "stored_bytes": int(meta.get("stored_bytes") or meta["size_bytes"]),
            "created_at": meta["created_at"],
            "tenant": meta.get("tenant") or DEFAULT_TENANT,
            "weight_column": meta.get("weight_column") or None,
            "source": meta.get("source") or None,
        }

    def get(self, dataset_id: str) -> dict[str, Any] | None:
        """The metadata of a dataset, or None (also once its retention has lapsed)."""
        raw = self.client.hgetall(self._key(dataset_id))
        if not raw:
            self._forget(dataset_id, None)
            return None
        if not self.path(dataset_id).exists():
            return None
        return self._decode(raw)

    def list(
        self, *, offset: int = 0, limit: int = 50, tenant: str | None = None
    ) -> tuple[list[dict[str, Any]], int]:
        """A page of datasets (one tenant's, or every tenant's), newest first, and the
        total."""
        index = self._index(tenant)
        ids = [text(i) for i in self.client.zrevrange(index, offset, offset + limit - 1)]
        items = []
        for dataset_id, raw in zip(ids, self._hashes(ids), strict=True):
            if raw:
                items.append(self._decode(raw))
            else:
                self._forget(dataset_id, tenant)
        return items, int(self.client.zcard(index))

    def _hashes(self, ids: list[str]) -> list[dict[Any, Any]]:
        pipe = self.client.pipeline()
        for dataset_id in ids:
            pipe.hgetall(self._key(dataset_id))
        return pipe.execute()

    def stored_bytes(self, tenant: str) -> int:
        """The bytes of the tenant's stored datasets (what its storage quota counts)."""
        ids = [text(i) for i in self.client.zrange(self._index(tenant), 0, -1)]
        total = 0
        for dataset_id, raw in zip(ids, self._hashes(ids), strict=True):
            if raw:
                total += self._decode(raw)["stored_bytes"]
            else:
                self._forget(dataset_id, tenant)
        return total

    def delete(self, dataset_id: str) -> bool:
        """Remove a dataset's metadata and file; False if there was none."""
        raw = self.client.hgetall(self._key(dataset_id))
        if not raw:
            return False
        sha_key = text(raw.get(b"sha_key", raw.get("sha_key", "")))
        tenant = self._decode(raw)["tenant"]
        pipe = self.client.pipeline()
        pipe.delete(self._key(dataset_id))
        if sha_key:
            pipe.delete(sha_key)
        pipe.zrem(self._index(), dataset_id)
        pipe.zrem(self._index(tenant), dataset_id)
        pipe.execute()
        self.path(dataset_id).unlink(missing_ok=True)
        weights_path(self.path(dataset_id)).unlink(missing_ok=True)
        return True

    def _forget(self, dataset_id: str, tenant: str | None) -> None:
        """Drop what is left of an expired dataset (index entries and file); its tenant's
        index entry goes when that tenant's index is read."""
        removed = self.client.zrem(self._index(), dataset_id)
        if tenant is not None:
            removed += self.client.zrem(self._index(tenant), dataset_id)
        if removed:
            self.path(dataset_id).unlink(missing_ok=True)
            weights_path(self.path(dataset_id)).unlink(missing_ok=True)

    def load(self, dataset_id: str) -> np.ndarray:
        """The dataset's array, memory-mapped."""
        return load_dataset(self.data_dir, dataset_id)
