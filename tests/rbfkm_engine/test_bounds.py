"""rbfkm_engine/bounds.py and the kernel's bounded passes: Lloyd with Hamerly's bounds labels
every row as Lloyd without them, keeps the same sums and inertia, and leaves nearest
distances that are filled in when read; the passes keep bounds only while they pay."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
import torch

from rbfkm_engine import RBFKMeans, native, passes
from rbfkm_engine.bounds import (
    BOUNDS_PAUSE,
    BOUNDS_PAUSE_MAX,
    Bounds,
    BoundsUse,
    half_gaps,
    near_drift,
    rounding_margin,
)
from rbfkm_engine.native import ADD, MOVE

needs_compiler = pytest.mark.skipif(
    shutil.which(os.environ.get("CC", "cc")) is None, reason="needs a C compiler"
)


@pytest.fixture
def kept_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every Lloyd pass keeps bounds, whether or not they pay (the tests of what the
    bounded passes do)."""
    monkeypatch.setattr(BoundsUse, "wanted", lambda self: True)


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


@needs_compiler
@pytest.mark.parametrize("k", (1, 2, 17, 300))
@pytest.mark.parametrize("dtype", (torch.float32, torch.float64))
def test_the_kernels_drift_bounds_the_exact_moves_and_gaps(k: int, dtype: torch.dtype) -> None:
    """The kernel's moves are the exact ones rounded up and its half gaps the exact ones
    rounded down (less the margin), in float64; with 300 centres the gaps come from
    :func:`half_gaps` instead, as the torch ops give them."""
    gen = torch.Generator().manual_seed(k)
    X = torch.randn(64, 5, generator=gen, dtype=dtype)
    C = torch.randn(k, 5, generator=gen, dtype=dtype) * 3
    moved = C + torch.randn(k, 5, generator=gen, dtype=dtype) * 0.1
    kernel = native.lloyd_kernel(X, None)
    assert kernel is not None
    b, reference = Bounds(X.square().sum(dim=1), kernel), Bounds(X.square().sum(dim=1))
    for bounds in (b, reference):
        bounds.start(C)
    drift, expected = b.drift(moved), reference.drift(moved)
    own = (moved.double() - C.double()).norm(dim=1)
    assert (drift.own.double() >= own).all()
    torch.testing.assert_close(drift.own, expected.own)
    torch.testing.assert_close(drift.others, expected.others)
    top = own.topk(2).values if k > 1 else torch.zeros(2, dtype=torch.float64)
    assert (drift.others.double() >= torch.where(own == top[0], top[1], top[0])).all()
    if k <= 17:
        gaps = torch.cdist(moved.double(), moved.double()).fill_diagonal_(float("inf"))
        exact = gaps.min(dim=1).values / 2 - b.margin
        assert (drift.half_gap.double() <= exact).all()
    torch.testing.assert_close(drift.half_gap, expected.half_gap)
    assert torch.equal(b.centres, moved)


def test_near_drift_is_the_largest_move_in_each_list() -> None:
    own = torch.tensor([0.5, 0.0, 2.0, 0.25])
    order = torch.tensor([[1, 3], [0, 3], [3, -1], [-1, -1]], dtype=torch.int32)
    assert near_drift(own, order).tolist() == [0.25, 0.5, 0.25, 0.0]


def test_the_margin_grows_with_the_norms_and_shrinks_with_precision() -> None:
    small = rounding_margin(1.0, 1.0, 3, torch.float32)
    assert 0 < small < rounding_margin(100.0, 100.0, 3, torch.float32)
    assert rounding_margin(1.0, 1.0, 3, torch.float64) < small * 1e-3


@needs_compiler
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("lists", [None, 8, 32])
@pytest.mark.usefixtures("kept_bounds")
def test_lloyd_with_bounds_is_lloyd(
    dtype: type, weighted: bool, lists: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With neighbour lists (``lists`` centres each: shorter than the others, so some rows
    fall back to every centre, or padded past them) or without."""
    from sklearn.datasets import make_blobs

    if lists is not None:
        monkeypatch.setattr(passes, "NEIGHBOUR_MIN_K", 2)
        monkeypatch.setattr(passes, "NEIGHBOUR_WIDTH", lists)
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
@pytest.mark.usefixtures("kept_bounds")
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
    cold = (num, den, ADD)
    first, _, _ = kernel.bounded_block(rows, centres, (b.upper, b.lower), None, b.margin, cold)
    assert first == 20000
    assert torch.equal(labels, torch.cdist(X, C).argmin(dim=1))
    drift = b.drift(C.clone())
    warm = (num, den, MOVE)
    again, _, _ = kernel.bounded_block(rows, centres, (b.upper, b.lower), drift, b.margin, warm)
    assert again <= 2000  # only rows within a few margins of a tie
    assert torch.equal(labels, torch.cdist(X, C).argmin(dim=1))
    torch.testing.assert_close(den.sum(), torch.tensor(20000.0, dtype=torch.float64))


@needs_compiler
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rows_are_relabelled_from_their_centres_neighbour_lists(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(3)
    X = torch.rand(20000, 3, generator=gen, dtype=torch.float64).to(dtype)
    C = X[:300].clone()
    kernel = native.lloyd_kernel(X, None)
    assert kernel is not None
    width = passes.row_reduction_width(300, C.device)
    x_sq = X.square().sum(dim=1)
    b = Bounds(x_sq)
    b.start(C)
    labels, min_dist = torch.zeros(20000, dtype=torch.long), torch.empty(20000, dtype=dtype)
    num, den = torch.zeros(300, 3, dtype=torch.float64), torch.zeros(300, dtype=torch.float64)
    rows = native.Rows(X, x_sq, None, labels, min_dist)
    bounds = (b.upper, b.lower)
    kernel.bounded_block(rows, kernel.centres(C, width), bounds, None, b.margin, (num, den, ADD))
    moved = C + 0.02 * torch.randn(300, 3, generator=gen, dtype=torch.float64).to(dtype)
    centres = kernel.centres(moved, width)
    lists = native.Neighbours.empty(300, 3, 32, dtype)
    kernel.neighbours(centres, 300, lists, slice(0, 300))
    saved = (labels.clone(), min_dist.clone(), b.upper.clone(), b.lower.clone())
    drift = b.drift(moved, lists.gap[:, 0])
    counts = kernel.bounded_block(rows, centres, bounds, drift, b.margin, (num, den, MOVE), lists)
    again, decided, scanned = counts
    assert again > 10000  # most rows' bounds failed: the centres moved by about their gaps
    assert decided > 0.9 * again  # and their old centres' lists decided most of them
    assert 0 < scanned < 32 * decided
    nearest = torch.cdist(X.double(), moved.double())
    assert torch.equal(labels, nearest.argmin(dim=1))
    moved_rows = labels != saved[0]  # relabelled, so their distances are written
    assert moved_rows.sum() > 1000
    expected = nearest.min(dim=1).values.square()[moved_rows]
    torch.testing.assert_close(min_dist[moved_rows].double(), expected, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(den.sum(), torch.tensor(20000.0, dtype=torch.float64))
    torch.testing.assert_close(den, torch.bincount(labels, minlength=300).double())
    # Every lower bound holds: no other centre is nearer than it.
    others = nearest.scatter(1, labels.unsqueeze(1), float("inf")).min(dim=1).values
    assert (b.lower.double() <= others + 1e-6).all()
    # The lists are what decided those rows: with their gaps overstated, the scans stop
    # before the nearest and the labels go wrong.
    for state, copy in zip((labels, min_dist, b.upper, b.lower), saved, strict=True):
        state.copy_(copy)
    lists.gap.mul_(100.0)
    kernel.bounded_block(rows, centres, bounds, drift, b.margin, (num, den, MOVE), lists)
    assert not torch.equal(labels, nearest.argmin(dim=1))


def after_lloyd(X: torch.Tensor, k: int, iterations: int) -> tuple[passes.Workspace, torch.Tensor]:
    """A workspace after Lloyd iterations from the first ``k`` rows, and their centres."""
    ws = passes.Workspace(X, None, k, 2048)
    C = X[:k].clone()
    for iteration in range(iterations):
        C, _, _ = ws.lloyd_iteration(C, warm=iteration > 0)
    return ws, C


@needs_compiler
@pytest.mark.parametrize("k", [12, 200])
@pytest.mark.usefixtures("kept_bounds")
def test_labels_after_lloyd_with_bounds_are_those_of_every_centre(k: int) -> None:
    """The E-step that ends a Lloyd phase runs on the phase's bounds (and at large k its
    neighbour lists): the labels of a pass over every centre, the same inertia."""
    X = torch.randn(30_000, 3, generator=torch.Generator().manual_seed(3))
    ws, C = after_lloyd(X, k, 6)
    inertia = ws.hard_labels(C)
    assert ws._bounds is not None and ws._bounds.usable(C)  # a bounded pass labelled them
    labels = ws.labels.clone()
    ws._forget_lloyd_state()
    expected = ws.hard_labels(C)  # a pass over every centre
    assert torch.equal(labels, ws.labels)
    assert torch.equal(labels, torch.cdist(X.double(), C.double()).argmin(dim=1))
    assert inertia == pytest.approx(expected, rel=1e-6)
    exact = (X.double() - C.double()[labels]).square().sum()
    assert inertia == pytest.approx(float(exact), rel=1e-9)


@needs_compiler
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.usefixtures("kept_bounds")
def test_two_nearest_from_neighbour_lists_are_those_of_every_centre(dtype: torch.dtype) -> None:
    """After Lloyd passes with bounds, the two nearest centres come from each row's
    centre's neighbour list where those decide them: the labels, distances and second
    distances of a scan of every centre, exactly."""
    gen = torch.Generator().manual_seed(4)
    X = torch.rand(20_000, 3, generator=gen, dtype=torch.float64).to(dtype)
    k = 300
    ws = passes.Workspace(X, None, k, 2048)
    seen: list[tuple[int, ...]] = []
    record = ws._neighbour_use.record
    ws._neighbour_use.record = lambda k, *counts, made: (
        seen.append(counts),
        record(k, *counts, made=made),
    )
    C = X[:k].clone()
    for iteration in range(5):
        C, _, _ = ws.lloyd_iteration(C, warm=iteration > 0)
    C = C + 1e-3 * torch.randn(C.shape, generator=gen, dtype=torch.float64).to(dtype)
    passes_before = len(seen)
    second, inertia = ws.two_nearest(C)
    rows, decided, _ = seen[passes_before]  # the lists labelled every row
    assert rows == 20_000 and decided > 0.9 * rows
    labels, nearest = ws.labels.clone(), ws.min_dist.clone()
    ws._forget_lloyd_state()
    expected_second, expected = ws.two_nearest(C)  # no bounds: every centre
    assert len(seen) == passes_before + 1
    assert torch.equal(labels, ws.labels)
    assert torch.equal(nearest, ws.min_dist)
    assert torch.equal(second, expected_second)
    assert inertia == expected
    D = torch.cdist(X.double(), C.double())
    assert torch.equal(labels, D.argmin(dim=1))
    top2 = D.topk(2, dim=1, largest=False).values.square()
    torch.testing.assert_close(second.double(), top2[:, 1], rtol=1e-4, atol=1e-5)


@needs_compiler
@pytest.mark.parametrize("k", [12, 300])
@pytest.mark.usefixtures("kept_bounds")
def test_lloyd_after_two_nearest_starts_warm_and_ends_as_from_cold(k: int) -> None:
    """The two nearest distances leave the bounds and sums of a Lloyd pass at their
    centres: a trial moved from there (two centres jump) starts warm, relabels only the
    rows its bounds no longer hold, and gives the labels and sums of a cold start; a
    snapshot taken then restores that state."""
    gen = torch.Generator().manual_seed(5)
    X = torch.rand(20_000, 3, generator=gen)
    ws, C = after_lloyd(X, k, 8)
    ws.two_nearest(C)
    saved = ws.snapshot()
    assert saved.sums is not None and saved.bounds is not None
    trial = C + 0.01 * torch.randn(C.shape, generator=gen)  # every centre moves a little
    trial[0], trial[1] = X[100], X[200]
    relabelled: list[int] = []
    bounded = ws._bounded_pass

    def counted(*args: object, **kwargs: object) -> torch.Tensor:
        out = bounded(*args, **kwargs)
        relabelled.append(int((ws.labels != saved.labels).sum()))
        return out

    ws._bounded_pass = counted  # type: ignore[method-assign]
    warm_C, _, _ = ws.lloyd_iteration(trial, warm=True)
    warm_labels = ws.labels.clone()
    ws.restore(saved)
    assert torch.equal(ws.labels, saved.labels) and ws._hard_sums is not None
    ws._forget_lloyd_state()
    cold_C, _, _ = ws.lloyd_iteration(trial, warm=False)
    assert torch.equal(warm_labels, ws.labels)
    assert torch.equal(warm_labels, torch.cdist(X.double(), trial.double()).argmin(dim=1))
    torch.testing.assert_close(warm_C, cold_C, rtol=1e-6, atol=1e-7)
    assert relabelled and relabelled[0] < X.shape[0] // 2  # only rows near the moved centres


def test_bounds_pause_after_a_pass_where_they_did_not_pay() -> None:
    use = BoundsUse()
    assert use.wanted()
    use.record(10_000, 64, 8, (100, 0, 0, 0))  # 1% of the rows relabelled: they paid
    assert use.wanted()
    pauses = []
    for _ in range(6):  # 90% relabelled against few cheap centres: they did not
        use.record(10_000, 16, 2, (9_000, 0, 0, 0))
        skipped = 0
        while not use.wanted():
            skipped += 1
        pauses.append(skipped)
    assert pauses == [min(BOUNDS_PAUSE * 2**i, BOUNDS_PAUSE_MAX) for i in range(6)]
    use.record(10_000, 16, 2, (10, 0, 0, 0))  # paying again resets the pause
    use.record(10_000, 16, 2, (9_000, 0, 0, 0))
    assert [use.wanted() for _ in range(BOUNDS_PAUSE + 1)] == [False] * BOUNDS_PAUSE + [True]


def test_rows_decided_by_neighbour_lists_cost_their_candidates() -> None:
    """At 4 096 centres a row scanned against every centre costs thousands of products;
    decided by its centre's list, a few dozen: with lists the bounds pay although most
    rows fail them."""
    listed, scanned = BoundsUse(), BoundsUse()
    listed.record(10_000, 4096, 3, (8_000, 7_900, 7_900 * 20, 4096 * 48))
    scanned.record(10_000, 4096, 3, (8_000, 0, 0, 0))
    assert listed.wanted()
    assert not scanned.wanted()


@needs_compiler
def test_lloyd_without_bounds_where_they_do_not_pay_is_lloyd(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Gaussian cloud in 8 dimensions against 16 centres from random rows: in the first
    passes most rows fail their bounds, so passes go without them, then set them again
    (a pass that labels every row and moves the changed ones between the kept sums), and
    the fit is the fit with bounds at every pass."""
    X = np.random.default_rng(0).standard_normal((20_000, 8)).astype(np.float32)
    params = dict(assignment="hard", init=X[:16], n_init=1, tol=0.0, max_iter=60)
    wanted: list[bool] = []
    original = BoundsUse.wanted

    def counted(self: BoundsUse) -> bool:
        wanted.append(original(self))
        return wanted[-1]

    monkeypatch.setattr(BoundsUse, "wanted", counted)
    paused = RBFKMeans(16, **params).fit(X)
    assert wanted.count(False) >= 6
    again = [i for i in range(1, len(wanted)) if wanted[i] and not wanted[i - 1]]
    assert len(again) >= 2  # bounds set again after a pause, more than once
    monkeypatch.setattr(BoundsUse, "wanted", lambda self: True)
    kept = RBFKMeans(16, **params).fit(X)
    assert np.array_equal(paused.labels_, kept.labels_)
    np.testing.assert_allclose(paused.cluster_centers_, kept.cluster_centers_, rtol=1e-6)
    assert paused.n_iter_ == kept.n_iter_
    assert paused.inertia_ == pytest.approx(kept.inertia_, rel=1e-9)
    for a, b in zip(paused.history_, kept.history_, strict=True):
        assert a["inertia"] == pytest.approx(b["inertia"], rel=1e-9)


@needs_compiler
def test_a_snapshot_without_bounds_keeps_the_sums_for_a_warm_trial() -> None:
    gen = torch.Generator().manual_seed(6)
    X = torch.randn(20_000, 8, generator=gen)
    ws, C = after_lloyd(X, 16, 3)
    assert ws._bounds is not None and ws._bounds.centres is None  # the bounds did not pay
    saved = ws.snapshot()
    assert saved.sums is not None and saved.bounds is None
    trial = C.clone()
    trial[0] = X[100]
    ws.restore(saved)
    warm_C, _, _ = ws.lloyd_iteration(trial, warm=True)
    warm_labels = ws.labels.clone()
    ws._forget_lloyd_state()
    cold_C, _, _ = ws.lloyd_iteration(trial, warm=False)
    assert torch.equal(warm_labels, ws.labels)
    torch.testing.assert_close(warm_C, cold_C, rtol=1e-6, atol=1e-7)
