"""One run of an annealed fit: the phases in order.

1. :mod:`~rbfkm_engine.anneal`: warm-started fixed-point iterations over the temperature
   schedule; grown fits start from the weighted mean and split their centres at the
   data's phase transitions (:mod:`~rbfkm_engine.twins`).
2. :mod:`~rbfkm_engine.lloyd`: hard iterations to a true K-Means fixed point.
3. :mod:`~rbfkm_engine.local_search`: moves out of that fixed point while they reach a
   better one (annealed fits only).
4. A last hard pass: the labels ``predict`` would give, and the inertia.

This module knows tensors only, in the fit's frame; validation, conversions and the data's
units live in :mod:`~rbfkm_engine.model` and :mod:`~rbfkm_engine.frame`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from .anneal import LLOYD_SHARE, Schedule, anneal
from .context import FitContext
from .lloyd import lloyd
from .local_search import refine
from .twins import Twins


@dataclass
class SolverResult:
    """What one run found, in the fit's frame."""

    centres: torch.Tensor
    labels: torch.Tensor
    inertia: float
    n_iter: int
    sigma: float
    history: list[dict[str, float]] = field(default_factory=list)
    converged: bool = True
    stopped_early: bool = False


def annealing_budget(max_iter: int) -> int:
    """Iterations annealing may use: ``max_iter`` less the share kept for Lloyd."""
    return max_iter - max(1, math.ceil(LLOYD_SHARE * max_iter))


def solve(
    ctx: FitContext,
    schedule: Schedule,
    C0: torch.Tensor | None,
    covariance: torch.Tensor | None = None,
) -> SolverResult:
    """Anneal over ``schedule`` (no temperatures: plain Lloyd from ``C0``), Lloyd to a fixed
    point, then the local search when annealed.

    ``C0=None`` grows the centres from the weighted mean (see :mod:`~rbfkm_engine.twins`);
    otherwise annealing starts from ``C0``. ``covariance``: the data's weighted covariance,
    when the caller has it (see :func:`~rbfkm_engine.anneal.anneal`).
    """
    ws = ctx.passes
    C = ws.mean() if C0 is None else C0.clone()
    sigma = 0.0
    if schedule.temperatures:
        start = Twins(C, ws.k, ctx.generator, ws.check) if C0 is None else C
        C, sigma = anneal(ctx, schedule, start, covariance)
    if C.shape[0] < ws.k:  # no schedule (constant data): seed the rest, then Lloyd
        C = ws.add_farthest(C, ws.k - C.shape[0])
    C, converged = lloyd(ctx, C)
    if schedule.temperatures and converged:
        C = refine(ctx, C)
    inertia = ws.hard_labels(C)
    return SolverResult(
        centres=C,
        labels=ws.labels.clone(),
        inertia=inertia,
        n_iter=ctx.budget.n_iter,
        sigma=sigma,
        history=ctx.history,
        converged=converged,
        stopped_early=ctx.budget.stopped,
    )
