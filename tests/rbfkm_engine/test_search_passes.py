"""The passes that price the local search's moves."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rbfkm_engine.passes import Workspace
from rbfkm_engine.search_passes import cluster_halves
from rbfkm_engine.swaps import split_gain

from .test_swaps import sse


def test_cluster_halves_find_the_two_blobs_of_one_cluster() -> None:
    rng = np.random.default_rng(0)
    left = rng.normal(size=(200, 3)) * 0.3 + [-4.0, 1.0, 0.0]
    right = rng.normal(size=(100, 3)) * 0.3 + [4.0, -1.0, 0.0]
    far = rng.normal(size=(50, 3)) * 0.3 + [0.0, 30.0, 0.0]
    X = torch.as_tensor(np.concatenate([left, right, far]))
    fp = Workspace(X, None, 2, chunk_size=64)
    C = torch.stack([X[:300].mean(0), X[300:].mean(0)])
    fp.hard_labels(C)
    halves, mass = cluster_halves(fp, C, torch.Generator().manual_seed(0))
    found = sorted(halves[0].tolist())
    torch.testing.assert_close(
        torch.tensor(found),
        torch.tensor(sorted([left.mean(0).tolist(), right.mean(0).tolist()])),
        atol=1e-9,
        rtol=0.0,
    )
    assert sorted(mass[0].tolist()) == [100.0, 200.0]
    gain = split_gain(mass, halves)
    labels = np.r_[np.zeros(300, dtype=int), np.ones(50, dtype=int)]
    parts = np.r_[np.zeros(200, dtype=int), np.ones(100, dtype=int), np.full(50, 2)]
    ones = np.ones(350)
    assert float(gain[0]) == pytest.approx(
        sse(X.numpy(), labels, ones, 2) - sse(X.numpy(), parts, ones, 3)
    )
