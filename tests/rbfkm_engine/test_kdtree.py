"""Each point's nearest others from a k-d tree, against every pair's distance."""

from __future__ import annotations

import numpy as np
import pytest

from rbfkm_engine.kdtree import nearest_others


@pytest.mark.parametrize("d", (1, 3, 16))
def test_nearest_others_are_those_of_every_pair(d: int) -> None:
    points = np.random.default_rng(d).normal(size=(500, d))
    distance, index = nearest_others(points, 7)
    every = np.sqrt(((points[:, None, :] - points[None, :, :]) ** 2).sum(axis=2))
    assert index.dtype == np.int64 and index.shape == (500, 7)
    np.testing.assert_array_equal(index, np.argsort(every, axis=1, kind="stable")[:, :7])
    np.testing.assert_allclose(distance, np.sort(every, axis=1)[:, :7], rtol=1e-12, atol=1e-12)
    assert (index[:, 0] == np.arange(500)).all()  # each its own first
