"""ResultStore: round trip with a real fit, atomic writes, per-attempt isolation, deletion."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse

from rbfkm_engine import RBFKMeans
from service.results import ResultNotFound, ResultStore


def _blobs(n: int = 120, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 0.0], [6.0, 0.0], [0.0, 6.0]])
    return (centres[rng.integers(0, 3, n)] + rng.normal(scale=0.5, size=(n, 2))).astype(np.float32)


@pytest.fixture(scope="module")
def fitted() -> tuple[RBFKMeans, np.ndarray]:
    X = _blobs()
    return RBFKMeans(n_clusters=3, random_state=0, device="cpu").fit(X), X


@pytest.fixture
def store(tmp_path: Path) -> ResultStore:
    return ResultStore(tmp_path)


def test_round_trip(store: ResultStore, fitted: tuple[RBFKMeans, np.ndarray]) -> None:
    model, X = fitted
    meta = store.save("job1", model, X)
    assert meta["attempt"] == 1
    assert (meta["n_samples"], meta["n_features"], meta["n_clusters"]) == (120, 2, 3)
    assert meta["inertia"] == pytest.approx(model.inertia_)
    assert store.exists("job1")

    summary = store.summary("job1")
    np.testing.assert_allclose(summary["centroids"], model.cluster_centers_, rtol=1e-6)
    assert summary["inertia"] == pytest.approx(model.inertia_)
    assert summary["n_iter"] == model.n_iter_
    assert summary["sigma"] == pytest.approx(model.sigma_)
    assert summary["assignment"] == "entmax15"
    assert (summary["n_samples"], summary["n_features"]) == (120, 2)
    assert len(summary["history"]) == len(model.history_)
    assert set(summary["history"][0]) >= {"sigma", "objective", "inertia", "iterations"}

    np.testing.assert_array_equal(store.labels("job1"), model.labels_)
    assert store.labels("job1").dtype == np.int64
    assignments = store.assignments("job1")
    assert isinstance(assignments, scipy.sparse.csr_matrix)
    assert (assignments != model.soft_assign(X)).nnz == 0
    direct = scipy.sparse.load_npz(store.assignments_path("job1"))
    assert direct.shape == (120, 3)

    restored = store.model("job1")
    np.testing.assert_array_equal(restored.predict(X), model.predict(X))
    assert restored.sigma_ == pytest.approx(model.sigma_)


def test_missing_result_raises_a_key_error(store: ResultStore) -> None:
    assert not store.exists("nope")
    for read in (store.summary, store.labels, store.assignments, store.assignments_path):
        with pytest.raises(ResultNotFound, match="nope"):
            read("nope")
    with pytest.raises(KeyError):
        store.model("nope")
    assert store.delete("nope") is False


def test_unsafe_ids_never_become_paths(store: ResultStore, tmp_path: Path) -> None:
    for bad in ("../escape", "a/b", "", ".hidden"):
        assert not store.exists(bad)
        with pytest.raises(ResultNotFound):
            store.summary(bad)
        assert store.delete(bad) is False
    assert sorted(p.name for p in tmp_path.iterdir()) == []


class _BrokenModel:
    """A fitted model whose soft assignments blow up half way through a save."""

    def __init__(self, model: RBFKMeans) -> None:
        self._model = model

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def soft_assign(self, X: Any) -> Any:
        raise MemoryError("out of memory while writing")


def test_failed_save_leaves_nothing_visible(
    store: ResultStore, fitted: tuple[RBFKMeans, np.ndarray]
) -> None:
    model, X = fitted
    with pytest.raises(MemoryError):
        store.save("job1", _BrokenModel(model), X)
    assert not store.exists("job1")
    with pytest.raises(ResultNotFound):
        store.summary("job1")
    assert list(store.job_dir("job1").iterdir()) == []  # no staging left behind


def test_failed_save_keeps_the_previous_result(
    store: ResultStore, fitted: tuple[RBFKMeans, np.ndarray]
) -> None:
    model, X = fitted
    store.save("job1", model, X, attempt=1)
    with pytest.raises(MemoryError):
        store.save("job1", _BrokenModel(model), X, attempt=2)
    assert store.summary("job1")["attempt"] == 1
    np.testing.assert_array_equal(store.labels("job1"), model.labels_)


def test_attempts_never_clobber_each_other(
    store: ResultStore, fitted: tuple[RBFKMeans, np.ndarray]
) -> None:
    model, X = fitted
    other = RBFKMeans(n_clusters=2, random_state=0, device="cpu").fit(X)
    store.save("job1", model, X, attempt=2)  # the winner
    store.save("job1", other, X, attempt=1)  # a stale worker finishing late
    assert store.summary("job1")["attempt"] == 2
    assert store.summary("job1")["n_clusters"] == 3
    store.discard("job1", 1)  # the stale worker cleans up its own files only
    assert store.summary("job1")["attempt"] == 2
    store.save("job1", other, X, attempt=1)
    store.prune("job1", keep=2)
    assert sorted(p.name for p in store.job_dir("job1").iterdir()) == ["attempt-2"]
    store.discard("job1", 2)
    assert not store.exists("job1")
    assert not store.job_dir("job1").exists()


def test_delete_removes_every_file(
    store: ResultStore, fitted: tuple[RBFKMeans, np.ndarray]
) -> None:
    model, X = fitted
    store.save("job1", model, X)
    store.save("job2", model, X)
    assert store.delete("job1") is True
    assert not store.exists("job1")
    assert not store.job_dir("job1").exists()
    assert store.exists("job2")
    assert store.delete("job1") is False


def test_purge_drops_results_past_retention(
    store: ResultStore, fitted: tuple[RBFKMeans, np.ndarray]
) -> None:
    model, X = fitted
    store.save("old", model, X)
    store.save("new", model, X)
    week_ago = time.time() - 7 * 24 * 3600
    os.utime(store.job_dir("old"), (week_ago, week_ago))
    assert store.purge(24 * 3600) == 1
    assert not store.exists("old")
    assert store.exists("new")


def test_summary_is_strict_json(store: ResultStore, fitted: tuple[RBFKMeans, np.ndarray]) -> None:
    model, X = fitted
    odd = RBFKMeans.from_centers(model.cluster_centers_, device="cpu")
    odd.labels_ = model.labels_
    odd.inertia_ = float(model.inertia_)
    odd.history_ = [{"sigma": np.float32(1.5), "objective": float("nan"), "iterations": 3}]
    store.save("job1", odd, X)
    text = (store.result_dir("job1") / "summary.json").read_text()
    parsed = json.loads(text, parse_constant=lambda name: pytest.fail(f"non-JSON {name}"))
    assert parsed["history"] == [{"sigma": 1.5, "objective": None, "iterations": 3}]


def test_the_projection_is_stored_with_the_result(
    store: ResultStore, fitted: tuple[RBFKMeans, np.ndarray]
) -> None:
    model, X = fitted
    meta = store.save("job1", model, X)
    picture = store.projection("job1")
    assert picture.n_samples == 120 and picture.rows.tolist() == list(range(120))
    np.testing.assert_array_equal(picture.labels, model.labels_)
    assert picture.centroids.shape == (3, 2)
    files = sorted(p.name for p in store.result_dir("job1").iterdir())
    assert "projection.npz" in files
    assert meta["stored_bytes"] == sum(
        (store.result_dir("job1") / name).stat().st_size for name in files
    )
