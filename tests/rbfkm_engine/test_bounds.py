"""rbfkm_engine/bounds.py and the kernel's bounded passes: Lloyd with Hamerly's bounds labels
every row as Lloyd without them, keeps the same sums and inertia, and leaves nearest
distances that are filled in when read."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
import torch

from rbfkm_engine import RBFKMeans, native, passes
from rbfkm_engine.bounds import Bounds, half_gaps, rounding_margin

needs_compiler = pytest.mark.skipif(
    shutil.which(os.environ.get("CC", "cc")) is None, reason="needs a C compiler"
)


def test_half_gaps_are_half_the_distance_to_the_nearest_other_centre(monkeypatch) -> None:
    import rbfkm_engine.bounds as bounds

    monkeypatch.setattr(bounds, "GAP_BLOCK", 7)  # several blocks
    C = torch.randn(30, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    D = torch.cdist(C, C).fill_diagonal_(float("inf"))
    torch.testing.assert_close(half_gaps(C), D.min(dim=1).values / 2)
    assert half_gaps(C[:1]).isinf().all()


def test_drift_gives_each_centre_the_largest_move_of_the_others() -> None:
    C = torch.zeros(4, 2, dtype=torch.float64)
    b = Bounds(torch.ones(10, dtype=torch.float64))
    b.start(C)
    moved = C.clone()
    moved[1, 0], moved[3, 1] = 3.0, 2.0
    drift = b.drift(moved)
    assert drift.own.tolist() == [0.0, 3.0, 0.0, 2.0]
    assert drift.others.tolist() == [3.0, 2.0, 3.0, 3.0]
    assert torch.equal(b.centres, moved)


def test_the_margin_grows_with_the_norms_and_shrinks_with_precision() -> None:
    small = rounding_margin(1.0, 1.0, 3, torch.float32)
    assert 0 < small < rounding_margin(100.0, 100.0, 3, torch.float32)
    assert rounding_margin(1.0, 1.0, 3, torch.float64) < small * 1e-3


@needs_compiler
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("weighted", [False, True])
def test_lloyd_with_bounds_is_lloyd(
    dtype: type, weighted: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sklearn.datasets import make_blobs

    X, _ = make_blobs(5000, n_features=3, centers=25, cluster_std=2.0, random_state=2)
    X = X.astype(dtype)
    w = np.random.default_rng(0).uniform(0.1, 2.0, 5000).astype(dtype) if weighted else None
    bounded = RBFKMeans(25, assignment="hard", random_state=0, tol=0.0, max_iter=60)
    bounded.fit(X, sample_weight=w)
    monkeypatch.setattr(passes.Workspace, "_lloyd_bounds", lambda self, C, direct: None)
    plain = RBFKMeans(25, assignment="hard", random_state=0, tol=0.0, max_iter=60)
    plain.fit(X, sample_weight=w)
    assert np.array_equal(bounded.labels_, plain.labels_)
    np.testing.assert_allclose(bounded.cluster_centers_, plain.cluster_centers_, rtol=1e-5)
    assert bounded.n_iter_ == plain.n_iter_
    # Every Lloyd iteration's inertia, the bounded ones' from the sums.
    for a, b in zip(bounded.history_, plain.history_, strict=True):
        assert a["inertia"] == pytest.approx(b["inertia"], rel=1e-6)


@needs_compiler
def test_kept_rows_distances_are_filled_in_when_read() -> None:
    gen = torch.Generator().manual_seed(1)
    X = torch.randn(4000, 3, generator=gen)
    ws = passes.Workspace(X, None, 12, 1024)
    C = X[:12].clone()
    for iteration in range(4):
        num, den, _ = ws.step(C, 0.0, "hard", warm=iteration > 0)
        C_last = C
        C, _ = ws.update(C, num, den)
    assert ws._bounds is not None and ws._bounds.stale  # the last pass kept rows
    expected = (X - C_last[ws.labels]).square().sum(dim=1)
    torch.testing.assert_close(ws.min_dist, expected, rtol=1e-5, atol=1e-5)
    assert not ws._bounds.stale
    assert torch.equal(ws.labels, torch.cdist(X, C_last).argmin(dim=1))


@needs_compiler
def test_unmoved_centres_relabel_almost_no_row() -> None:
    gen = torch.Generator().manual_seed(2)
    X = torch.randn(20000, 4, generator=gen)
    C = torch.randn(16, 4, generator=gen)
    kernel = native.lloyd_kernel(X, None)
    assert kernel is not None
    centres = kernel.centres(C, passes.row_reduction_width(16, C.device))
    b = Bounds(X.square().sum(dim=1))
    b.start(C)
    labels = torch.zeros(20000, dtype=torch.long)
    min_dist = torch.empty(20000)
    num, den = torch.zeros(16, 4, dtype=torch.float64), torch.zeros(16, dtype=torch.float64)
    rows = native.Rows(X, X.square().sum(dim=1), None, labels, min_dist)
    first = kernel.bounded_block(rows, centres, (b.upper, b.lower), None, b.margin, num, den)
    assert first == 20000
    assert torch.equal(labels, torch.cdist(X, C).argmin(dim=1))
    drift = b.drift(C.clone())
    again = kernel.bounded_block(rows, centres, (b.upper, b.lower), drift, b.margin, num, den)
    assert again <= 2000  # only rows within a few margins of a tie
    assert torch.equal(labels, torch.cdist(X, C).argmin(dim=1))
    torch.testing.assert_close(den.sum(), torch.tensor(20000.0, dtype=torch.float64))
