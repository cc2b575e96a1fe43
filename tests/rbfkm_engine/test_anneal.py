"""The annealing phase: centres grow from the mean to ``n_clusters`` at the data's phase
transitions, one record per temperature, and the phase hands over to Lloyd once almost
every point is hard."""

from __future__ import annotations

from itertools import pairwise

import pytest
import torch

from rbfkm_engine.anneal import LLOYD_SHARE, SOFT_FRACTION_STOP, Schedule, anneal
from rbfkm_engine.context import FitContext
from rbfkm_engine.moments import largest_eigenvalue, weighted_covariance
from rbfkm_engine.passes import Workspace
from rbfkm_engine.progress import Budget, FitProgress, IterationStats
from rbfkm_engine.solver import annealing_budget
from rbfkm_engine.temperature import (
    CELL_RATIO,
    critical_temperature,
    geometric_schedule,
    iterations_per_temperature,
)
from rbfkm_engine.twins import Twins

from .conftest import blob_tensor

BLOBS = [[-8.0, 0.0], [8.0, 0.0], [0.0, 12.0]]
N_PER = 60


class RecordingWorkspace(Workspace):
    """The workspace, noting what each pass was asked and what it found (the passes
    themselves are the real ones)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.passes: list[dict[str, object]] = []

    def step(
        self, C: torch.Tensor, sigma: float, assignment: str, **kwargs: object
    ) -> tuple[torch.Tensor, torch.Tensor, IterationStats]:
        num, den, stats = super().step(C, sigma, assignment, **kwargs)
        self.passes.append(
            {
                "sigma": sigma,
                "rows": C.shape[0],
                "twins_from": kwargs.get("twins_from"),
                "soft_weight": stats.soft_weight,
            }
        )
        return num, den, stats


def blobs() -> torch.Tensor:
    return blob_tensor(BLOBS, n_per=N_PER, spread=0.5, seed=0)


def blob_means(X: torch.Tensor) -> torch.Tensor:
    return torch.stack([X[j * N_PER : (j + 1) * N_PER].mean(dim=0) for j in range(len(BLOBS))])


def schedule(
    X: torch.Tensor, assignment: str, coincident: int = 2, budget_iter: int | None = None
) -> Schedule:
    """The estimator's automatic schedule for ``X``."""
    lam = largest_eigenvalue(weighted_covariance(X))
    sigma0 = 1.1 * critical_temperature(lam, coincident, assignment)
    temperatures = geometric_schedule(sigma0, 1e-4 * 2.0 * lam, 0.8)
    budget = annealing_budget(300) if budget_iter is None else budget_iter
    return Schedule(temperatures, assignment, iterations_per_temperature(0.8), budget)


def context(X: torch.Tensor, callback=None, max_iter: int = 300) -> FitContext:
    passes = RecordingWorkspace(X, None, len(BLOBS), 64)
    return FitContext(passes, Budget(max_iter, callback), 1e-10, torch.Generator().manual_seed(0))


def grown(X: torch.Tensor, ctx: FitContext) -> Twins:
    return Twins(X.mean(dim=0, keepdim=True), len(BLOBS), ctx.generator)


def closest_centres(C: torch.Tensor, X: torch.Tensor) -> list[int]:
    return torch.cdist(blob_means(X), C).argmin(dim=1).tolist()


@pytest.mark.parametrize("assignment", ("softmax", "entmax15"))
def test_centres_grow_to_one_per_blob(assignment: str) -> None:
    X = blobs()
    ctx = context(X)
    C, sigma = anneal(ctx, schedule(X, assignment), grown(X, ctx))
    assert C.shape == (3, 2)
    assert sorted(closest_centres(C, X)) == [0, 1, 2]
    distance = torch.cdist(blob_means(X), C).min(dim=1).values
    assert float(distance.max()) < 0.5
    # The passes began with one centre and its twin and grew.
    rows = [p["rows"] for p in ctx.passes.passes]
    assert rows[0] == 1 and rows[1] == 2 and rows[-1] == 3
    assert sigma > 0.0


@pytest.mark.parametrize("assignment", ("softmax", "entmax15"))
def test_one_record_per_temperature_visited(assignment: str) -> None:
    X = blobs()
    ctx = context(X)
    plan = schedule(X, assignment)
    _, sigma = anneal(ctx, plan, grown(X, ctx))
    visited = [record["sigma"] for record in ctx.history]
    assert visited == plan.temperatures[: len(visited)]
    assert visited[-1] == sigma
    assert all(record["iterations"] >= 1 for record in ctx.history)
    assert sum(record["iterations"] for record in ctx.history) == ctx.budget.n_iter
    assert set(ctx.history[0]) == {"sigma", "objective", "inertia", "iterations", "mean_nnz"}


@pytest.mark.parametrize("assignment", ("softmax", "entmax15"))
def test_annealing_stops_at_the_first_temperature_almost_every_point_is_hard(
    assignment: str,
) -> None:
    X = blobs()
    ctx = context(X)
    plan = schedule(X, assignment)
    _, sigma = anneal(ctx, plan, grown(X, ctx))
    stop = SOFT_FRACTION_STOP * X.shape[0]
    last_pass = {p["sigma"]: p for p in ctx.passes.passes}  # the last pass per temperature
    visited = [record["sigma"] for record in ctx.history]
    assert len(visited) < len(plan.temperatures)  # the schedule was not used up
    for t in visited[:-1]:
        assert last_pass[t]["twins_from"] is not None or last_pass[t]["soft_weight"] > stop
    assert last_pass[sigma]["twins_from"] is None
    assert last_pass[sigma]["soft_weight"] <= stop


@pytest.mark.parametrize("budget_iter", (1, 4, 7))
def test_annealing_respects_its_budget(budget_iter: int) -> None:
    X = blobs()
    ctx = context(X)
    C, _ = anneal(ctx, schedule(X, "entmax15", budget_iter=budget_iter), grown(X, ctx))
    assert ctx.budget.n_iter == budget_iter
    assert sum(record["iterations"] for record in ctx.history) == budget_iter
    # Centres still to grow are seeded farthest-first: there are always n_clusters.
    assert C.shape == (3, 2)


def test_the_callback_hears_the_anneal_phase() -> None:
    X = blobs()
    seen: list[FitProgress] = []
    ctx = context(X, seen.append)
    anneal(ctx, schedule(X, "entmax15"), grown(X, ctx))
    assert len(seen) == ctx.budget.n_iter > 0
    assert {info.phase for info in seen} == {"anneal"}
    assert [info.iteration for info in seen] == list(range(1, len(seen) + 1))
    assert [info.sigma for info in seen] == [p["sigma"] for p in ctx.passes.passes[1:]]
    fractions = [info.fraction for info in seen]
    assert all(b >= a for a, b in pairwise(fractions))
    assert 0.0 < fractions[0] and fractions[-1] <= 1.0 - LLOYD_SHARE


def test_the_callback_stops_annealing() -> None:
    X = blobs()
    ctx = context(X, lambda info: info.iteration >= 3)
    C, _ = anneal(ctx, schedule(X, "entmax15"), grown(X, ctx))
    assert ctx.budget.stopped and ctx.budget.n_iter == 3
    assert C.shape == (3, 2)


@pytest.mark.parametrize("assignment", ("softmax", "entmax15"))
def test_fixed_centres_anneal_without_changing_their_count(assignment: str) -> None:
    X = blobs()
    ctx = context(X)
    C0 = X[[0, 1, 2]] + torch.tensor([0.0, 3.0], dtype=X.dtype)  # all in the first blob
    plan = schedule(X, assignment, coincident=3)
    C, sigma = anneal(ctx, plan, C0)
    assert all(p["rows"] == 3 and p["twins_from"] is None for p in ctx.passes.passes)
    assert C.shape == (3, 2)
    assert sorted(closest_centres(C, X)) == [0, 1, 2]
    visited = [record["sigma"] for record in ctx.history]
    assert visited == plan.temperatures[: len(visited)] and visited[-1] == sigma


def test_the_first_twin_skips_the_hottest_temperatures_with_the_covariance() -> None:
    X = blobs()
    ctx = context(X)
    plan = schedule(X, "entmax15")
    cov = weighted_covariance(X)
    C, sigma = anneal(ctx, plan, grown(X, ctx), cov)
    visited = [record["sigma"] for record in ctx.history]
    assert visited == plan.temperatures[: len(visited)] and visited[-1] == sigma
    skipped = [record for record in ctx.history if record["iterations"] == 0]
    assert skipped == ctx.history[: len(skipped)] and len(skipped) >= 1
    # No pass at the skipped temperatures; their records hold the collapsed state's.
    assert ctx.passes.passes[0]["sigma"] == plan.temperatures[len(skipped)]
    inertia = float(cov.trace()) * X.shape[0]
    assert all(record["inertia"] == pytest.approx(inertia) for record in skipped)
    assert sorted(closest_centres(C, X)) == [0, 1, 2]


def square_and_grid() -> tuple[torch.Tensor, torch.Tensor]:
    """A continuum (the unit square, uniform) and a 4 x 4 grid of centres on it."""
    X = torch.rand(2000, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    ticks = (torch.arange(4, dtype=torch.float64) + 0.5) / 4
    return X, torch.cartesian_prod(ticks, ticks)


def hot_cells_schedule(X: torch.Tensor, C: torch.Tensor, floor_over_cells: float) -> Schedule:
    """A schedule for the centres ``C`` ending ``floor_over_cells`` times their cells'
    mean squared radius, with colder temperatures below."""
    cells = float(torch.cdist(X, C).min(dim=1).values.square().mean())
    floor = floor_over_cells * cells
    temperatures = geometric_schedule(4 * floor, floor, 0.8)
    colder = geometric_schedule(floor, floor * 1e-4, 0.8)[1:]
    budget = annealing_budget(300)
    return Schedule(temperatures, "entmax15", 1, budget, 1.0, colder)


def annealed_grid(
    X: torch.Tensor, C0: torch.Tensor, floor_over_cells: float
) -> tuple[FitContext, Schedule]:
    """The grid annealed on the square over :func:`hot_cells_schedule`."""
    ctx = FitContext(
        RecordingWorkspace(X, None, 16, 64), Budget(300), 1e-10, torch.Generator().manual_seed(0)
    )
    plan = hot_cells_schedule(X, C0, floor_over_cells)
    anneal(ctx, plan, C0)
    return ctx, plan


def test_annealing_goes_on_below_the_floor_while_the_cells_are_hot() -> None:
    """Past a floor at twice the cells' mean squared radius the annealing goes on until
    the temperature is at most CELL_RATIO of it (or almost every point is hard)."""
    X, C0 = square_and_grid()
    ctx, plan = annealed_grid(X, C0, 2.0)
    visited = [record["sigma"] for record in ctx.history]
    assert visited[: len(plan.temperatures)] == plan.temperatures
    assert len(visited) > len(plan.temperatures)  # went on below the floor
    cold = [r["sigma"] <= CELL_RATIO * r["inertia"] / X.shape[0] for r in ctx.history]
    last = ctx.passes.passes[-1]
    assert cold[-1] or last["soft_weight"] <= SOFT_FRACTION_STOP * X.shape[0]
    assert not any(cold[len(plan.temperatures) - 1 : -1])


def test_annealing_ends_at_the_floor_where_the_cells_are_cold() -> None:
    X, C0 = square_and_grid()
    ctx, plan = annealed_grid(X, C0, 0.1)
    visited = [record["sigma"] for record in ctx.history]
    assert visited == plan.temperatures


@pytest.mark.parametrize("trade", (False, True))
@pytest.mark.parametrize(("floor", "cooling"), ((0.005, 0.1), (0.003, 0.05)))
def test_a_grown_fit_short_of_k_goes_on_past_a_cold_floor(
    trade: bool, floor: float, cooling: float
) -> None:
    """A floor reached with a few centres of sixteen is below a quarter of their cells,
    but the cells still to be split are what counts: the annealing goes on until its
    passes have all sixteen (a centre just split off has not been through one, and its
    pass's points being hard says nothing of its own)."""
    X, _ = square_and_grid()
    ctx = FitContext(
        RecordingWorkspace(X, None, 16, 64), Budget(300), 1e-10, torch.Generator().manual_seed(0)
    )
    lam = largest_eigenvalue(weighted_covariance(X))
    temperatures = geometric_schedule(
        1.1 * critical_temperature(lam, 2, "entmax15"), floor, cooling
    )
    colder = geometric_schedule(floor, floor * 1e-4, 0.5)[1:]
    plan = Schedule(temperatures, "entmax15", 1, annealing_budget(300), 1.0, colder)
    anneal(ctx, plan, Twins(X.mean(dim=0, keepdim=True), 16, ctx.generator, trade=trade))
    centres = [p["rows"] if p["twins_from"] is None else p["twins_from"] for p in ctx.passes.passes]
    at_floor = centres[len(temperatures) - 1]
    floor_inertia = ctx.history[len(temperatures) - 1]["inertia"]
    assert at_floor < 16 and floor <= CELL_RATIO * floor_inertia / X.shape[0]
    assert len(ctx.history) > len(temperatures)
    assert centres[-1] == 16
