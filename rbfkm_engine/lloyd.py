"""The Lloyd finish: hard iterations until the centres stop moving (a K-Means fixed point).

Lloyd passes keep the M-step sums and correct them for the points that moved, and compute
an ``argmin`` only where the previous label stopped being the nearest (see
:mod:`~rbfkm_engine.passes`). The same phase settles every move of the local search
(``phase="swap"``), where a trial bound to end worse than the fit it competes with is
abandoned early.
"""

from __future__ import annotations

import torch

from .anneal import LLOYD_SHARE
from .context import FitContext
from .progress import Phase, record

#: A trial's Lloyd phase may be abandoned after this many iterations (``bound_to_end_above``).
TRIAL_CHECK_AFTER = 10


def lloyd(
    ctx: FitContext,
    C: torch.Tensor,
    *,
    phase: Phase = "lloyd",
    abandon_above: float | None = None,
    warm: bool = False,
) -> tuple[torch.Tensor, bool]:
    """Hard iterations from ``C`` until the centres move less than ``tol``; returns the
    centres and whether they converged (``False``: the budget ran out, the callback
    stopped the fit, or the trial was abandoned).

    ``abandon_above``: a trial's Lloyd phase stops, unconverged, once its inertia is bound
    to end above this (see :func:`bound_to_end_above`). One ``history`` record per phase.
    ``warm``: the first pass may start from the labels, kept sums and bounds the workspace
    holds (a local search's trial, ``C`` a few centres away from the fixed point the
    workspace describes); it starts cold where the workspace holds none.

    On a GPU the passes may run their products in a lower precision (``matmul_precision``);
    a fixed point found so is confirmed, or left, by passes in float32.
    """
    budget, ws = ctx.budget, ctx.passes
    ws.exact_products = not ws.fast_products
    converged = False
    iters = 0
    seen: list[float] = []
    last = None
    while not budget.exhausted:
        C, shift, last = ws.lloyd_iteration(C, warm=warm or iters > 0)
        iters += 1
        budget.tick(0.0, last.objective, budget.lloyd_fraction(1.0 - LLOYD_SHARE), phase)
        # Re-seeding an empty cluster moves its centre, so it shows in the shift; where it
        # cannot move (every point coincides with a centre) this is still a fixed point.
        if shift <= ctx.tol:
            if ws.exact_products:
                converged = True
                break
            ws.exact_products = True
        seen.append(last.objective)
        if abandon_above is not None and bound_to_end_above(seen, abandon_above):
            break
    if last is not None:
        record(ctx.history, 0.0, last, iters)
        ctx.say("lloyd iters={} inertia={:.6g} converged={}", iters, last.inertia, converged)
    return C, converged


def bound_to_end_above(inertias: list[float], level: float) -> bool:
    """Whether a Lloyd phase with these inertias so far will likely end above ``level``.

    Lloyd's inertia falls by shrinking steps, about geometrically once the labels settle:
    after ``TRIAL_CHECK_AFTER`` iterations the remaining fall is estimated as the last
    step times ``r / (1 - r)``, ``r`` the ratio of the last two steps (doubled, to err on
    the side of going on). A phase already below ``level`` always goes on.
    """
    if len(inertias) < TRIAL_CHECK_AFTER:
        return False
    before, last = inertias[-3] - inertias[-2], inertias[-2] - inertias[-1]
    if inertias[-1] < level or before <= 0.0 or last < 0.0:
        return False
    ratio = 2.0 * last / before
    if ratio >= 1.0:
        return False
    return inertias[-1] - last * ratio / (1.0 - ratio) >= level
