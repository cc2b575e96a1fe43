"""The Lloyd finish: a K-Means fixed point, one record per phase, early abandonment."""

from __future__ import annotations

from itertools import pairwise

import pytest
import torch

from rbfkm_engine.anneal import LLOYD_SHARE
from rbfkm_engine.lloyd import TRIAL_CHECK_AFTER, bound_to_end_above, lloyd
from rbfkm_engine.passes import Workspace
from rbfkm_engine.progress import FitProgress

from .conftest import make_context


def square(n: int = 2000) -> torch.Tensor:
    """Uniform points in the unit square: Lloyd needs tens of iterations from a bad start."""
    return torch.rand((n, 2), generator=torch.Generator().manual_seed(0), dtype=torch.float64)


def bad_start(X: torch.Tensor, k: int = 12) -> torch.Tensor:
    """``k`` centres crowded into the square's corner."""
    return 0.2 * X[:k]


def test_lloyd_reaches_a_fixed_point() -> None:
    X = square()
    ctx = make_context(X, 12, tol=1e-12, max_iter=300)
    C, converged = lloyd(ctx, bad_start(X))
    assert converged
    ws = ctx.passes
    num, den, _ = ws.step(C, 0.0, "hard")
    C_next, _ = ws.update(C, num, den)
    assert float(((C_next - C) ** 2).sum()) <= ctx.tol
    # One record for the phase: the last pass's inertia, that of the fixed point.
    assert len(ctx.history) == 1
    (record,) = ctx.history
    assert record["sigma"] == 0.0 and record["mean_nnz"] == 1.0
    assert record["iterations"] == ctx.budget.n_iter > TRIAL_CHECK_AFTER
    assert record["objective"] == record["inertia"]
    assert record["inertia"] == pytest.approx(ws.hard_labels(C), rel=1e-9)
    assert ctx.budget.lloyd_from == (0, 1.0 - LLOYD_SHARE)


def test_a_fixed_point_of_low_precision_products_is_confirmed_in_float32(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # With lower-precision products Lloyd goes on until a pass with float32 products
    # confirms the fixed point: one more iteration here, where both give the same labels.
    # (Only the fused kernel lowers the precision; here the passes pretend to.)
    monkeypatch.setattr(Workspace, "fast_products", property(lambda ws: ws.precision != "highest"))
    X = square()
    runs = {}
    for precision in ("highest", "high"):
        ctx = make_context(X, 12, tol=1e-12, max_iter=300)
        ctx.passes.precision = precision
        ctx.passes.whole_passes = True
        C, converged = lloyd(ctx, bad_start(X))
        assert converged and ctx.passes.exact_products
        runs[precision] = (C, ctx.budget.n_iter)
    torch.testing.assert_close(runs["high"][0], runs["highest"][0])
    assert runs["high"][1] == runs["highest"][1] + 1


def test_lloyd_respects_the_budget() -> None:
    X = square()
    seen: list[FitProgress] = []
    ctx = make_context(X, 12, tol=1e-12, max_iter=5, callback=seen.append)
    _, converged = lloyd(ctx, bad_start(X))
    assert not converged
    assert ctx.budget.n_iter == 5 and ctx.budget.exhausted
    assert [record["iterations"] for record in ctx.history] == [5]
    assert [info.phase for info in seen] == ["lloyd"] * 5
    assert all(info.sigma == 0.0 for info in seen)
    fractions = [info.fraction for info in seen]
    assert all(b > a for a, b in pairwise(fractions))
    assert 1.0 - LLOYD_SHARE < fractions[0] and fractions[-1] == pytest.approx(1.0)


def test_the_callback_stops_lloyd() -> None:
    X = square()
    ctx = make_context(X, 12, tol=1e-12, max_iter=300, callback=lambda i: i.iteration == 2)
    _, converged = lloyd(ctx, bad_start(X))
    assert not converged and ctx.budget.stopped
    assert ctx.budget.n_iter == 2 and ctx.history[0]["iterations"] == 2


def test_a_trial_bound_to_end_above_the_level_is_abandoned() -> None:
    X = square()
    ctx = make_context(X, 12, tol=1e-12, max_iter=300)
    C, converged = lloyd(ctx, bad_start(X))
    assert converged
    reached, iterations = ctx.history[0]["inertia"], ctx.history[0]["iterations"]

    seen: list[FitProgress] = []
    trial = make_context(X, 12, tol=1e-12, max_iter=300, callback=seen.append)
    _, converged = lloyd(trial, bad_start(X), phase="swap", abandon_above=0.9 * reached)
    assert not converged and not trial.budget.exhausted
    assert TRIAL_CHECK_AFTER <= trial.budget.n_iter < iterations
    assert len(trial.history) == 1 and trial.history[0]["inertia"] > reached
    assert {info.phase for info in seen} == {"swap"}

    # A trial as the local search makes them (a centre of the fixed point moved to a
    # point) that ends below the fixed point is not stopped.
    moved = C.clone()
    moved[0] = X[1500]
    again = make_context(X, 12, tol=1e-12, max_iter=300)
    _, converged = lloyd(again, moved, phase="swap", abandon_above=reached)
    assert converged and again.budget.n_iter > TRIAL_CHECK_AFTER
    assert again.history[0]["inertia"] < reached


def test_an_empty_cluster_is_reseeded_and_lloyd_still_converges() -> None:
    X = square(500)
    far = torch.tensor([[50.0, 50.0]], dtype=X.dtype)  # gets no point at first
    ctx = make_context(X, 4, tol=1e-12, max_iter=300)
    C, converged = lloyd(ctx, torch.cat([X[:3], far]))
    assert converged
    counts = torch.bincount(ctx.passes.labels, minlength=4)
    assert bool((counts > 0).all())
    assert float(C.abs().max()) <= 1.0


def test_bound_to_end_above_extrapolates_the_falling_inertia() -> None:
    # The rule looks at the last three inertias once TRIAL_CHECK_AFTER are known.
    early = [float(11 + i) for i in reversed(range(TRIAL_CHECK_AFTER - 3))]
    assert not bound_to_end_above([*early[1:], 10.0, 9.0, 8.9], 8.0)  # too early to tell
    assert bound_to_end_above([*early, 10.0, 9.0, 8.9], 8.0)  # steps shrink 10x: ends near 8.88
    assert not bound_to_end_above([*early, 10.0, 9.0, 8.5], 8.0)  # steps halve: may reach 8
    assert not bound_to_end_above([*early, 10.0, 9.0, 7.9], 8.0)  # already below
    assert not bound_to_end_above([*early, 10.0, 10.0, 9.9], 8.0)  # no step before: no rate
    assert not bound_to_end_above([*early, 10.0, 9.0, 9.1], 8.0)  # rising: not geometric
