"""The dataset store against a real Redis, and the one dataset loader."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
import redis

from service.datasets import DatasetStore, dataset_path, load_dataset
from service.errors import DatasetNotFound, InvalidDataset
from service.uploads import CSV, CSV_HEADER, JSON, NPY, Spooler, Upload
from tests.service.test_uploads import X, npy_bytes


async def chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


# ---- the store ---------------------------------------------------------------------------


@pytest.fixture
def store(redis_client: redis.Redis, tmp_path: Path) -> DatasetStore:
    return DatasetStore(redis_client, tmp_path / "data", prefix="t", ttl_s=60)


def spooled(store: DatasetStore, data: bytes) -> Upload:
    return asyncio.run(Spooler.under(store.data_dir, 1 << 20).spool(chunks(data)))


def test_store_round_trip(store: DatasetStore) -> None:
    meta, created = store.create(spooled(store, npy_bytes(X)), NPY, "x")
    assert created
    assert meta["n_samples"] == 2 and meta["n_features"] == 3 and meta["dtype"] == "float64"
    assert store.get(meta["id"]) == meta
    loaded = load_dataset(store.data_dir, meta["id"])
    assert isinstance(loaded, np.memmap)
    np.testing.assert_array_equal(loaded, X)
    assert list((store.data_dir / "tmp").iterdir()) == []


def test_store_same_bytes_same_name_is_deduplicated(store: DatasetStore) -> None:
    body = json.dumps({"data": X.tolist()}).encode()
    first, created = store.create(spooled(store, body), JSON, None)
    again, created_again = store.create(spooled(store, body), JSON, None)
    other, created_other = store.create(spooled(store, body), JSON, "renamed")
    assert created and not created_again and created_other
    assert again["id"] == first["id"] != other["id"]
    assert other["name"] == "renamed"


def test_the_same_csv_bytes_read_another_way_are_another_dataset(store: DatasetStore) -> None:
    # "1,2\n3,4" read with and without a header is one row or two: an upload never gets the
    # stored answer of the other reading.
    body = b"1,2\n3,4\n"
    two, _ = store.create(spooled(store, body), CSV, None)
    one, created = store.create(spooled(store, body), CSV_HEADER, None)
    assert created and one["id"] != two["id"]
    assert (two["n_samples"], one["n_samples"]) == (2, 1)
    again, created_again = store.create(spooled(store, body), CSV_HEADER, None)
    assert not created_again and again["id"] == one["id"]


def test_store_list_is_paged_newest_first(store: DatasetStore) -> None:
    ids = [store.create(spooled(store, npy_bytes(X + i)), NPY, None)[0]["id"] for i in range(3)]
    page, total = store.list(offset=0, limit=2)
    assert total == 3 and [d["id"] for d in page] == ids[::-1][:2]
    page, _ = store.list(offset=2, limit=2)
    assert [d["id"] for d in page] == ids[:1]


def test_store_delete_removes_file_index_and_dedupe(store: DatasetStore) -> None:
    body = npy_bytes(X)
    meta, _ = store.create(spooled(store, body), NPY, None)
    assert store.delete(meta["id"])
    assert not store.path(meta["id"]).exists()
    assert store.get(meta["id"]) is None and store.list()[1] == 0
    assert not store.delete(meta["id"])
    again, created = store.create(spooled(store, body), NPY, None)
    assert created and again["id"] != meta["id"]


def test_store_forgets_expired_datasets(store: DatasetStore, redis_client: redis.Redis) -> None:
    meta, _ = store.create(spooled(store, npy_bytes(X)), NPY, None)
    redis_client.delete(f"t:dataset:{meta['id']}")  # what expiry does
    assert store.list() == ([], 0)
    assert not store.path(meta["id"]).exists()


def test_store_rejection_leaves_no_files(store: DatasetStore) -> None:
    with pytest.raises(InvalidDataset):
        store.create(spooled(store, b"1,2\n3\n"), CSV, None)
    assert list((store.data_dir / "tmp").iterdir()) == []
    assert store.list()[1] == 0


@pytest.mark.parametrize("dataset_id", ["../x", ".hidden", "a/b", "", "x" * 200])
def test_ids_that_cannot_name_a_file_are_not_found(tmp_path: Path, dataset_id: str) -> None:
    with pytest.raises(DatasetNotFound):
        dataset_path(tmp_path, dataset_id)
    with pytest.raises(DatasetNotFound):
        load_dataset(tmp_path, dataset_id)


def test_loader_refuses_a_missing_dataset(store: DatasetStore) -> None:
    with pytest.raises(DatasetNotFound, match="nope"):
        store.load("nope")
    meta, _ = store.create(spooled(store, npy_bytes(X)), NPY, None)
    np.testing.assert_array_equal(store.load(meta["id"]), X)


def test_get_of_an_unsafe_id_is_none(store: DatasetStore) -> None:
    assert store.get("../etc") is None
