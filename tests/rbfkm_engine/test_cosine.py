"""metric="cosine": spherical K-Means, annealed from the sphere's critical temperature."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rbfkm_engine import RBFKMeans
from rbfkm_engine.temperature import sphere_lambda


def two_directions(n: int = 4000, seed: int = 0) -> np.ndarray:
    """Rows at angles +-0.5 rad in a plane (spread 0.1), slightly out of it, any length."""
    rng = np.random.RandomState(seed)
    angle = 0.5 * rng.choice([-1.0, 1.0], size=n) + 0.1 * rng.randn(n)
    rows = np.stack([np.cos(angle), np.sin(angle), 0.05 * rng.randn(n)], axis=1)
    return rows * rng.uniform(0.5, 4.0, size=(n, 1))


def predicted(X: np.ndarray) -> float:
    """The derived critical temperature of softmax (g = 1), in units of 1 - cos."""
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    mean = torch.from_numpy(U.mean(axis=0))
    cov = torch.from_numpy(np.cov(U.T, bias=True))
    return sphere_lambda(cov, mean)


def fixed_point_separation(U: np.ndarray, sigma: float, iterations: int = 300) -> float:
    """Run the spherical softmax fixed-point map from two centres a hair apart along the
    split direction; returns how far apart they end."""
    mean = U.mean(axis=0)
    u = mean / np.linalg.norm(mean)
    tangent = np.array([0.0, 1.0, 0.0]) - u[1] * u
    tangent /= np.linalg.norm(tangent)
    C = np.stack([u + 1e-3 * tangent, u - 1e-3 * tangent])
    for _ in range(iterations):
        scores = U @ C.T / sigma
        R = np.exp(scores - scores.max(axis=1, keepdims=True))
        R /= R.sum(axis=1, keepdims=True)
        C = R.T @ U
        C /= np.linalg.norm(C, axis=1, keepdims=True)
    return float(np.linalg.norm(C[0] - C[1]))


def test_the_collapsed_state_loses_stability_at_the_derived_temperature():
    X = two_directions()
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    sigma_c = predicted(X)
    assert fixed_point_separation(U, 1.1 * sigma_c) < 1e-4  # above: falls back together
    assert fixed_point_separation(U, 0.9 * sigma_c) > 0.1  # below: splits


@pytest.mark.parametrize(("assignment", "gain"), [("softmax", 1.0), ("entmax15", math.sqrt(2))])
def test_annealing_starts_above_and_splits_near_the_derived_temperature(assignment, gain):
    X = two_directions()
    sigma_c = gain * predicted(X)
    km = RBFKMeans(2, assignment=assignment, metric="cosine", cooling=0.95, random_state=0)
    km.set_params(device="cpu", max_iter=2000).fit(X)
    first = km.k_path_[0]
    assert first.sigma_appear == pytest.approx(1.1 * sigma_c, rel=1e-3)
    # A split is seen once the pair is 10% of its radius apart: a few temperatures late.
    assert 0.5 * sigma_c < first.sigma_split < sigma_c


def test_cosine_fit_is_spherical_kmeans():
    X = two_directions(1000)
    km = RBFKMeans(2, metric="cosine", random_state=0, device="cpu").fit(X)
    np.testing.assert_allclose(np.linalg.norm(km.cluster_centers_, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(km.labels_, km.predict(X))
    np.testing.assert_array_equal(km.labels_, km.predict(X * 7.0))  # only directions count
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    cos = U @ km.cluster_centers_.T
    np.testing.assert_array_equal(km.labels_, cos.argmax(axis=1))
    inertia = float((1.0 - cos.max(axis=1)).sum())
    assert km.inertia_ == pytest.approx(inertia, rel=1e-4)
    np.testing.assert_allclose(km.transform(X[:5]), 1.0 - cos[:5], atol=1e-5)
    # Each centre is its cluster's mean direction: a spherical K-Means fixed point.
    for j in range(2):
        mean = U[km.labels_ == j].sum(axis=0)
        np.testing.assert_allclose(km.cluster_centers_[j], mean / np.linalg.norm(mean), atol=1e-4)


def test_cosine_soft_assignments_and_from_centers():
    X = two_directions(500)
    km = RBFKMeans(2, metric="cosine", random_state=0, device="cpu").fit(X)
    soft = km.soft_assign(X, sigma=0.05).toarray()
    np.testing.assert_allclose(soft.sum(axis=1), 1.0, rtol=1e-5)
    served = RBFKMeans.from_centers(km.cluster_centers_ * 3.0, metric="cosine")
    np.testing.assert_array_equal(served.predict(X), km.labels_)


def test_rows_without_direction_are_refused():
    X = two_directions(50)
    X[7] = 0.0
    with pytest.raises(ValueError, match=r"row 7 .* norm 0"):
        RBFKMeans(2, metric="cosine", device="cpu").fit(X)


def test_euclidean_is_the_default_and_cosine_differs():
    X = two_directions(500)
    assert RBFKMeans().metric == "euclidean"
    flat = RBFKMeans(2, random_state=0, device="cpu").fit(X)
    sphere = RBFKMeans(2, metric="cosine", random_state=0, device="cpu").fit(X)
    assert not np.allclose(flat.cluster_centers_, sphere.cluster_centers_)
