"""Annealing past k (``overshoot``) and the cells' fit back to k: the grouping counts the
cells' masses, the centres keep the annealing's order, a fit that overshoots ends on k
centres at a fixed point, and the memory bound counts the centres past k."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rbfkm_engine import RBFKMeans, local_search, solver
from rbfkm_engine.coarsen import coarsen
from rbfkm_engine.local_search import search_budget
from rbfkm_engine.memory import fit_memory
from rbfkm_engine.overshoot import annealed_centres

from .conftest import make_context


def line_groups() -> torch.Tensor:
    """Two heavy groups one apart (1 000 points each, at 0 and 1) and a light one far
    away (10 points at 10), on a line."""
    gen = torch.Generator().manual_seed(1)
    parts = [torch.full((1000, 1), 0.0), torch.full((1000, 1), 1.0), torch.full((10, 1), 10.0)]
    X = torch.cat(parts).double()
    return X + 1e-3 * torch.randn(X.shape, generator=gen, dtype=X.dtype)


@pytest.mark.parametrize("seed", range(6))
def test_the_cells_are_grouped_by_what_each_grouping_costs_with_its_mass(seed: int) -> None:
    # Grouping the two heavy cells costs 1 000 x 0.5^2 x 2 = 500; the light far cell with
    # either heavy one about 800. A choice by spread alone keeps the two heavy cells apart.
    X = line_groups()
    ctx = make_context(X, 2)
    assert ctx.generator is not None
    ctx.generator.manual_seed(seed)  # the cells' fit draws its own k-means++ start
    cells = torch.tensor([[10.0], [0.0], [1.0]], dtype=X.dtype)
    centres = coarsen(ctx, cells)
    # Whatever the draws, in the order of the first cell each takes: the far cell's first.
    expected = torch.tensor([[10.0], [0.5]], dtype=X.dtype)
    torch.testing.assert_close(centres, expected, atol=1e-3, rtol=0)


def test_the_cells_search_has_a_budget_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    # As a fit's: the cells' Lloyd may use its max_iter, and the search gets its own.
    seen: list[tuple[int, int]] = []

    def refine(ctx, C):
        seen.append((ctx.budget.n_iter, ctx.budget.max_iter))
        return C

    monkeypatch.setattr(local_search, "refine", refine)
    X = line_groups()
    ctx = make_context(X, 2, max_iter=50)
    coarsen(ctx, torch.tensor([[10.0], [0.0], [1.0]], dtype=X.dtype))
    ((done, limit),) = seen
    assert limit == done + search_budget(50)


def test_fewer_cells_with_points_than_centres_are_kept_and_the_rest_seeded() -> None:
    X = line_groups()
    ctx = make_context(X, 3)
    cells = torch.tensor([[0.0], [1.0], [50.0], [60.0]], dtype=X.dtype)  # two hold no point
    centres = coarsen(ctx, cells)
    assert centres.shape == (3, 1)
    assert {0.0, 1.0} <= {round(float(c), 6) for c in centres[:, 0]}


def square(n: int = 3000, seed: int = 0) -> np.ndarray:
    """A continuum: points uniform in the unit square, twice as dense in one half."""
    rng = np.random.RandomState(seed)
    X = rng.rand(n, 2)
    return np.concatenate([X, rng.rand(n, 2) * [0.5, 1.0]]).astype(np.float32)


def test_a_fit_that_overshoots_anneals_past_k_and_ends_on_k_centres(monkeypatch) -> None:
    seen: list[int] = []

    def spy(ctx, C):  # type: ignore[no-untyped-def]
        seen.append(C.shape[0])
        return coarsen(ctx, C)

    monkeypatch.setattr(solver, "coarsen", spy)
    X = square()
    m = RBFKMeans(n_clusters=16, overshoot=2.0, random_state=0, device="cpu").fit(X)
    assert seen and 16 < seen[0] <= annealed_centres(16, 2.0)
    assert m.cluster_centers_.shape == (16, 2)
    assert m.converged_
    np.testing.assert_array_equal(m.labels_, m.predict(X))
    inertia = ((X[:, None, :] - m.cluster_centers_[None]) ** 2).sum(-1).min(1).sum()
    assert m.inertia_ == pytest.approx(float(inertia), rel=1e-4)


def test_without_overshoot_no_cells_are_coarsened(monkeypatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(solver, "coarsen", lambda ctx, C: calls.append(1) or C[: ctx.passes.k])
    RBFKMeans(n_clusters=16, random_state=0, device="cpu").fit(square())
    assert calls == []


def test_the_memory_bound_counts_the_centres_past_k() -> None:
    plain = fit_memory(100_000, 8, 256)
    assert fit_memory(100_000, 8, 256, overshoot=1.0) == plain
    past = fit_memory(100_000, 8, 256, overshoot=2.0)
    assert past.blocks > plain.blocks and past.centres > plain.centres
    assert fit_memory(100_000, 8, 256, assignment="hard", overshoot=2.0).covariance == 0
