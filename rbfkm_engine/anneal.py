"""The annealing phase: warm-started fixed-point iterations over falling temperatures.

At each temperature of the schedule the fused E/M pass is repeated until the centres
move less than ``tol``, at most ``iterations_per_sigma`` times (see
:func:`~rbfkm_engine.temperature.iterations_per_temperature`); the temperature then falls.
Grown fits (:class:`~rbfkm_engine.twins.Twins`) split and merge their centres between
temperatures. Annealing hands over to Lloyd once at most ``SOFT_FRACTION_STOP`` of the
points (by weight) are still soft: the M-step is then the K-Means one but for those few,
and colder temperatures would only repeat Lloyd at the price of a soft pass each.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from .context import FitContext
from .progress import IterationStats, record
from .temperature import CELL_RATIO, collapsed_objective
from .twins import Twins

#: Annealing hands over to Lloyd once at most this fraction of the points (by weight) is
#: still soft.
SOFT_FRACTION_STOP = 3e-2
#: Share of ``max_iter`` kept for the final Lloyd phase.
LLOYD_SHARE = 0.2


@dataclass(frozen=True)
class Schedule:
    """How to anneal: the temperatures, the map, and the iterations they may spend."""

    temperatures: list[float]
    assignment: str
    iterations_per_sigma: int
    budget_iter: int  # iterations annealing may use, all temperatures together
    #: A grown fit anneals to up to this many times ``k`` centres (see
    #: :mod:`~rbfkm_engine.overshoot`).
    overshoot: float = 1.0
    #: Temperatures past the last one that a fit goes on through while its cells are
    #: still hot (:func:`~rbfkm_engine.temperature.colder_temperatures`).
    colder: list[float] = field(default_factory=list)


class _Fixed:
    """Centres annealed as given (an ``init`` array): no twins, no splits, no merges."""

    twins_from = None
    twins = None

    def __init__(self, C: torch.Tensor) -> None:
        self.centres = C

    def stacked(self) -> torch.Tensor:
        return self.centres

    def unstack(self, full: torch.Tensor) -> None:
        self.centres = full


def anneal(
    ctx: FitContext,
    schedule: Schedule,
    centres: Twins | torch.Tensor,
    covariance: torch.Tensor | None = None,
) -> tuple[torch.Tensor, float]:
    """Anneal over ``schedule``; returns ``n_clusters`` centres and the last temperature.

    ``centres``: :class:`~rbfkm_engine.twins.Twins` to grow from the weighted mean, or the
    initial centres to anneal as they are. ``covariance``: the data's weighted covariance
    (float64), when the caller has it: a grown fit's lone first pair then skips the
    hottest temperatures, where its offset is far below the radius, by the linearised map;
    their ``history`` records hold the collapsed state's statistics and 0 iterations.
    """
    temperatures = schedule.temperatures + schedule.colder
    state = centres if isinstance(centres, Twins) else _Fixed(centres)
    sigma_reached = temperatures[0] if temperatures else 0.0
    start = 0
    if isinstance(state, Twins) and state.n_clusters > 1:
        start = _launch(ctx, state, schedule, covariance)
        if start:
            sigma_reached = temperatures[start - 1]
    if isinstance(state, Twins) and ctx.path is not None and temperatures:
        ctx.path.start(temperatures[0], state.centres.shape[0])
    warm = False
    for t, sigma in enumerate(temperatures[start:], start):
        if ctx.budget.n_iter >= schedule.budget_iter or ctx.budget.stopped:
            break
        stats, den, iters = _iterate_at(ctx, schedule, temperatures, state, t, warm)
        sigma_reached = sigma
        record(ctx.history, sigma, stats, iters)
        warm = True
        passed = state.centres.shape[0]  # the centres of this temperature's passes
        if isinstance(state, Twins):
            before = state.centres
            warm = not state.after_temperature(state.radii(den, stats.spread), den)
            if not warm and state.successors is not None:
                ctx.passes.follow(state.successors)
            if ctx.path is not None:
                ctx.path.change(sigma, before, state.centres.shape[0])
        ctx.say(
            "sigma={:.4g} iters={} centres={} J={:.6g} inertia={:.6g} nnz/row={:.3g} soft={}",
            sigma,
            iters,
            state.centres.shape[0],
            stats.objective,
            stats.inertia,
            stats.mean_nnz,
            stats.n_soft,
        )
        if _nearly_hard(ctx, state, passed, stats) or _cold(ctx, schedule, passed, t, sigma, stats):
            break
    C = state.centres
    k = ctx.passes.k
    if C.shape[0] < k:
        C = ctx.passes.add_farthest(C, k - C.shape[0])
    return C, sigma_reached


def _nearly_hard(
    ctx: FitContext, state: Twins | _Fixed, centres: int, stats: IterationStats
) -> bool:
    """Whether annealing hands over to Lloyd after this temperature: its passes had the
    fit's ``k`` centres at least (``centres``; those just split off have not been through
    one) and at most ``SOFT_FRACTION_STOP`` of the points (by weight) were soft. While
    twins remain (a fit annealing past ``k``, see :mod:`~rbfkm_engine.overshoot`), a point
    shared by a centre and its twin alone counts as hard: well-separated clusters hand over
    at ``k`` centres as they would without twins, and only splits that come while the
    points are still shared add cells."""
    ws = ctx.passes
    if centres < ws.k:
        return False
    weight = stats.soft_weight if state.twins is None else stats.shared_weight
    return weight <= SOFT_FRACTION_STOP * ws.total_weight


def _cold(
    ctx: FitContext, schedule: Schedule, centres: int, t: int, sigma: float, stats: IterationStats
) -> bool:
    """Whether annealing ends after the ``t``-th temperature, ``sigma``, at the schedule's
    floor or below it: there, once its passes had the fit's ``k`` centres (``centres``)
    and ``sigma`` is at most ``CELL_RATIO`` of the cells' mean squared radius (the last
    pass's inertia per weight). A grown fit still short of ``k`` goes on: its cells are
    those of fewer, larger clusters, which the centres still to come will split. Without
    colder temperatures to go on to, the loop ends at the floor by itself."""
    if t < len(schedule.temperatures) - 1 or not schedule.colder or centres < ctx.passes.k:
        return False
    return sigma <= CELL_RATIO * stats.inertia / ctx.passes.total_weight


def _launch(
    ctx: FitContext, twins: Twins, schedule: Schedule, covariance: torch.Tensor | None
) -> int:
    """Give the first centre its twin; returns the temperatures it skipped (recorded as
    the collapsed state's), 0 when it was launched from a pass at the first one."""
    temperatures = schedule.temperatures
    ws = ctx.passes
    if covariance is None:
        C = twins.centres
        _, den, stats = ws.step(C, temperatures[0], schedule.assignment, need_spread=True)
        twins.launch(stats.spread / den.clamp_min(1e-300))
        return 0
    start = twins.launch_linearly(covariance, temperatures, schedule.assignment)
    inertia = float(covariance.trace()) * ws.total_weight
    C = twins.centres
    for sigma in temperatures[:start]:
        collapsed = IterationStats(
            objective=collapsed_objective(inertia, ws.total_weight, sigma, schedule.assignment),
            inertia=inertia,
            mean_nnz=1.0,  # the twin counts with its centre
            n_soft=ws.n_total,
            soft_weight=ws.total_weight,
            spread=torch.full((1,), inertia, dtype=C.dtype, device=C.device),
        )
        record(ctx.history, sigma, collapsed, 0)
    if start:
        hottest, last = temperatures[0], temperatures[start - 1]
        ctx.say("sigma={:.4g}..{:.4g} twin grown linearly", hottest, last)
    return start


def _iterate_at(
    ctx: FitContext,
    schedule: Schedule,
    temperatures: list[float],
    state: Twins | _Fixed,
    t: int,
    warm: bool,
) -> tuple[IterationStats, torch.Tensor, int]:
    """Fixed-point iterations at the ``t``-th of ``temperatures`` (the schedule's, then
    its colder ones) until the centres move less than ``tol`` or its share of the budget
    is spent. Returns the last pass's statistics and masses, and the number of
    iterations."""
    budget, ws = ctx.budget, ctx.passes
    sigma, length = temperatures[t], len(schedule.temperatures)
    spare = schedule.budget_iter - budget.n_iter
    left = max(1, length - t)  # the colder temperatures share what the schedule left
    cap = min(schedule.iterations_per_sigma, max(2, math.ceil(2 * spare / left)))
    grown = isinstance(state, Twins)
    iters = 0
    while iters < cap and budget.n_iter < schedule.budget_iter:
        full = state.stacked()
        num, den, stats = ws.step(
            full,
            sigma,
            schedule.assignment,
            warm=warm or iters > 0,
            need_spread=grown,
            twins_from=state.twins_from,
        )
        full_new, _ = ws.update(full, num, den, reseed=False)
        shift = float(((full_new - full) ** 2).sum())
        state.unstack(full_new)
        iters += 1
        fraction = (1.0 - LLOYD_SHARE) * min(1.0, (t + min(1.0, iters / cap)) / length)
        budget.tick(sigma, stats.objective, fraction, "anneal")
        if budget.stopped or shift <= ctx.tol:
            break
    return stats, den, iters
