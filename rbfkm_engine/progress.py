"""What a fit reports while it runs: the callback's :class:`FitProgress`, the iteration
budget all phases draw on, the ``history_`` records, and the ``should_stop`` hook.

The callback hears every fixed-point iteration; a fit's work between two iterations can
be long (k-means++ seeding, the local search's pricing passes, merging ``k`` centres), so
a fit also takes ``should_stop``, a cheap check without arguments polled between the
blocks of every pass and every step of its other long loops (:func:`interrupter`). Once it
returns ``True`` the fit raises :class:`FitInterrupted` at once: no last pass, nothing
fitted. The callback's own stop, by contrast, ends the run at its next iteration with
consistent fitted attributes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, get_args

import torch

Phase = Literal["anneal", "lloyd", "swap"]
#: The phases a :class:`FitProgress` may name, in the order a fit meets them.
PHASES: tuple[Phase, ...] = get_args(Phase)


@dataclass(frozen=True)
class FitProgress:
    """What a fit callback is told after each fixed-point iteration."""

    sigma: float  # temperature of the iteration; 0.0 in the final Lloyd phase
    iteration: int  # iterations so far, all temperatures together
    objective: float  # J_sigma at the centres the iteration started from
    fraction: float  # estimate of the share of the fit done, in [0, 1]
    phase: Phase  # "anneal", "lloyd", or "swap" (the Lloyd phase after a move)


Callback = Callable[[FitProgress], "bool | None"]
#: ``should_stop``: called often (between blocks), so it must be cheap (read a flag).
StopCheck = Callable[[], bool]
#: What the phases call between blocks: returns, or raises :class:`FitInterrupted`.
Interrupt = Callable[[], None]


class FitInterrupted(RuntimeError):
    """A fit's ``should_stop`` returned ``True``: the fit ended at once, fitting nothing."""


def _never() -> None:
    """The check of a fit without ``should_stop``."""


def interrupter(should_stop: StopCheck | None) -> Interrupt:
    """The check the phases call between blocks: raises :class:`FitInterrupted` once
    ``should_stop()`` is true (a no-op without ``should_stop``)."""
    if should_stop is None:
        return _never

    def check() -> None:
        if should_stop():
            raise FitInterrupted("the fit was stopped by its should_stop check")

    return check


@dataclass
class IterationStats:
    """Totals of one pass over the data (weighted)."""

    objective: float
    inertia: float
    mean_nnz: float
    n_soft: int
    soft_weight: float  # weight of the n_soft points
    spread: torch.Tensor  # per centre: sum_i w_i R_ij D_ij
    #: Weight of the points shared by two centres or more, a centre's twin counted with it
    #: (a point shared by a centre and its twin alone is hard here).
    shared_weight: float = 0.0


class Budget:
    """The iterations all phases of one run draw on, and the progress callback.

    ``max_iter``: the iterations the run may use, annealing and Lloyd first; the local
    search raises it by a budget of its own (:meth:`extend`). ``offset`` and ``scale``
    place this run's ``fraction`` within a fit of several runs (``n_init``);
    ``iteration_offset`` counts the iterations of the runs before it.
    """

    def __init__(
        self,
        max_iter: int,
        callback: Callback | None = None,
        offset: float = 0.0,
        scale: float = 1.0,
        iteration_offset: int = 0,
    ) -> None:
        self.max_iter = max_iter
        self.n_iter = 0
        self.iteration_offset = iteration_offset
        self.callback = callback
        self.offset = offset
        self.scale = scale
        self.stopped = False
        # The iteration and the progress fraction the Lloyd phases' share of the progress
        # runs on from: where the first Lloyd phase began, then where the budget was
        # extended (the local search's Lloyd phases go on from there).
        self.lloyd_from: tuple[int, float] | None = None

    @property
    def exhausted(self) -> bool:
        """Whether the run must end: the callback stopped it or ``max_iter`` is spent."""
        return self.stopped or self.n_iter >= self.max_iter

    def lloyd_fraction(self, start: float) -> float:
        """The progress fraction a Lloyd phase's next iteration reaches: from ``start`` where
        the first Lloyd phase began to 1 at the end of the budget."""
        if self.lloyd_from is None:
            self.lloyd_from = (self.n_iter, start)
        return self._lloyd_progress(self.n_iter + 1)

    def extend(self, iterations: int) -> None:
        """Allow ``iterations`` more from now (the local search's own budget); the progress
        fraction goes on from where the last iteration left it."""
        if self.lloyd_from is not None:
            self.lloyd_from = (self.n_iter, min(1.0, self._lloyd_progress(self.n_iter)))
        self.max_iter = self.n_iter + iterations

    def _lloyd_progress(self, done: int) -> float:
        """The progress fraction after ``done`` iterations of the run, on the Lloyd
        phases' share (``lloyd_from`` set)."""
        assert self.lloyd_from is not None
        first, base = self.lloyd_from
        return base + (1.0 - base) * (done - first) / max(1, self.max_iter - first)

    def tick(self, sigma: float, objective: float, fraction: float, phase: Phase) -> None:
        """Count one iteration and tell the callback (which may stop the run)."""
        self.n_iter += 1
        if self.callback is None:
            return
        info = FitProgress(
            sigma=sigma,
            iteration=self.iteration_offset + self.n_iter,
            objective=objective,
            fraction=min(1.0, self.offset + self.scale * fraction),
            phase=phase,
        )
        if self.callback(info):
            self.stopped = True


def record(
    history: list[dict[str, float]], sigma: float, stats: IterationStats, iters: int
) -> None:
    """Append one ``history_`` record: a temperature (or a Lloyd phase, ``sigma = 0``)."""
    history.append(
        {
            "sigma": float(sigma),
            "objective": stats.objective,
            "inertia": stats.inertia,
            "iterations": iters,
            "mean_nnz": stats.mean_nnz,
        }
    )
