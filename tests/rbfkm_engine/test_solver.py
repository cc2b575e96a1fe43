"""One run of a fit: annealing, then Lloyd, then the local search, then a last hard pass
whose labels are ``predict``'s."""

from __future__ import annotations

from itertools import pairwise

import pytest
import torch

from rbfkm_engine import local_search
from rbfkm_engine.anneal import Schedule
from rbfkm_engine.local_search import search_budget
from rbfkm_engine.moments import largest_eigenvalue, weighted_covariance
from rbfkm_engine.passes import Workspace
from rbfkm_engine.progress import PHASES, FitProgress
from rbfkm_engine.solver import SolverResult, annealing_budget, solve
from rbfkm_engine.temperature import (
    critical_temperature,
    geometric_schedule,
    iterations_per_temperature,
)

from .conftest import blob_tensor, make_context

# Two blobs close together and two far apart: annealing has splits to make and the
# local search something to try.
BLOBS = [[-10.0, 0.0], [-7.0, 0.0], [10.0, 0.0], [0.0, 12.0]]


def data() -> torch.Tensor:
    return blob_tensor(BLOBS, n_per=50, spread=0.6, seed=2)


def schedule(X: torch.Tensor, assignment: str = "entmax15", max_iter: int = 300) -> Schedule:
    lam = largest_eigenvalue(weighted_covariance(X))
    sigma0 = 1.1 * critical_temperature(lam, 2, assignment)
    temperatures = geometric_schedule(sigma0, 1e-4 * 2.0 * lam, 0.8, max_length=max_iter)
    return Schedule(
        temperatures, assignment, iterations_per_temperature(0.8), annealing_budget(max_iter)
    )


def run(
    X: torch.Tensor,
    plan: Schedule,
    C0: torch.Tensor | None = None,
    max_iter: int = 300,
    callback=None,
    covariance: torch.Tensor | None = None,
) -> SolverResult:
    ctx = make_context(X, len(BLOBS), tol=1e-10, max_iter=max_iter, callback=callback)
    return solve(ctx, plan, C0, covariance)


@pytest.mark.parametrize("assignment", ("softmax", "entmax15"))
def test_the_phases_run_in_order(assignment: str) -> None:
    X = data()
    seen: list[FitProgress] = []
    plan = schedule(X, assignment)
    result = run(X, plan, callback=seen.append)
    sigmas = [record["sigma"] for record in result.history]
    annealed = [s for s in sigmas if s > 0.0]
    # Annealing records (falling temperatures), then Lloyd records (sigma 0), never mixed.
    assert len(annealed) >= 2 and sigmas[: len(annealed)] == annealed
    assert all(b < a for a, b in pairwise(annealed))
    assert annealed == plan.temperatures[: len(annealed)]
    assert len(sigmas) > len(annealed) and all(s == 0.0 for s in sigmas[len(annealed) :])
    assert result.sigma == annealed[-1]
    # The callback hears every phase, in PHASES order: anneal, lloyd, then the local
    # search's trials (here none is kept: the records end with the one Lloyd phase).
    phases = [info.phase for info in seen]
    order = [PHASES.index(phase) for phase in phases]
    assert order == sorted(order) and set(phases) == set(PHASES)
    assert len(sigmas) == len(annealed) + 1
    assert result.converged and not result.stopped_early
    assert result.centres.shape == (4, 2)


def test_an_empty_schedule_is_plain_lloyd() -> None:
    X = data()
    seen: list[FitProgress] = []
    C0 = X[[0, 1, 2, 3]].clone()  # all in the first blob
    result = run(X, Schedule([], "hard", 1, annealing_budget(300)), C0, callback=seen.append)
    assert len(result.history) == 1
    (record,) = result.history
    assert record["sigma"] == 0.0 and record["iterations"] == result.n_iter
    assert result.sigma == 0.0 and result.converged
    assert {info.phase for info in seen} == {"lloyd"}  # no annealing, no local search
    # The start was a copy: the caller's centres are untouched.
    torch.testing.assert_close(C0, X[[0, 1, 2, 3]])


def test_without_schedule_or_centres_the_mean_is_topped_up_farthest_first() -> None:
    X = data()
    result = run(X, Schedule([], "hard", 1, annealing_budget(300)))
    assert result.centres.shape == (4, 2) and result.converged
    assert len(torch.unique(result.labels)) == 4


@pytest.mark.parametrize("assignment", ("softmax", "entmax15", "hard"))
def test_labels_and_inertia_are_a_fresh_hard_pass(assignment: str) -> None:
    X = data()
    plan = schedule(X, assignment) if assignment != "hard" else Schedule([], "hard", 1, 240)
    result = run(X, plan, None if assignment != "hard" else X[[0, 50, 100, 150]].clone())
    fresh = Workspace(X, None, 4, chunk_size=1000)
    inertia = fresh.hard_labels(result.centres)
    torch.testing.assert_close(result.labels, fresh.labels, rtol=0, atol=0)
    assert result.inertia == pytest.approx(inertia, rel=1e-12)
    # One centre per blob.
    per_blob = result.labels.reshape(4, 50)
    assert sorted(int(row.mode().values) for row in per_blob) == [0, 1, 2, 3]
    assert all(bool((row == row[0]).all()) for row in per_blob)


def test_n_iter_counts_the_budget_ticks() -> None:
    X = data()
    seen: list[FitProgress] = []
    result = run(X, schedule(X), callback=seen.append)
    assert result.n_iter == len(seen) > 0
    assert [info.iteration for info in seen] == list(range(1, result.n_iter + 1))
    assert result.n_iter <= 300 + search_budget(300)
    # Every kept record's iterations were ticked (trials not kept leave no record).
    assert sum(record["iterations"] for record in result.history) <= result.n_iter


def test_max_iter_bounds_annealing_and_the_finish(monkeypatch: pytest.MonkeyPatch) -> None:
    # Without the local search's budget the run stops at max_iter, off a fixed point.
    monkeypatch.setattr(local_search, "search_budget", lambda max_iter: 0)
    X = data()
    result = run(X, schedule(X, max_iter=6), max_iter=6)
    assert result.n_iter == 6
    assert not result.converged and not result.stopped_early
    assert result.centres.shape == (4, 2)


def test_an_unconverged_finish_goes_on_in_the_search_budget() -> None:
    # The finish max_iter cuts short goes on in the local search's budget, converges there
    # (the run then ends on a fixed point) and leaves the rest to the moves.
    X = data()
    result = run(X, schedule(X, max_iter=6), max_iter=6)
    assert result.converged and not result.stopped_early
    assert 6 < result.n_iter <= 6 + search_budget(6)
    finishes = [record for record in result.history if record["sigma"] == 0.0]
    assert len(finishes) >= 2  # the finish cut at max_iter, then its continuation
    fresh = Workspace(X, None, 4, chunk_size=1000)
    fresh.hard_labels(result.centres)
    means = torch.stack([X[fresh.labels == j].mean(0) for j in range(4)])
    torch.testing.assert_close(means, result.centres, rtol=0.0, atol=1e-6)


def _finish_end(result: SolverResult) -> int:
    """Iterations of annealing and the first Lloyd phase (the finish)."""
    records = result.history
    first = next(i for i, record in enumerate(records) if record["sigma"] == 0.0)
    return sum(record["iterations"] for record in records[: first + 1])


def test_the_local_search_has_a_budget_of_its_own() -> None:
    # A max_iter the annealing and the finish use up entirely still leaves the search a
    # budget of its own: here all it needs, so the run is the same as with 300.
    X = data()
    plan = schedule(X)
    full = run(X, plan)
    finish = _finish_end(full)
    assert full.n_iter - finish > 0  # the search ran
    assert full.n_iter - finish <= search_budget(finish)
    tight = run(X, plan, max_iter=finish)
    assert tight.converged and tight.n_iter == full.n_iter > finish
    torch.testing.assert_close(tight.centres, full.centres)


def test_the_local_search_stops_at_its_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    X = data()
    plan = schedule(X)
    finish = _finish_end(run(X, plan))
    monkeypatch.setattr(local_search, "search_budget", lambda max_iter: 2)
    result = run(X, plan, max_iter=finish)
    assert result.n_iter == finish + 2
    # A trial cut short by the budget is not kept: the run ends on the finish's fixed point.
    assert result.converged and not result.stopped_early
    assert [record["sigma"] for record in result.history].count(0.0) == 1


def test_a_callback_stop_ends_the_run_with_consistent_results() -> None:
    X = data()
    result = run(X, schedule(X), callback=lambda info: info.iteration >= 4)
    assert result.stopped_early and result.n_iter == 4
    assert result.centres.shape == (4, 2)
    fresh = Workspace(X, None, 4, chunk_size=1000)
    assert result.inertia == pytest.approx(fresh.hard_labels(result.centres), rel=1e-12)
    torch.testing.assert_close(result.labels, fresh.labels)


def test_the_covariance_only_shortens_the_first_twins_way() -> None:
    X = data()
    plan = schedule(X)
    plain = run(X, plan)
    linear = run(X, plan, covariance=weighted_covariance(X))
    skipped = [record for record in linear.history if record["iterations"] == 0]
    assert len(skipped) >= 1 and linear.n_iter < plain.n_iter
    assert linear.inertia == pytest.approx(plain.inertia, rel=1e-6)


@pytest.mark.parametrize(("max_iter", "budget"), [(1, 0), (2, 1), (5, 4), (10, 8), (300, 240)])
def test_annealing_leaves_lloyd_its_share(max_iter: int, budget: int) -> None:
    assert annealing_budget(max_iter) == budget
