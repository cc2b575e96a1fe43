"""The local search after Lloyd: split-merges, Hartigan moves and swaps, each kept only
when its fixed point is better, and their place in a fit."""

from __future__ import annotations

from functools import partial
from itertools import pairwise

import numpy as np
import pytest
import torch

from rbfkm_engine import RBFKMeans
from rbfkm_engine.context import FitContext
from rbfkm_engine.lloyd import lloyd
from rbfkm_engine.local_search import (
    FixedPoint,
    hartigan,
    rebalance,
    refine,
    search_budget,
    settle,
    split_merge_prices,
    split_merged,
    split_merges,
)
from rbfkm_engine.search_passes import cluster_halves
from rbfkm_engine.swaps import ranked_split_merges, split_gain

from .conftest import blob_tensor, make_context


def three_blobs() -> torch.Tensor:
    """Two blobs close together on the left, one far away on the right."""
    return blob_tensor([[-10.0, 0.0], [-7.0, 0.0], [10.0, 0.0]], n_per=100, spread=0.3)


def test_refine_moves_a_centre_from_a_crowded_blob() -> None:
    # A Lloyd fixed point with one centre for the two left blobs and two in the right one.
    X = three_blobs()
    C = torch.tensor([[-8.5, 0.0], [10.0, 0.5], [10.0, -0.5]], dtype=torch.float64)
    ctx = make_context(X, 3, tol=1e-12)
    fp, history = ctx.passes, ctx.history
    C, converged = lloyd(ctx, C)
    assert converged
    stuck = fp.hard_labels(C)
    C = refine(ctx, C)
    inertia = fp.hard_labels(C)
    assert inertia < 0.2 * stuck
    assert sorted(np.round(C[:, 0].numpy()).tolist()) == [-10.0, -7.0, 10.0]
    # One record per accepted swap, each a converged Lloyd phase.
    assert len(history) >= 2 and all(r["sigma"] == 0.0 for r in history)
    # Still a Lloyd fixed point.
    num, den, _ = fp.step(C, 0.0, "hard")
    C_next, _ = fp.update(C, num, den)
    assert float(((C_next - C) ** 2).sum()) < 1e-12


def test_refine_keeps_an_optimum() -> None:
    X = three_blobs()
    C = torch.tensor([[-10.0, 0.0], [-7.0, 0.0], [10.0, 0.0]], dtype=torch.float64)
    ctx = make_context(X, 3, tol=1e-12)
    fp = ctx.passes
    C, _ = lloyd(ctx, C)
    before = fp.hard_labels(C)
    C2 = refine(ctx, C)
    torch.testing.assert_close(C2, C)
    assert fp.hard_labels(C2) == pytest.approx(before)
    assert len(ctx.history) == 1


def test_refine_respects_the_iteration_budget() -> None:
    X = three_blobs()
    C = torch.tensor([[-8.5, 0.0], [10.0, 0.5], [10.0, -0.5]], dtype=torch.float64)
    ctx = make_context(X, 3, tol=1e-12)
    C, _ = lloyd(ctx, C)
    ctx.budget.max_iter = ctx.budget.n_iter  # nothing left
    C2 = refine(ctx, C)
    torch.testing.assert_close(C2, C)


def uneven_blobs(n: int = 4000, d: int = 8, k: int = 20, seed: int = 3) -> np.ndarray:
    """Many uneven, overlapping blobs (Dirichlet(0.5) sizes, log-normal spreads)."""
    rng = np.random.default_rng(seed)
    sizes = rng.multinomial(n - 5 * k, rng.dirichlet(np.full(k, 0.5))) + 5
    centres = rng.uniform(-6.0, 6.0, size=(k, d))
    spreads = rng.lognormal(0.0, 0.5, size=k)
    return np.concatenate(
        [centres[j] + spreads[j] * rng.standard_normal((sizes[j], d)) for j in range(k)]
    )


def test_fit_ends_with_swaps_that_lower_the_inertia() -> None:
    # Annealing alone ends in a poorer fixed point here: the Lloyd phases after swaps are
    # recorded (sigma 0), each with a lower inertia, and the fit ends on the last one.
    X = uneven_blobs()
    m = RBFKMeans(20, random_state=0, device="cpu").fit(X)
    lloyd_phases = [r["inertia"] for r in m.history_ if r["sigma"] == 0.0]
    assert len(lloyd_phases) >= 2
    assert all(b < a for a, b in pairwise(lloyd_phases))
    # The last record is the inertia before the last (small) shift, which cannot raise it
    # beyond the rounding of float32 data (each kept move gains over 1e-5).
    assert m.inertia_ <= lloyd_phases[-1] * (1 + 1e-6)
    assert m.inertia_ == pytest.approx(lloyd_phases[-1], rel=1e-4)
    assert m.n_iter_ <= m.max_iter + search_budget(m.max_iter)
    np.testing.assert_array_equal(m.labels_, m.predict(X))


def test_hard_assignment_is_plain_lloyd() -> None:
    # No swaps for "hard": one Lloyd phase, as scikit-learn's KMeans.
    m = RBFKMeans(20, assignment="hard", random_state=0, device="cpu").fit(uneven_blobs())
    assert len(m.history_) == 1


def test_progress_keeps_rising_through_the_swaps() -> None:
    seen = []
    m = RBFKMeans(20, random_state=0, device="cpu")
    m.fit(uneven_blobs(), callback=lambda p: seen.append(p))
    assert sum(r["sigma"] == 0.0 for r in m.history_) >= 2  # swaps happened
    fractions = [p.fraction for p in seen]
    assert all(b >= a for a, b in pairwise(fractions))
    assert all(0.0 <= f <= 1.0 for f in fractions)
    assert [p.iteration for p in seen] == list(range(1, m.n_iter_ + 1))
    assert seen[-1].phase == "swap"


def test_trial_swaps_escape_fixed_points_no_single_swap_improves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # On digits, with the split-merge and Hartigan moves off, seed 3 anneals to a fixed
    # point 0.4% above the best one found, and no swap lowers its inertia before Lloyd
    # re-centres the rest; the trials (swap, then Lloyd, kept only if better) reach a
    # lower fixed point.
    from sklearn.datasets import load_digits

    import rbfkm_engine.local_search as search

    monkeypatch.setattr(search, "SPLIT_MERGE_TRIALS", 0)
    monkeypatch.setattr(search, "HARTIGAN_ROUNDS", 0)
    X = load_digits().data
    fits = {}
    for trials in (0, search.SWAP_TRIALS):
        monkeypatch.setattr(search, "SWAP_TRIALS", trials)
        m = RBFKMeans(10, random_state=3, device="cpu", dtype="float64").fit(X)
        np.testing.assert_array_equal(m.labels_, m.predict(X))
        fits[trials] = m
    without, with_trials = fits[0], fits[search.SWAP_TRIALS]
    assert search.SWAP_TRIALS > 0
    assert with_trials.inertia_ < (1.0 - 1e-3) * without.inertia_
    assert with_trials.n_iter_ > without.n_iter_  # the trials' Lloyd phases count


def digits_fixed_point(seed: int) -> tuple[FitContext, FixedPoint]:
    """A Lloyd fixed point of digits from scikit-learn's random init, in float64, with its
    second-nearest distances; the context's history is empty. The rows are contiguous, as
    the estimator makes them (the kernel's passes need it)."""
    from sklearn.cluster import KMeans
    from sklearn.datasets import load_digits

    X = np.ascontiguousarray(load_digits().data)
    C0 = KMeans(10, n_init=1, init="random", random_state=seed).fit(X).cluster_centers_
    ctx = make_context(torch.as_tensor(X), 10, tol=1e-6, max_iter=300, chunk_size=4096)
    C, converged = lloyd(ctx, torch.as_tensor(C0))
    assert converged
    ctx.history.clear()
    second, inertia = ctx.passes.two_nearest(C)
    return ctx, FixedPoint(C, second, inertia)


def test_split_merges_escape_a_fixed_point_with_one_centre_too_many_in_a_cluster() -> None:
    # scikit-learn's random init, seed 9, ends 0.4% above the best known fixed point of
    # digits (1.16512e6): two centres share one digit, one centre covers two. The best-
    # priced split-merge does not pay at once; with Lloyd it reaches the best basin.
    ctx, best = digits_fixed_point(9)
    assert best.inertia > 1.169e6
    kept = split_merges(ctx, best)
    assert kept >= 1
    assert best.inertia < 1.1660e6
    assert ctx.passes.hard_labels(best.centres) == pytest.approx(best.inertia, rel=1e-9)
    assert len(ctx.history) == kept and all(r["sigma"] == 0.0 for r in ctx.history)


def test_hartigan_polishes_a_lloyd_fixed_point() -> None:
    # scikit-learn's random init, seed 8, ends on a Lloyd fixed point 1e-4 above the best
    # one: Lloyd cannot move its ~20 boundary points, Hartigan's moves (which count the
    # shift of both means) can.
    ctx, best = digits_fixed_point(8)
    inertia = best.inertia
    assert hartigan(ctx, best) == 1
    assert best.inertia < inertia
    assert ctx.passes.hard_labels(best.centres) == pytest.approx(best.inertia, rel=1e-9)


def test_sequential_hartigan_ends_on_a_fixed_point_of_hartigans_method() -> None:
    # The batch of moves from scikit-learn's seed-8 fixed point settles on a Lloyd fixed
    # point; sweeps of single moves go on to one where no point pays to move, at most as
    # high as the batch's.
    ctx, best = digits_fixed_point(8)
    batch = FixedPoint(best.centres, best.second, best.inertia)
    assert hartigan(ctx, batch) == 1
    ctx, best = digits_fixed_point(8)
    assert hartigan(ctx, best, sequential=True) == 1
    assert best.inertia <= batch.inertia * (1 + 1e-12)
    ws = ctx.passes
    assert ws.hard_labels(best.centres) == pytest.approx(best.inertia, rel=1e-9)
    X, labels = ws.X.numpy(), ws.labels.numpy()
    mass = np.bincount(labels, minlength=10).astype(float)
    gaps = ((X[:, None, :] - best.centres.numpy()[None]) ** 2).sum(axis=2)
    own = gaps[np.arange(len(X)), labels]
    leave = own * mass[labels] / (mass[labels] - 1)
    join = gaps * mass / (mass + 1)
    join[np.arange(len(X)), labels] = np.inf
    assert (join.min(axis=1) >= leave * (1 - 1e-6)).all()


def test_sequential_hartigan_needs_the_kernel() -> None:
    ctx, best = digits_fixed_point(8)
    ctx.passes.kernel = None
    C, labels = best.centres, ctx.passes.labels.clone()
    assert hartigan(ctx, best, sequential=True) == 0 and best.centres is C
    torch.testing.assert_close(ctx.passes.labels, labels)


@pytest.mark.parametrize("seed", [4, 8, 9])
def test_moves_leave_the_labels_of_the_centres_they_return(seed: int) -> None:
    # The swap search after them prices swaps from these labels and distances, kept move
    # or not.
    ctx, best = digits_fixed_point(seed)
    fp = ctx.passes
    for search in (hartigan, split_merges, partial(hartigan, sequential=True)):
        search(ctx, best)
        labels, min_dist = fp.labels.clone(), fp.min_dist.clone()
        assert fp.hard_labels(best.centres) == pytest.approx(best.inertia, rel=1e-9)
        torch.testing.assert_close(fp.labels, labels)
        torch.testing.assert_close(fp.min_dist, min_dist, rtol=1e-9, atol=1e-6)


def test_a_hartigan_trial_not_kept_restores_the_labels_of_the_centres() -> None:
    # An incumbent of inertia 0 keeps no trial: the Hartigan moves (there are some at this
    # fixed point) must not stay in the labels.
    ctx, best = digits_fixed_point(8)
    C = best.centres
    best.inertia = 0.0
    expected = ctx.passes.labels.clone()
    assert hartigan(ctx, best) == 0 and best.centres is C
    torch.testing.assert_close(ctx.passes.labels, expected)


def two_densities_fixed_point() -> tuple[FitContext, FixedPoint]:
    """Lloyd fixed point of 32 centres on two unit squares, 16 each, one square holding
    eight times the other's points (K-Means' optimum gives the dense one about 24)."""
    rng = np.random.default_rng(0)
    dense, sparse = rng.random((4000, 2)), rng.random((500, 2)) + 3.0
    X = torch.as_tensor(np.concatenate([dense, sparse]))
    grid = (np.stack(np.meshgrid(np.arange(4), np.arange(4)), -1).reshape(-1, 2) + 0.5) / 4
    C0 = torch.as_tensor(np.concatenate([grid, grid + 3.0]))
    ctx = make_context(X, 32, tol=1e-10, max_iter=300, chunk_size=1024)
    C, converged = lloyd(ctx, C0)
    assert converged
    ctx.history.clear()
    second, inertia = ctx.passes.two_nearest(C)
    return ctx, FixedPoint(C, second, inertia)


def test_rebalance_moves_centres_to_the_denser_region_in_batches() -> None:
    ctx, best = two_densities_fixed_point()
    stuck = best.inertia
    kept = rebalance(ctx, best)
    in_dense = int((best.centres[:, 0] < 2.0).sum())
    assert kept >= 2 and in_dense >= 16 + kept // 2
    assert best.inertia < 0.9 * stuck
    # Fewer Lloyd phases than moves: each batch settles with one.
    assert 1 <= len(ctx.history) < kept
    assert ctx.passes.hard_labels(best.centres) == pytest.approx(best.inertia, rel=1e-9)


def test_rebalance_keeps_only_batches_that_end_better() -> None:
    ctx, best = two_densities_fixed_point()
    rebalance(ctx, best)
    centres, inertia, records = best.centres.clone(), best.inertia, len(ctx.history)
    again = rebalance(ctx, best)
    assert best.inertia <= inertia
    if again == 0:
        torch.testing.assert_close(best.centres, centres)
        assert len(ctx.history) == records  # a batch not kept leaves no record


def test_a_pricing_keeps_the_halves_of_the_clusters_no_move_changed() -> None:
    # After a kept move, the next pricing splits again only the clusters whose centre or
    # weight changed; theirs are the halves a pricing of every cluster makes.
    ctx, best = digits_fixed_point(9)
    halves, gain, removal = split_merge_prices(ctx, best)
    old = best.halves
    assert old is not None
    again = split_merge_prices(ctx, best)[0]  # nothing changed: the same halves
    torch.testing.assert_close(again, halves, rtol=0, atol=0)
    moves = ranked_split_merges(gain, removal, 2)
    assert any(settle(ctx, best, split_merged(best.centres, halves, [m]))[0] for m in moves)
    changed = (old.centres != best.centres).any(dim=1)
    assert 0 < int(changed.sum()) < 10
    generator = torch.Generator().set_state(ctx.generator.get_state())
    halves, gain, _ = split_merge_prices(ctx, best)
    torch.testing.assert_close(halves[~changed], old.means[~changed], rtol=0, atol=0)
    fresh, mass = cluster_halves(ctx.passes, best.centres, generator)
    torch.testing.assert_close(halves[changed], fresh[changed], rtol=1e-12, atol=1e-9)
    torch.testing.assert_close(gain[changed], split_gain(mass, fresh)[changed])


def test_swaps_stop_after_their_patience_of_rounds_without_a_kept_swap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At the optimum of three separated blobs no swap pays: the search prices
    ``SWAP_PATIENCE`` rounds (each round's best swap tried with Lloyd while trials are
    left, a failed round all the same), keeps none, and leaves the centres as they were."""
    import rbfkm_engine.local_search as search

    X = three_blobs()
    C = torch.tensor([[-10.0, 0.0], [-7.0, 0.0], [10.0, 0.0]], dtype=torch.float64)
    ctx = make_context(X, 3, tol=1e-12)
    C, _ = lloyd(ctx, C)
    second, inertia = ctx.passes.two_nearest(C)
    best = FixedPoint(C.clone(), second, inertia)
    rounds, trials = [], []
    draw, settle_ = search.draw_points, search.settle
    monkeypatch.setattr(search, "draw_points", lambda *a: rounds.append(1) or draw(*a))
    monkeypatch.setattr(search, "settle", lambda *a: trials.append(1) or settle_(*a))
    assert search.swaps(ctx, best) == 0
    assert search.SWAP_PATIENCE >= 3 and search.SWAP_TRIALS >= 3
    assert len(rounds) == search.SWAP_PATIENCE
    assert len(trials) == min(search.SWAP_TRIALS, search.SWAP_PATIENCE)
    torch.testing.assert_close(best.centres, C)
