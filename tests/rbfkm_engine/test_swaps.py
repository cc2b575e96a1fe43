"""The pricing math of the local search's moves: swap, removal, split and Hartigan costs,
each against brute force."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rbfkm_engine.swaps import (
    disjoint_split_merges,
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


def test_disjoint_split_merges_pair_the_cheapest_deletions_with_the_best_free_splits() -> None:
    gain = torch.tensor([5.0, 0.0, 9.0, 1.0, 4.0, 3.0], dtype=torch.float64)
    removal = torch.tensor([1.0, 2.0, 0.5, 7.0, 0.1, 2.5], dtype=torch.float64)
    # Deletions by cost: 4, 2, 0, 1, ...; splits by gain: 2, 0, 4, 5, 3, 1. Deleting 4
    # pairs with splitting 2; 2 is then taken, so 0 comes next and pairs with 5 (0 is
    # itself, 4 is taken); 1 would pair with 3, whose gain 1.0 is below its cost 2.0.
    assert disjoint_split_merges(gain, removal, 10) == [(4, 2), (0, 5)]
    assert disjoint_split_merges(gain, removal, 1) == [(4, 2)]
    assert disjoint_split_merges(gain, removal, 0) == []


@given(seed=st.integers(0, 2**16), k=st.integers(2, 40), n_moves=st.integers(0, 25))
def test_disjoint_split_merges_use_each_cluster_once_and_each_move_pays(
    seed: int, k: int, n_moves: int
) -> None:
    g = torch.Generator().manual_seed(seed)
    gain = torch.rand(k, generator=g, dtype=torch.float64)
    removal = torch.rand(k, generator=g, dtype=torch.float64)
    moves = disjoint_split_merges(gain, removal, n_moves)
    assert len(moves) <= n_moves
    clusters = [i for move in moves for i in move]
    assert len(clusters) == len(set(clusters))
    assert all(gain[c] > removal[j] for j, c in moves)
    # Greedy: the deletions are the cheapest ones, in order.
    deleted = [j for j, _ in moves]
    assert deleted == sorted(deleted, key=lambda j: float(removal[j]))


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


@pytest.mark.parametrize("seed", range(5))
def test_ranked_split_merges_are_the_best_of_every_pair(seed: int) -> None:
    # Only the n_moves + 1 cheapest deletions and best splits are paired (no k x k matrix):
    # the same moves, in the same order, as ranking every pair.
    gen = torch.Generator().manual_seed(seed)
    k = 200
    gain = torch.rand(k, generator=gen, dtype=torch.float64) - 0.2  # some do not split
    removal = torch.rand(k, generator=gen, dtype=torch.float64)
    removal[int(torch.argmax(gain))] = 0.0  # the best split is also the cheapest deletion
    score = gain.unsqueeze(0) - removal.unsqueeze(1)  # score[j, c]
    score.fill_diagonal_(-math.inf)
    score[:, gain <= 0] = -math.inf
    best = torch.argsort(score.flatten(), descending=True)[:4].tolist()
    assert ranked_split_merges(gain, removal, 4) == [divmod(f, k) for f in best]
