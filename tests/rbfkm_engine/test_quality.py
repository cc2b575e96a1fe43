"""Quality metrics of a partition."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import make_blobs
from sklearn.metrics import calinski_harabasz_score, davies_bouldin_score, silhouette_score

from rbfkm_engine.quality import quality_metrics


def test_metrics_match_scikit_learn_on_small_data():
    X, y = make_blobs(300, centers=3, random_state=0)
    metrics = quality_metrics(X, y, 4)
    assert metrics["sizes"] == [100, 100, 100, 0]
    assert metrics["silhouette"] == pytest.approx(silhouette_score(X, y))
    assert metrics["davies_bouldin"] == pytest.approx(davies_bouldin_score(X, y))
    assert metrics["calinski_harabasz"] == pytest.approx(calinski_harabasz_score(X, y))


def test_silhouette_is_sampled_and_seeded():
    X, y = make_blobs(5000, centers=3, random_state=0)
    a = quality_metrics(X, y, 3, random_state=1)["silhouette"]
    assert a == quality_metrics(X, y, 3, random_state=1)["silhouette"]
    assert a == pytest.approx(silhouette_score(X, y), abs=0.05)


@pytest.mark.parametrize("labels", [np.zeros(5, dtype=int), np.arange(5)])
def test_undefined_metrics_are_none(labels):
    metrics = quality_metrics(np.random.RandomState(0).rand(5, 2), labels, 5)
    assert metrics["silhouette"] is None
    assert metrics["davies_bouldin"] is None and metrics["calinski_harabasz"] is None
    assert sum(metrics["sizes"]) == 5
