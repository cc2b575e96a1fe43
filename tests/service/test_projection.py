"""The 2-D picture of a fit: a seeded sample, its principal axes, entropies, storage."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from service import projection
from tests.service.conftest import blobs


def test_a_small_dataset_is_sampled_whole() -> None:
    assert projection.sample_rows(7).tolist() == list(range(7))


def test_a_large_one_gives_a_seeded_sorted_sample_of_distinct_rows() -> None:
    rows = projection.sample_rows(100_000, 5000)
    assert rows.shape == (5000,) and len(np.unique(rows)) == 5000
    assert np.all(np.diff(rows) > 0) and rows.max() < 100_000
    assert np.array_equal(rows, projection.sample_rows(100_000, 5000))
    assert not np.array_equal(rows, projection.sample_rows(100_000, 5000, seed=1))


def test_entropy_of_hard_soft_and_empty_rows() -> None:
    soft = sp.csr_matrix(
        np.array([[1.0, 0, 0], [0.5, 0.5, 0], [0, 0, 0], [1 / 3, 1 / 3, 1 / 3], [0, 0, 1.0]])
    )
    got = projection.row_entropy(soft, np.arange(5))
    expected = [0.0, np.log(2), 0.0, np.log(3), 0.0]
    np.testing.assert_allclose(got, expected, atol=1e-12)
    np.testing.assert_allclose(projection.row_entropy(soft, np.array([3, 1])), expected[3:0:-2])


def test_the_axes_are_the_principal_ones_with_a_fixed_orientation() -> None:
    rng = np.random.default_rng(0)
    # Variance 100 along (1, 1, 0)/sqrt 2, 1 along z, almost none along the third axis.
    base = rng.normal(size=(2000, 3)) * [10.0, 1.0, 0.01]
    rotation = np.array([[1, 1, 0], [0, 0, 1], [1, -1, 0]]) / np.array([[2**0.5], [1], [2**0.5]])
    sample = base @ rotation + 5.0
    mean, axes, ratio = projection.principal_axes(sample)
    np.testing.assert_allclose(mean, sample.mean(axis=0))
    np.testing.assert_allclose(np.abs(axes[0]), [2**-0.5, 2**-0.5, 0], atol=0.01)
    np.testing.assert_allclose(np.abs(axes[1]), [0, 0, 1], atol=0.01)
    assert axes[0][np.abs(axes[0]).argmax()] > 0 and axes[1][np.abs(axes[1]).argmax()] > 0
    assert ratio[0] > 0.98 and 0 < ratio[1] < 0.02 and ratio.sum() <= 1 + 1e-9


def test_wide_data_takes_the_randomized_path_to_the_same_axes() -> None:
    rng = np.random.default_rng(1)
    wide = rng.normal(size=(300, 200)) * 0.1
    wide[:, 0] += 20 * rng.normal(size=300)
    wide[:, 1] += 5 * rng.normal(size=300)
    assert min(wide.shape) > projection.EXACT_SVD_BELOW
    _, axes, ratio = projection.principal_axes(wide)
    assert abs(axes[0][0]) > 0.99 and abs(axes[1][1]) > 0.99
    assert ratio[0] > ratio[1] > 0


@pytest.mark.parametrize("shape", [(1, 3), (5, 1), (4, 2)])
def test_degenerate_data_has_zero_axes_not_nans(shape: tuple[int, int]) -> None:
    sample = np.ones(shape)
    if shape == (5, 1):
        sample = np.arange(5.0)[:, None]  # one feature: one axis, the other zero
    _, axes, ratio = projection.principal_axes(sample)
    assert np.isfinite(axes).all() and np.isfinite(ratio).all()
    if shape == (5, 1):
        assert ratio.tolist() == [pytest.approx(1.0), 0.0] and axes[1].tolist() == [0.0]
    else:
        assert ratio.tolist() == [0.0, 0.0]


def test_project_a_fit_and_store_it(tmp_path: Path) -> None:
    X = blobs(9000, 4, 3, seed=2).astype(np.float32)
    labels = np.arange(9000) % 3
    weights = np.eye(3)[labels]
    soft_row = int(projection.sample_rows(9000, 5000)[0])
    weights[soft_row, :] = [0.5, 0.5, 0.0]  # one soft point in the sample
    soft = sp.csr_matrix(weights)
    centroids = np.stack([X[labels == j].mean(axis=0) for j in range(3)])
    picture = projection.project(X, labels, soft, centroids, max_points=5000)
    assert picture.n_samples == 9000 and picture.rows.shape == (5000,)
    assert picture.points.shape == (5000, 2) and picture.centroids.shape == (3, 2)
    np.testing.assert_array_equal(picture.labels, labels[picture.rows])
    # The centroids sit at the middle of their projected clusters (projection is linear).
    for j in range(3):
        mine = picture.points[picture.labels == j].mean(axis=0)
        np.testing.assert_allclose(mine, picture.centroids[j], atol=0.1)
    assert picture.entropy[0] == pytest.approx(np.log(2))
    assert np.count_nonzero(picture.entropy) == 1

    path = tmp_path / projection.FILENAME
    projection.save(path, picture)
    back = projection.load(path)
    assert back.n_samples == 9000 and isinstance(back.n_samples, int)
    for name in ("rows", "points", "labels", "entropy", "centroids", "explained_variance_ratio"):
        np.testing.assert_array_equal(getattr(back, name), getattr(picture, name))
    body = back.as_json()
    assert len(body["points"]) == 5000 and body["rows"] == picture.rows.tolist()
    assert isinstance(body["points"][0][0], float) and isinstance(body["labels"][0], int)
