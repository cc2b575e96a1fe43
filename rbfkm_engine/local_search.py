"""The local search: moves out of a Lloyd fixed point while they reach better ones.

Annealing follows the data's hierarchy of splits; on overlapping clusters of uneven size
that hierarchy can leave one centre too many in one region and one too few in another.
On a continuum (pixels' colours, image patches) with many centres the imbalance is
systematic: a cluster splits once the temperature falls below its own critical one, set by
its spread and not by its mass, so the annealing hands out centres for equal extents,
while K-Means' optimum gives dense regions smaller cells (at many centres every cell holds
about the same share of the inertia). Five searches run in turn (pricing math in
:mod:`~rbfkm_engine.swaps`, passes in :mod:`~rbfkm_engine.search_passes`):

- rebalancing: batches of disjoint split-merges, each priced to pay on its own, with one
  Lloyd phase per batch: tens of centres move across the data at the price of one move;
- split-merges one at a time: delete a centre and split a cluster in two by 2-means;
- one batch of Hartigan moves (every point that would lower the objective by moving);
- centre swaps: a candidate drawn by squared distance, moved to the mean of the points it
  would take, replaces the centre whose replacement lowers the inertia most;
- last, sweeps of Hartigan's method, one point at a time, where the fused CPU kernel runs
  them: the fit then ends on a fixed point of Hartigan's method, a subset of Lloyd's
  (clusters that touch have their boundary placed where moving a point, counting the
  shift of both means, no longer pays; Telgarsky and Vattani, 2010).

Every move is followed by Lloyd and kept only if its fixed point is better, so the result
is always a converged fixed point no worse than the one the search started from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .bounds import rounding_margin
from .context import FitContext
from .distances import squared_norms
from .init import draw_points
from .lloyd import lloyd
from .native import HartiganState
from .search_passes import (
    captured_means,
    cluster_halves,
    hartigan_moves,
    hartigan_sweep,
    label_means,
    swap_costs_of,
    sweeps_run,
)
from .swaps import (
    HARTIGAN_NEIGHBOURS,
    HARTIGAN_ROUNDS,
    HARTIGAN_SWEEPS,
    REBALANCE_SHARE,
    SPLIT_MERGE_TRIALS,
    SWAP_CANDIDATES,
    SWAP_MIN_GAIN,
    SWAP_PATIENCE,
    SWAP_TRIALS,
    disjoint_split_merges,
    ranked_split_merges,
    removal_costs,
    split_gain,
)

#: The local search's own budget, in iterations per ``max_iter``: its Lloyd phases settle
#: moves, and where Lloyd converges slowly (a continuum, many centres) the finish before it
#: may have used most of ``max_iter``, and each trial takes tens of iterations.
SEARCH_SHARE = 2.0


def search_budget(max_iter: int) -> int:
    """Iterations the local search may use, on top of a run's ``max_iter``."""
    return math.ceil(SEARCH_SHARE * max_iter)


def search(ctx: FitContext, C: torch.Tensor, converged: bool = True) -> tuple[torch.Tensor, bool]:
    """:func:`refine` from the Lloyd finish's centres ``C`` on a budget of its own: the
    run's budget extended by :func:`search_budget` of what it was. A finish that has not
    converged (``converged``) goes on in that budget first: on a continuum Lloyd may need
    more than ``max_iter``, and its fixed point is what the moves compete against. Returns
    the centres and whether they are a fixed point (``False``: the budget ran out or the
    fit was stopped before the finish converged)."""
    ctx.budget.extend(search_budget(ctx.budget.max_iter))
    if not converged:
        C, converged = lloyd(ctx, C)
        if not converged:
            return C, False
    return refine(ctx, C), True


@dataclass
class Halves:
    """Every cluster's two halves as a pricing of split-merges made them, with the
    clusters' centres and weights then: a cluster with the same centre and weight at the
    next pricing has the same points, and keeps its halves."""

    centres: torch.Tensor
    weight: torch.Tensor
    means: torch.Tensor
    mass: torch.Tensor

    def stale(self, centres: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """Mask of the clusters whose centre or weight has changed since."""
        return (self.centres != centres).any(dim=1) | (self.weight != weight)


@dataclass
class FixedPoint:
    """A converged fit the search competes against: its centres, each point's
    second-nearest squared distance and the inertia (the workspace holds its labels and
    nearest distances); and the halves of the last pricing of split-merges."""

    centres: torch.Tensor
    second: torch.Tensor
    inertia: float
    halves: Halves | None = None


def refine(ctx: FitContext, C: torch.Tensor) -> torch.Tensor:
    """Batched split-merges, split-merges, Hartigan moves, swaps, then sequential Hartigan
    moves from the Lloyd fixed point ``C``; returns the best fixed point reached."""
    if ctx.passes.k < 2:
        return C
    second, inertia = ctx.passes.two_nearest(C)
    best = FixedPoint(C, second, inertia)
    kept = rebalance(ctx, best)
    kept += split_merges(ctx, best)
    kept += hartigan(ctx, best)
    kept += swaps(ctx, best)
    kept += hartigan(ctx, best, sequential=True)
    ctx.say("moves kept={} inertia={:.6g}", kept, best.inertia)
    return best.centres


def settle(ctx: FitContext, best: FixedPoint, trial: torch.Tensor) -> tuple[bool, bool]:
    """Lloyd from ``trial``; ``best`` becomes its fixed point when that is better.

    Returns whether the trial was kept, and whether the search may go on (its Lloyd phase
    converged or was abandoned as bound to end worse; not when the budget ran out). A
    trial that is not kept leaves no record in ``history``, and the workspace gets
    ``best``'s labels and distances back from a copy, not from another pass.
    """
    ws = ctx.passes
    saved = ws.snapshot()
    records = len(ctx.history)
    level = (1.0 - SWAP_MIN_GAIN) * best.inertia
    trial, converged = lloyd(ctx, trial, phase="swap", abandon_above=level, warm=True)
    # The last record is the inertia before the last (tiny) shift, which cannot raise it.
    if converged and ctx.history[-1]["inertia"] < level:
        best.second, best.inertia = ws.two_nearest(trial)
        best.centres = trial
        return True, True
    abandoned = not converged and not ctx.budget.exhausted
    del ctx.history[records:]
    ws.restore(saved)
    return False, converged or abandoned


def split_merge_prices(
    ctx: FitContext, best: FixedPoint
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Every cluster's halves ``(k, 2, d)``, the inertia splitting it removes and the
    inertia deleting its centre adds (both ``(k,)``), at the fixed point ``best``.

    A move changes few clusters, and the Lloyd phase after it moves only the centres
    near them: the others keep the halves of the last pricing (``best.halves``), and the
    passes that split clusters go over the changed clusters' points alone. At many
    centres that is most of a pricing's cost saved after each kept move.
    """
    ws = ctx.passes
    weight = ws.reducer.sum(
        torch.bincount(ws.labels, weights=ws.w, minlength=ws.k).to(torch.float64)
    )
    stale = None if best.halves is None else best.halves.stale(best.centres, weight)
    halves, mass = cluster_halves(ws, best.centres, ctx.generator, only=stale)
    if stale is not None and best.halves is not None:
        kept = ~stale
        halves[kept], mass[kept] = best.halves.means[kept], best.halves.mass[kept]
    best.halves = Halves(best.centres, weight, halves, mass)
    removal = ws.reducer.sum(removal_costs(ws.min_dist, best.second, ws.labels, ws.w, ws.k))
    return halves, split_gain(mass, halves), removal


def split_merged(
    centres: torch.Tensor, halves: torch.Tensor, moves: list[tuple[int, int]]
) -> torch.Tensor:
    """A copy of ``centres`` after the moves ``(j, c)``: centre ``j`` deleted, cluster ``c``
    split into its halves (the first takes ``c``'s slot, the second ``j``'s)."""
    trial = centres.clone()
    for j, c in moves:
        trial[c], trial[j] = halves[c, 0], halves[c, 1]
    return trial


def rebalance(ctx: FitContext, best: FixedPoint) -> int:
    """Batches of disjoint split-merge moves, each followed by one Lloyd phase; returns
    how many moves were kept.

    A batch holds up to ``REBALANCE_SHARE`` of the centres' moves, each priced to pay on
    its own (:func:`~rbfkm_engine.swaps.disjoint_split_merges`); the prices ignore the
    moves' interactions, so a batch that ends worse is halved and tried again, down to
    two moves. Without moves that pay at once, the one-by-one search takes over.
    """
    batch = int(REBALANCE_SHARE * ctx.passes.k)
    kept_moves = 0
    while batch >= 2 and not ctx.budget.exhausted:
        halves, gain, removal = split_merge_prices(ctx, best)
        moves = disjoint_split_merges(gain, removal, batch)
        if len(moves) < 2:
            break
        kept, go_on = settle(ctx, best, split_merged(best.centres, halves, moves))
        ctx.say("rebalance moves={} kept={} inertia={:.6g}", len(moves), kept, best.inertia)
        if kept:
            kept_moves += len(moves)
        else:
            batch = len(moves) // 2
        if not go_on:
            break
    return kept_moves


def split_merges(ctx: FitContext, best: FixedPoint) -> int:
    """Split-merge moves while one reaches a better fixed point; returns how many were kept.

    At each fixed point the ``SPLIT_MERGE_TRIALS`` best-priced moves are tried in turn
    with Lloyd; the first that ends better is kept and the search starts again from it.
    """
    kept_moves = 0
    moves: list[tuple[int, int]] | None = None
    failures = 0
    while not ctx.budget.exhausted:
        if moves is None:
            halves, gain, removal = split_merge_prices(ctx, best)
            moves = ranked_split_merges(gain, removal, SPLIT_MERGE_TRIALS)
        if failures >= len(moves):
            break
        trial = split_merged(best.centres, halves, moves[failures : failures + 1])
        kept, go_on = settle(ctx, best, trial)
        if kept:
            kept_moves += 1
            moves, failures = None, 0
        else:
            failures += 1
            if not go_on:
                break
    ctx.say("split-merges={} inertia={:.6g}", kept_moves, best.inertia)
    return kept_moves


def hartigan(ctx: FitContext, best: FixedPoint, sequential: bool = False) -> int:
    """Hartigan moves from ``best``'s labels, then Lloyd, kept when that fixed point is
    better; returns 1 when kept, else 0.

    At most ``HARTIGAN_ROUNDS`` batches of moves; with ``sequential``, sweeps of moves one
    point at a time (:func:`~rbfkm_engine.search_passes.hartigan_sweep`), which end on a
    fixed point of Hartigan's method, where the kernel runs them (elsewhere nothing).
    """
    ws = ctx.passes
    labels = ws.labels.clone()  # moved on a copy: the workspace keeps best's, for settle
    means, mass = label_means(ws, labels, best.centres)
    if sequential:
        swept = _hartigan_sweeps(ctx, best, labels, means, mass)
        if swept is None:
            return 0
        means = swept.to(means.dtype)
    else:
        for _ in range(HARTIGAN_ROUNDS):
            if hartigan_moves(ws, labels, means, mass) == 0:
                break
            means, mass = label_means(ws, labels, means)
    if torch.equal(means, best.centres):
        return 0
    kept, _ = settle(ctx, best, means)
    ctx.say("hartigan sequential={} kept={} inertia={:.6g}", sequential, kept, best.inertia)
    return int(kept)


def _hartigan_sweeps(
    ctx: FitContext,
    best: FixedPoint,
    labels: torch.Tensor,
    means: torch.Tensor,
    mass: torch.Tensor,
) -> torch.Tensor | None:
    """Sweeps of Hartigan's method from ``best``'s ``labels`` (moved in place) and their
    clusters' ``means`` and ``mass`` until one saves less than a kept move must, at most
    ``HARTIGAN_SWEEPS``; returns the means (float64), ``None`` where the sweeps cannot run.

    The first sweep's bounds come from ``best``: a point is at least its second-nearest
    distance from the other centres, less the farthest a mean is from its centre and the
    distances' rounding.
    """
    ws = ctx.passes
    if not sweeps_run(ws):
        return None
    gap = float((means - best.centres).double().norm(dim=1).max())
    c_sq_max = float(squared_norms(best.centres).max())
    gap += rounding_margin(ws.x_sq_max, c_sq_max, ws.X.shape[1], ws.X.dtype)
    lower = best.second.double().clamp_min(0.0).sqrt_().sub_(gap)
    state = HartiganState(labels, means.double(), mass.double(), lower)
    for _ in range(HARTIGAN_SWEEPS):
        state.sort_gaps(HARTIGAN_NEIGHBOURS, ws.pool)
        moved = hartigan_sweep(ws, state)
        if moved is None:
            return None
        # Stop once a sweep saves less than a kept move must (the savings fall off).
        if moved == 0 or state.gain <= SWAP_MIN_GAIN * best.inertia or ctx.budget.exhausted:
            break
    return state.means


def swaps(ctx: FitContext, best: FixedPoint) -> int:
    """Centre swaps while they pay; returns how many were kept.

    Each round draws ``SWAP_CANDIDATES`` points by squared distance, moves each to the
    mean of the points it would take (:func:`~rbfkm_engine.search_passes.captured_means`)
    and prices it against every centre in one pass; the best swap is made when it lowers
    the inertia by more than ``SWAP_MIN_GAIN``, and the first ``SWAP_TRIALS`` best ones
    that do not pay at once are tried all the same (a centre that leaves a region split
    in two often pays only after Lloyd has re-centred the others). The search stops after
    ``SWAP_PATIENCE`` rounds in a row without a kept swap.
    """
    ws = ctx.passes
    kept_swaps = failures = 0
    trials = SWAP_TRIALS
    while failures < SWAP_PATIENCE and not ctx.budget.exhausted:
        score = ws.min_dist if ws.w is None else ws.w * ws.min_dist
        if not ws.reducer.sum_floats(float(score.sum()))[0] > 0.0:
            break  # every point sits on a centre
        drawn = draw_points(ws.X, score, SWAP_CANDIDATES, ctx.generator, ws.reducer)
        P = captured_means(ws, drawn)
        costs = swap_costs_of(ws, P, best.second)
        j, b = divmod(int(torch.argmin(costs)), costs.shape[1])
        if not float(costs[j, b]) < (1.0 - SWAP_MIN_GAIN) * best.inertia:
            if trials <= 0:
                failures += 1
                continue
            trials -= 1
        trial = best.centres.clone()
        trial[j] = P[b].to(trial.dtype)
        kept, go_on = settle(ctx, best, trial)
        if kept:
            failures = 0
            kept_swaps += 1
            continue
        failures += 1
        if not go_on:
            break
    return kept_swaps
