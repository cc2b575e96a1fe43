"""Shared data for the engine tests: small, deterministic, and with known structure."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from hypothesis import settings
from sklearn.datasets import load_digits, make_blobs, make_circles, make_moons

from rbfkm_engine.context import FitContext
from rbfkm_engine.passes import Workspace
from rbfkm_engine.progress import Budget, Callback


def examples(n: int) -> int:
    """Hypothesis examples for a property test: ``n`` normally (keeps the suite fast), more
    when the loaded profile asks for more (``HYPOTHESIS_PROFILE=explore``)."""
    return max(n, settings().max_examples) if settings().max_examples > 100 else n


@dataclass(frozen=True)
class Dataset:
    """A data set with its ground-truth labels and a natural number of clusters."""

    name: str
    X: np.ndarray
    y: np.ndarray
    k: int


def make_spirals(n: int = 200, turns: float = 1.5, noise: float = 0.05, seed: int = 0) -> Dataset:
    """Two interleaved Archimedean spirals in the plane."""
    rng = np.random.default_rng(seed)
    half = n // 2
    t = np.sqrt(rng.uniform(0.05, 1.0, half)) * turns * 2 * np.pi
    arm = np.stack([t * np.cos(t), t * np.sin(t)], axis=1) / (turns * 2 * np.pi)
    X = np.concatenate([arm, -arm]) + noise * rng.standard_normal((2 * half, 2))
    y = np.concatenate([np.zeros(half, dtype=np.int64), np.ones(half, dtype=np.int64)])
    return Dataset("spirals", X.astype(np.float64), y, 2)


def well_separated_blobs(n: int = 300, k: int = 4, d: int = 2, seed: int = 0) -> Dataset:
    """Blobs whose centres are far apart compared with their spread: one right answer."""
    if d == 2:
        # Centres on a ring of radius 10, spread 0.5: the blobs are far apart.
        angles = 2 * np.pi * np.arange(k) / k
        centers = 10.0 * np.stack([np.cos(angles), np.sin(angles)], axis=1)
    else:
        rng = np.random.default_rng(seed)
        centers = rng.uniform(-10.0, 10.0, (k, d))
    X, y = make_blobs(n_samples=n, centers=centers, cluster_std=0.5, random_state=seed)
    return Dataset("blobs", X.astype(np.float64), y.astype(np.int64), k)


DATASET_NAMES = ("blobs", "moons", "circles", "spirals")


def load_dataset(name: str) -> Dataset:
    """One of the shape data sets by name (small: about 200-300 points in 2-D)."""
    if name == "blobs":
        return well_separated_blobs()
    if name == "moons":
        X, y = make_moons(n_samples=200, noise=0.05, random_state=0)
        return Dataset("moons", X.astype(np.float64), y.astype(np.int64), 2)
    if name == "circles":
        X, y = make_circles(n_samples=200, noise=0.05, factor=0.5, random_state=0)
        return Dataset("circles", X.astype(np.float64), y.astype(np.int64), 2)
    if name == "spirals":
        return make_spirals()
    raise KeyError(name)


@pytest.fixture(params=DATASET_NAMES)
def shape_dataset(request: pytest.FixtureRequest) -> Dataset:
    """Each of blobs, two moons, circles and spirals in turn."""
    return load_dataset(request.param)


@pytest.fixture
def blobs() -> Dataset:
    return well_separated_blobs()


@pytest.fixture
def moons() -> Dataset:
    return load_dataset("moons")


@pytest.fixture
def circles() -> Dataset:
    return load_dataset("circles")


@pytest.fixture
def spirals() -> Dataset:
    return load_dataset("spirals")


@pytest.fixture(scope="session")
def digits() -> Dataset:
    """scikit-learn's digits (1797 x 64, bundled with the package), scaled to [0, 1]."""
    X, y = load_digits(return_X_y=True)
    return Dataset("digits", (X / 16.0).astype(np.float64), y.astype(np.int64), 10)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(12345)


@pytest.fixture
def make_blobs_data() -> Callable[..., Dataset]:
    """A factory for well-separated blobs of a chosen size."""
    return well_separated_blobs


def blob_tensor(
    centres: list[list[float]], n_per: int = 60, spread: float = 0.3, seed: int = 0
) -> torch.Tensor:
    """Gaussian blobs of ``n_per`` points around each of ``centres`` (float64, in order)."""
    rng = np.random.default_rng(seed)
    parts = [np.asarray(c) + spread * rng.standard_normal((n_per, len(c))) for c in centres]
    return torch.from_numpy(np.concatenate(parts))


def workspace_on(
    path: str, X: torch.Tensor, w: torch.Tensor | None, k: int, chunk_size: int
) -> Workspace:
    """A workspace whose passes run on ``path``: ``"kernel"`` (the test is skipped where
    the kernel did not build) or ``"torch"`` (the kernel switched off)."""
    ws = Workspace(X, w, k, chunk_size=chunk_size)
    if path == "kernel" and ws.kernel is None:
        pytest.skip("the kernel did not build here")
    if path == "torch":
        ws.kernel = None
    return ws


def make_context(
    X: torch.Tensor,
    k: int,
    tol: float = 1e-12,
    max_iter: int = 100,
    chunk_size: int = 64,
    *,
    sample_weight: torch.Tensor | None = None,
    callback: Callback | None = None,
) -> FitContext:
    """One run's context on ``X`` (blocks of ``chunk_size`` rows), seeded."""
    return FitContext(
        Workspace(X, sample_weight, k, chunk_size),
        Budget(max_iter, callback),
        tol,
        torch.Generator().manual_seed(0),
    )
