"""The pieces of benchmarks/choose_k.py and benchmarks/cosine.py, on small data."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from sklearn.datasets import make_blobs

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import choose_k
import cosine


def test_every_method_finds_three_clear_blobs() -> None:
    X, _ = make_blobs(600, centers=3, cluster_std=0.3, random_state=0)
    picks, seconds = choose_k.rbfkm_choices(X, 6, 0)
    methods = {f"rbfkm-{criterion}" for criterion in choose_k.CRITERIA}
    assert set(picks) == set(seconds) == methods
    assert picks["rbfkm-gap"] == picks["rbfkm-silhouette"] == picks["rbfkm-bic"] == 3
    assert all(t > 0 for t in seconds.values())
    assert choose_k.sklearn_silhouette(X, 6, 0)[0] == 3
    assert choose_k.sklearn_gap(X, 6, 0, refs=3)[0] == 3


def test_spherical_lloyd_ends_on_unit_mean_directions() -> None:
    X, _y = cosine.directions(2000, 16, 4, seed=0)
    U = cosine.unit(X)
    C = cosine.spherical_lloyd(U, 4, seed=0)
    np.testing.assert_allclose(np.linalg.norm(C, axis=1), 1.0)
    labels = (U @ C.T).argmax(axis=1)
    for j in range(4):
        mean = U[labels == j].sum(axis=0)
        np.testing.assert_allclose(C[j], mean / np.linalg.norm(mean), atol=1e-9)
