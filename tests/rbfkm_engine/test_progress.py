"""Progress: the budget every phase draws on, what the callback is told, and the
``history_`` records."""

from __future__ import annotations

import dataclasses
import itertools
import typing

import pytest
import torch

from rbfkm_engine.progress import (
    PHASES,
    Budget,
    FitInterrupted,
    FitProgress,
    IterationStats,
    Phase,
    interrupter,
    record,
)


def test_ticks_count_until_the_budget_is_exhausted() -> None:
    budget = Budget(3)
    assert not budget.exhausted and budget.n_iter == 0
    for i in range(3):
        assert not budget.exhausted
        budget.tick(1.0, 2.0, 0.1 * i, "anneal")
    assert budget.n_iter == 3
    assert budget.exhausted and not budget.stopped


def test_an_extended_budget_allows_more_and_its_fraction_goes_on_rising() -> None:
    budget = Budget(6)
    for _ in range(2):  # annealing
        budget.tick(1.0, 1.0, 0.1, "anneal")
    fractions = []
    for _ in range(4):  # the Lloyd finish spends the rest
        fractions.append(budget.lloyd_fraction(0.8))
        budget.tick(0.0, 1.0, fractions[-1], "lloyd")
    assert budget.exhausted and fractions[-1] == pytest.approx(1.0)
    assert budget.lloyd_from == (2, 0.8)
    budget.extend(3)
    assert not budget.exhausted and budget.max_iter == 9
    for _ in range(3):
        fractions.append(budget.lloyd_fraction(0.8))
        budget.tick(0.0, 1.0, fractions[-1], "swap")
    assert budget.exhausted and budget.n_iter == 9
    assert all(b >= a for a, b in itertools.pairwise(fractions))
    assert fractions[-1] == pytest.approx(1.0)


def test_an_extension_midway_keeps_the_fraction_reached() -> None:
    budget = Budget(10)
    budget.tick(0.0, 1.0, budget.lloyd_fraction(0.5), "lloyd")
    reached = 0.5 + 0.5 * 1 / 10
    budget.extend(5)
    assert budget.lloyd_from == (1, pytest.approx(reached))
    assert budget.lloyd_fraction(0.5) == pytest.approx(reached + (1.0 - reached) / 5)


def test_the_callback_is_told_every_tick() -> None:
    seen: list[FitProgress] = []
    budget = Budget(10, seen.append, iteration_offset=4)
    budget.tick(2.5, -1.0, 0.25, "anneal")
    budget.tick(0.0, 3.0, 0.9, "lloyd")
    budget.tick(0.0, 2.0, 0.95, "swap")
    assert seen == [
        FitProgress(sigma=2.5, iteration=5, objective=-1.0, fraction=0.25, phase="anneal"),
        FitProgress(sigma=0.0, iteration=6, objective=3.0, fraction=0.9, phase="lloyd"),
        FitProgress(sigma=0.0, iteration=7, objective=2.0, fraction=0.95, phase="swap"),
    ]
    assert not budget.stopped  # None is not a stop


@pytest.mark.parametrize("answer", (True, 1, "stop"))
def test_a_truthy_answer_stops_the_run(answer: object) -> None:
    budget = Budget(10, lambda info: answer if info.iteration == 2 else False)
    budget.tick(1.0, 1.0, 0.1, "anneal")
    assert not budget.stopped and not budget.exhausted
    budget.tick(1.0, 1.0, 0.2, "anneal")
    assert budget.stopped and budget.exhausted
    assert budget.n_iter == 2


def test_fractions_are_placed_within_a_fit_of_several_runs() -> None:
    # The second of four runs reports its own progress in [0.25, 0.5], capped at 1.
    seen: list[float] = []
    budget = Budget(10, lambda info: seen.append(info.fraction), offset=0.25, scale=0.25)
    for fraction in (0.0, 0.5, 1.0):
        budget.tick(0.0, 0.0, fraction, "lloyd")
    assert seen == [0.25, 0.375, 0.5]
    late = Budget(10, lambda info: seen.append(info.fraction), offset=0.9, scale=0.5)
    late.tick(0.0, 0.0, 1.0, "lloyd")
    assert seen[-1] == 1.0


def test_phases_are_the_literal_in_the_order_a_fit_meets_them() -> None:
    assert PHASES == ("anneal", "lloyd", "swap")
    assert typing.get_args(Phase) == PHASES


def test_fit_progress_is_frozen() -> None:
    info = FitProgress(1.0, 1, 0.0, 0.5, "anneal")
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.sigma = 2.0  # type: ignore[misc]


def test_record_keys_and_types() -> None:
    history: list[dict[str, float]] = []
    stats = IterationStats(
        objective=-3.5,
        inertia=2.0,
        mean_nnz=1.25,
        n_soft=7,
        soft_weight=6.5,
        spread=torch.zeros(3),
    )
    record(history, 4, stats, 3)
    record(history, 0.0, stats, 1)
    assert history == [
        {"sigma": 4.0, "objective": -3.5, "inertia": 2.0, "iterations": 3, "mean_nnz": 1.25},
        {"sigma": 0.0, "objective": -3.5, "inertia": 2.0, "iterations": 1, "mean_nnz": 1.25},
    ]
    assert type(history[0]["sigma"]) is float


def test_interrupter_raises_once_should_stop_says_so() -> None:
    interrupter(None)()  # no should_stop: never stops
    answers = iter([False, True])
    check = interrupter(lambda: next(answers))
    check()
    with pytest.raises(FitInterrupted):
        check()
    assert not issubclass(FitInterrupted, ValueError)  # not the caller's bad input
