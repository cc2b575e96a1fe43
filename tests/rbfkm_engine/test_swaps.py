"""Moves out of poor fixed points: exact swap, removal, split and Hartigan costs, and the
solver's searches after Lloyd."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rbfkm_engine import RBFKMeans
from rbfkm_engine.solver import (
    FixedPointIteration,
    _bound_to_end_above,
    _Budget,
    _hartigan,
    _split_merges,
    lloyd,
    refine,
)
from rbfkm_engine.swaps import (
    hartigan_targets,
    ranked_split_merges,
    removal_costs,
    split_gain,
    swap_costs,
)


def brute_force_costs(X: np.ndarray, C: np.ndarray, P: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``(k, B)`` inertia with centre ``j`` replaced by candidate ``b``, by enumeration."""
    out = np.empty((C.shape[0], P.shape[0]))
    for j in range(C.shape[0]):
        for b in range(P.shape[0]):
            C2 = C.copy()
            C2[j] = P[b]
            d = ((X[:, None, :] - C2[None]) ** 2).sum(-1).min(1)
            out[j, b] = (w * d).sum()
    return out


def two_nearest(X: np.ndarray, C: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    D = ((X[:, None, :] - C[None]) ** 2).sum(-1)
    order = np.argsort(D, axis=1, kind="stable")
    rows = np.arange(X.shape[0])
    return D[rows, order[:, 0]], D[rows, order[:, 1]], order[:, 0]


@given(
    seed=st.integers(0, 2**16),
    n=st.integers(3, 40),
    k=st.integers(2, 5),
    n_candidates=st.integers(1, 4),
    weighted=st.booleans(),
)
def test_swap_costs_equal_brute_force(
    seed: int, n: int, k: int, n_candidates: int, weighted: bool
) -> None:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    C = rng.normal(size=(k, 2))
    P = X[rng.integers(0, n, n_candidates)]
    w = rng.uniform(0.0, 2.0, n) if weighted else np.ones(n)
    d1, d2, labels = two_nearest(X, C)
    dp = ((X[:, None, :] - P[None]) ** 2).sum(-1)
    # Two blocks, as the solver sums them.
    half = n // 2
    total = torch.zeros((k, n_candidates), dtype=torch.float64)
    for rows in (slice(0, half), slice(half, n)):
        base, delta = swap_costs(
            torch.as_tensor(d1[rows]),
            torch.as_tensor(d2[rows]),
            torch.as_tensor(labels[rows]),
            torch.as_tensor(w[rows]) if weighted else None,
            torch.as_tensor(dp[rows]),
            k,
        )
        total += delta + base.unsqueeze(0)
    np.testing.assert_allclose(total.numpy(), brute_force_costs(X, C, P, w), rtol=1e-10)


def three_blobs() -> torch.Tensor:
    """Two blobs close together on the left, one far away on the right."""
    rng = np.random.default_rng(0)
    centres = np.array([[-10.0, 0.0], [-7.0, 0.0], [10.0, 0.0]])
    X = np.concatenate([c + 0.3 * rng.normal(size=(100, 2)) for c in centres])
    return torch.as_tensor(X)


def test_refine_moves_a_centre_from_a_crowded_blob() -> None:
    # A Lloyd fixed point with one centre for the two left blobs and two in the right one.
    X = three_blobs()
    C = torch.tensor([[-8.5, 0.0], [10.0, 0.5], [10.0, -0.5]], dtype=torch.float64)
    fp = FixedPointIteration(X, None, 3, chunk_size=64)
    budget = _Budget(100, None, 0.0, 1.0)
    history: list[dict[str, float]] = []
    C, converged = lloyd(fp, C, tol=1e-12, budget=budget, history=history, verbose=False)
    assert converged
    stuck = fp.hard_labels(C)
    generator = torch.Generator().manual_seed(0)
    C = refine(fp, C, tol=1e-12, budget=budget, history=history, generator=generator, verbose=False)
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
    fp = FixedPointIteration(X, None, 3, chunk_size=64)
    budget = _Budget(100, None, 0.0, 1.0)
    history: list[dict[str, float]] = []
    C, _ = lloyd(fp, C, tol=1e-12, budget=budget, history=history, verbose=False)
    before = fp.hard_labels(C)
    generator = torch.Generator().manual_seed(0)
    C2 = refine(
        fp, C, tol=1e-12, budget=budget, history=history, generator=generator, verbose=False
    )
    torch.testing.assert_close(C2, C)
    assert fp.hard_labels(C2) == pytest.approx(before)
    assert len(history) == 1


def test_refine_respects_the_iteration_budget() -> None:
    X = three_blobs()
    C = torch.tensor([[-8.5, 0.0], [10.0, 0.5], [10.0, -0.5]], dtype=torch.float64)
    fp = FixedPointIteration(X, None, 3, chunk_size=64)
    history: list[dict[str, float]] = []
    budget = _Budget(100, None, 0.0, 1.0)
    C, _ = lloyd(fp, C, tol=1e-12, budget=budget, history=history, verbose=False)
    budget.max_iter = budget.n_iter  # nothing left
    C2 = refine(
        fp,
        C,
        tol=1e-12,
        budget=budget,
        history=history,
        generator=torch.Generator().manual_seed(0),
        verbose=False,
    )
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
    assert m.inertia_ == pytest.approx(lloyd_phases[-1], rel=1e-5)
    assert m.n_iter_ <= m.max_iter
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

    import rbfkm_engine.solver as solver

    monkeypatch.setattr(solver, "SPLIT_MERGE_TRIALS", 0)
    monkeypatch.setattr(solver, "HARTIGAN_ROUNDS", 0)
    X = load_digits().data
    fits = {}
    for trials in (0, solver.SWAP_TRIALS):
        monkeypatch.setattr(solver, "SWAP_TRIALS", trials)
        m = RBFKMeans(10, random_state=3, device="cpu", dtype="float64").fit(X)
        np.testing.assert_array_equal(m.labels_, m.predict(X))
        fits[trials] = m
    without, with_trials = fits[0], fits[solver.SWAP_TRIALS]
    assert solver.SWAP_TRIALS > 0
    assert with_trials.inertia_ < (1.0 - 1e-3) * without.inertia_
    assert with_trials.n_iter_ > without.n_iter_  # the trials' Lloyd phases count


# --------------------------------------------------------------------------- split-merge


def sse(X: np.ndarray, labels: np.ndarray, w: np.ndarray, k: int) -> float:
    """Weighted within-cluster sum of squares of a partition, at its own means."""
    total = 0.0
    for j in range(k):
        members = labels == j
        if w[members].sum() > 0:
            mean = (w[members, None] * X[members]).sum(0) / w[members].sum()
            total += float((w[members] * ((X[members] - mean) ** 2).sum(1)).sum())
    return total


@given(
    seed=st.integers(0, 2**16), n=st.integers(3, 40), k=st.integers(2, 5), weighted=st.booleans()
)
def test_removal_costs_equal_brute_force(seed: int, n: int, k: int, weighted: bool) -> None:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    C = rng.normal(size=(k, 2))
    w = rng.uniform(0.0, 2.0, n) if weighted else np.ones(n)
    d1, d2, labels = two_nearest(X, C)
    cost = removal_costs(
        torch.as_tensor(d1),
        torch.as_tensor(d2),
        torch.as_tensor(labels),
        torch.as_tensor(w) if weighted else None,
        k,
    )
    base = (w * d1).sum()
    for j in range(k):
        rest = np.delete(C, j, axis=0)
        without = (w * ((X[:, None, :] - rest[None]) ** 2).sum(-1).min(1)).sum()
        assert float(cost[j]) == pytest.approx(without - base, rel=1e-9, abs=1e-9)


@given(seed=st.integers(0, 2**16), n=st.integers(2, 30), weighted=st.booleans())
def test_split_gain_is_the_inertia_the_split_removes(seed: int, n: int, weighted: bool) -> None:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    w = rng.uniform(0.1, 2.0, n) if weighted else np.ones(n)
    side = rng.integers(0, 2, n)
    mass = torch.tensor([[w[side == 0].sum(), w[side == 1].sum()]])
    halves = torch.zeros((1, 2, 3), dtype=torch.float64)
    for h in (0, 1):
        if mass[0, h] > 0:
            halves[0, h] = torch.as_tensor((w[side == h, None] * X[side == h]).sum(0)) / mass[0, h]
    expected = sse(X, np.zeros(n, dtype=int), w, 1) - sse(X, side, w, 2)
    assert float(split_gain(mass, halves)[0]) == pytest.approx(expected, rel=1e-9, abs=1e-9)


def test_ranked_split_merges_pairs_the_best_split_with_the_cheapest_deletion() -> None:
    gain = torch.tensor([5.0, 0.0, 9.0, 1.0], dtype=torch.float64)
    removal = torch.tensor([1.0, 2.0, 0.5, 7.0], dtype=torch.float64)
    moves = ranked_split_merges(gain, removal, 4)
    # score[j, c] = gain[c] - removal[j] for j != c; a cluster with no gain never splits
    assert moves == [(0, 2), (1, 2), (2, 0), (1, 0)]
    assert len(ranked_split_merges(torch.tensor([0.0, 0.0]), torch.tensor([1.0, 1.0]), 3)) == 0


def test_cluster_halves_find_the_two_blobs_of_one_cluster() -> None:
    rng = np.random.default_rng(0)
    left = rng.normal(size=(200, 3)) * 0.3 + [-4.0, 1.0, 0.0]
    right = rng.normal(size=(100, 3)) * 0.3 + [4.0, -1.0, 0.0]
    far = rng.normal(size=(50, 3)) * 0.3 + [0.0, 30.0, 0.0]
    X = torch.as_tensor(np.concatenate([left, right, far]))
    fp = FixedPointIteration(X, None, 2, chunk_size=64)
    C = torch.stack([X[:300].mean(0), X[300:].mean(0)])
    fp.hard_labels(C)
    halves, mass = fp.cluster_halves(C, torch.Generator().manual_seed(0))
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


def digits_fixed_point(seed: int) -> tuple[FixedPointIteration, torch.Tensor, _Budget]:
    """A Lloyd fixed point of digits from scikit-learn's random init, in float64."""
    from sklearn.cluster import KMeans
    from sklearn.datasets import load_digits

    X = load_digits().data
    C0 = KMeans(10, n_init=1, init="random", random_state=seed).fit(X).cluster_centers_
    fp = FixedPointIteration(torch.as_tensor(X), None, 10, chunk_size=4096)
    budget = _Budget(300, None, 0.0, 1.0)
    C, converged = lloyd(
        fp, torch.as_tensor(C0), tol=1e-6, budget=budget, history=[], verbose=False
    )
    assert converged
    return fp, C, budget


def split_merges(
    fp: FixedPointIteration,
    C: torch.Tensor,
    second: torch.Tensor,
    inertia: float,
    budget: _Budget,
    history: list[dict[str, float]],
) -> tuple[torch.Tensor, torch.Tensor, float, int]:
    """The solver's split-merge search at tol 1e-6, seeded."""
    return _split_merges(
        fp,
        C,
        second,
        inertia,
        tol=1e-6,
        budget=budget,
        history=history,
        generator=torch.Generator().manual_seed(0),
        verbose=False,
    )


def test_split_merges_escape_a_fixed_point_with_one_centre_too_many_in_a_cluster() -> None:
    # scikit-learn's random init, seed 9, ends 0.4% above the best known fixed point of
    # digits (1.16512e6): two centres share one digit, one centre covers two. The best-
    # priced split-merge does not pay at once; with Lloyd it reaches the best basin.
    fp, C, budget = digits_fixed_point(9)
    second, inertia = fp.two_nearest(C)
    assert inertia > 1.169e6
    history: list[dict[str, float]] = []
    C2, _, inertia2, kept = split_merges(fp, C, second, inertia, budget, history)
    assert kept >= 1
    assert inertia2 < 1.1660e6
    assert fp.hard_labels(C2) == pytest.approx(inertia2, rel=1e-9)
    assert len(history) == kept and all(r["sigma"] == 0.0 for r in history)


@given(
    seed=st.integers(0, 2**16), n=st.integers(4, 30), k=st.integers(2, 4), weighted=st.booleans()
)
def test_hartigan_targets_move_exactly_the_points_a_move_helps(
    seed: int, n: int, k: int, weighted: bool
) -> None:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    w = rng.uniform(0.5, 2.0, n) if weighted else np.ones(n)
    labels = np.arange(n) % k  # every cluster non-empty, not a Lloyd partition
    mass = np.array([w[labels == j].sum() for j in range(k)])
    means = np.stack([(w[labels == j, None] * X[labels == j]).sum(0) / mass[j] for j in range(k)])
    D = ((X[:, None, :] - means[None]) ** 2).sum(-1)
    new = hartigan_targets(
        torch.as_tensor(D),
        torch.as_tensor(labels),
        torch.as_tensor(mass),
        torch.as_tensor(w) if weighted else None,
    ).numpy()
    base = sse(X, labels, w, k)
    for i in range(n):
        moves = {}
        for j in range(k):
            if j != labels[i] and (labels == labels[i]).sum() > 1:
                moved = labels.copy()
                moved[i] = j
                moves[j] = sse(X, moved, w, k) - base
        best = min(moves.values(), default=0.0)
        if new[i] != labels[i]:
            # the move the rule picks is the best single move, and it lowers the inertia
            assert moves[new[i]] < 0 and moves[new[i]] == pytest.approx(best, abs=1e-9)
        else:
            assert best >= -1e-9 * (1.0 + base)


def test_hartigan_polishes_a_lloyd_fixed_point() -> None:
    # scikit-learn's random init, seed 8, ends on a Lloyd fixed point 1e-4 above the best
    # one: Lloyd cannot move its ~20 boundary points, Hartigan's moves (which count the
    # shift of both means) can.
    fp, C, budget = digits_fixed_point(8)
    second, inertia = fp.two_nearest(C)
    history: list[dict[str, float]] = []
    C2, _, inertia2, kept = _hartigan(
        fp, C, second, inertia, tol=1e-6, budget=budget, history=history, verbose=False
    )
    assert kept
    assert inertia2 < inertia
    assert fp.hard_labels(C2) == pytest.approx(inertia2, rel=1e-9)


@pytest.mark.parametrize("seed", [4, 8, 9])
def test_moves_leave_the_labels_of_the_centres_they_return(seed: int) -> None:
    # The swap search after them prices swaps from these labels and distances, kept move
    # or not.
    fp, C, budget = digits_fixed_point(seed)
    second, inertia = fp.two_nearest(C)
    for search in ("hartigan", "split-merge"):
        if search == "hartigan":
            C, second, inertia, _ = _hartigan(
                fp, C, second, inertia, tol=1e-6, budget=budget, history=[], verbose=False
            )
        else:
            C, second, inertia, _ = split_merges(fp, C, second, inertia, budget, [])
        labels, min_dist = fp.labels.clone(), fp.min_dist.clone()
        assert fp.hard_labels(C) == pytest.approx(inertia, rel=1e-9)
        torch.testing.assert_close(fp.labels, labels)
        torch.testing.assert_close(fp.min_dist, min_dist, rtol=1e-9, atol=1e-6)


def test_a_hartigan_trial_not_kept_restores_the_labels_of_the_centres() -> None:
    # An incumbent of inertia 0 keeps no trial: the Hartigan moves (there are some at this
    # fixed point) must not stay in the labels.
    fp, C, budget = digits_fixed_point(8)
    second, _ = fp.two_nearest(C)
    expected = fp.labels.clone()
    C2, _, _, kept = _hartigan(
        fp, C, second, 0.0, tol=1e-6, budget=budget, history=[], verbose=False
    )
    assert not kept and C2 is C
    torch.testing.assert_close(fp.labels, expected)


def test_bound_to_end_above_extrapolates_the_falling_inertia() -> None:
    assert not _bound_to_end_above([10.0, 5.0], 1.0)  # too early to tell
    assert _bound_to_end_above([10.0, 9.0, 8.9], 8.0)  # steps shrink 10x: ends near 8.88
    assert not _bound_to_end_above([10.0, 9.0, 8.5], 8.0)  # steps halve: may reach 8
    assert not _bound_to_end_above([10.0, 9.0, 7.9], 8.0)  # already below
