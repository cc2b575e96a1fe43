"""The k path: the counts of centres a grown fit passes through while annealing."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from sklearn.datasets import make_blobs

from rbfkm_engine import RBFKMeans
from rbfkm_engine.kpath import PathRecorder


@pytest.fixture(scope="module")
def blobs() -> np.ndarray:
    X, _ = make_blobs(1500, centers=4, cluster_std=0.4, random_state=3)
    return X


def test_path_counts_grow_with_falling_temperatures(blobs):
    km = RBFKMeans(6, random_state=0, device="cpu").fit(blobs)
    path = km.k_path_
    ks = [record.k for record in path]
    assert ks[0] == 1 and ks[-1] == 6 and ks == sorted(set(ks))
    assert path[-1].sigma_split is None
    for record in path[:-1]:
        assert record.sigma_appear > record.sigma_split > 0
    # Counts may be skipped (several pairs split at one temperature) or reached first
    # through a merge, so appearances need not follow the previous count's split.


def test_settled_path_inertias_fall(blobs):
    km = RBFKMeans("auto", max_clusters=6, random_state=0, device="cpu").fit(blobs)
    inertias = [record.inertia for record in km.k_path_]
    assert all(a >= b for a, b in itertools.pairwise(inertias))
    one = km.k_path_[0]
    total = float(((blobs - blobs.mean(axis=0)) ** 2).sum())
    assert one.inertia == pytest.approx(total, rel=1e-5)
    assert one.centers.shape == (1, 2)
    chosen = next(record for record in km.k_path_ if record.k == km.n_clusters_)
    assert chosen.inertia >= km.inertia_ * (1 - 1e-6)


def test_auto_fills_in_the_counts_annealing_skipped():
    # Five overlapping blobs: pairs split at one temperature and annealing skips counts.
    X, _ = make_blobs(3000, centers=5, cluster_std=0.6, random_state=1)
    km = RBFKMeans("auto", max_clusters=10, random_state=0, device="cpu").fit(X)
    assert [record.k for record in km.k_path_] == list(range(1, 11))
    skipped = [r for r in km.k_path_ if r.sigma_appear is None]
    assert skipped, "this set was chosen because annealing skips counts on it"
    for record in km.k_path_:
        assert record.inertia is not None and record.centers.shape == (record.k, 2)
        assert (record.sigma_appear is None) == (record.sigma_split is None) or record.k == 10
    assert km.n_clusters_ == 5


def test_a_fixed_k_path_is_left_as_annealed_and_ends_on_the_fit(blobs):
    km = RBFKMeans(6, random_state=0, device="cpu").fit(blobs)
    *annealed, last = km.k_path_
    assert all(record.inertia is None for record in annealed)
    assert all(record.centers.shape == (record.k, 2) for record in annealed)
    assert last.inertia == km.inertia_
    np.testing.assert_allclose(last.centers, km.cluster_centers_, rtol=1e-5)


def test_path_is_in_the_data_units(blobs):
    small = RBFKMeans(5, random_state=0, device="cpu").fit(blobs)
    big = RBFKMeans(5, random_state=0, device="cpu").fit(blobs * 2.0**50)
    for a, b in zip(small.k_path_, big.k_path_, strict=True):
        assert b.k == a.k
        assert b.sigma_appear == pytest.approx(a.sigma_appear * 2.0**100, rel=1e-4)
        np.testing.assert_allclose(b.centers, a.centers * 2.0**50, rtol=1e-4)


def test_the_path_leaves_the_fit_unchanged(blobs):
    km = RBFKMeans(4, random_state=0, device="cpu").fit(blobs)
    np.testing.assert_array_equal(km.labels_, km.predict(blobs))


def test_a_fit_from_an_init_array_has_one_count(blobs):
    init = blobs[:3]
    km = RBFKMeans(3, init=init, random_state=0, device="cpu").fit(blobs)
    (record,) = km.k_path_
    assert record.k == 3 and record.sigma_appear is None and record.sigma_split is None
    assert record.inertia == pytest.approx(km.inertia_, rel=1e-5)


def test_recorder_keeps_first_appearance_and_split():
    recorder = PathRecorder(limit=2)
    recorder.start(10.0, 1)
    recorder.change(8.0, torch.zeros(1, 2), 1)  # no change
    recorder.change(5.0, torch.zeros(1, 2), 2)
    recorder.change(3.0, torch.ones(2, 2), 4)  # skips 3; 4 keeps no snapshot (limit)
    counts = recorder.counts(torch.zeros(5, 2), up_to=10)
    assert [(c.k, c.sigma_appear, c.sigma_split) for c in counts] == [
        (1, 10.0, 5.0),
        (2, 5.0, 3.0),
        (5, None, None),
    ]
    assert counts[1].centres is not None and counts[2].centres is None


def test_auto_finds_well_separated_clusters(blobs):
    km = RBFKMeans("auto", max_clusters=8, random_state=0, device="cpu").fit(blobs)
    assert km.n_clusters_ == 4
    assert km.cluster_centers_.shape == (4, 2)
    assert km.n_clusters == "auto"
    assert [r.k for r in km.k_path_][-1] <= 8
    np.testing.assert_array_equal(km.labels_, km.predict(blobs))


def test_auto_with_weights_counts_them_as_repeats(blobs):
    w = np.ones(len(blobs))
    w[:10] = 3.0
    km = RBFKMeans("auto", max_clusters=6, random_state=0, device="cpu")
    km.fit(blobs, sample_weight=w)
    assert km.n_clusters_ == 4


@pytest.mark.parametrize("params", [{"init": np.zeros((2, 2))}, {"assignment": "hard"}])
def test_auto_needs_a_grown_annealed_fit(blobs, params):
    with pytest.raises(ValueError, match="n_clusters='auto'"):
        RBFKMeans("auto", device="cpu", **params).fit(blobs)


def test_auto_on_fewer_points_than_max_clusters():
    X = np.array([[0.0, 0.0], [0.1, 0.0], [5.0, 5.0], [5.1, 5.0]])
    km = RBFKMeans("auto", max_clusters=10, random_state=0, device="cpu").fit(X)
    assert 1 <= km.n_clusters_ <= 4


@pytest.mark.parametrize("value", ["two", 0, 1.5])
def test_bad_n_clusters_names_auto(value):
    with pytest.raises(ValueError, match="'auto'"):
        RBFKMeans(value, device="cpu").fit(np.zeros((4, 2)))
