"""One run of an annealed fit: the phases in order.

1. :mod:`~rbfkm_engine.anneal`: warm-started fixed-point iterations over the temperature
   schedule; grown fits start from the weighted mean and split their centres at the
   data's phase transitions (:mod:`~rbfkm_engine.twins`); with ``overshoot``, past ``k``
   centres, and :mod:`~rbfkm_engine.coarsen` groups those cells back into ``k``.
2. :mod:`~rbfkm_engine.lloyd`: hard iterations to a true K-Means fixed point.
3. :mod:`~rbfkm_engine.local_search`: moves out of that fixed point while they reach a
   better one (annealed fits only), on a budget of its own, in which a finish that has not
   converged within ``max_iter`` goes on first.
4. A last hard pass: the labels ``predict`` would give, and the inertia.

This module knows tensors only, in the fit's frame; validation, conversions and the data's
units live in :mod:`~rbfkm_engine.model` and :mod:`~rbfkm_engine.frame`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from .anneal import LLOYD_SHARE, Schedule, anneal
from .choose_k import CRITERIA, GapReference, choose
from .coarsen import coarsen
from .context import FitContext
from .kpath import PATH_CENTRES_LIMIT, PathCount, PathRecorder, settle_path
from .lloyd import lloyd
from .local_search import search
from .overshoot import annealed_centres
from .passes import Workspace
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
    path: list[PathCount] = field(default_factory=list)


@dataclass(frozen=True)
class AutoK:
    """``n_clusters="auto"``: choose ``k <= max_clusters`` from the path by ``criterion``
    (see :mod:`~rbfkm_engine.choose_k`); the run anneals to ``max_clusters + 1`` centres
    so that every count it may choose has split again."""

    max_clusters: int
    criterion: str = CRITERIA[0]
    #: The gap statistic's reference paths (``criterion="gap"`` only).
    reference: GapReference | None = None


def annealing_budget(max_iter: int) -> int:
    """Iterations annealing may use: ``max_iter`` less the share kept for Lloyd."""
    return max_iter - max(1, math.ceil(LLOYD_SHARE * max_iter))


def _grown_centres(ws: Workspace, schedule: Schedule, auto: AutoK | None) -> int:
    """The centres a grown fit anneals to: up to ``schedule.overshoot`` times ``k`` (see
    :mod:`~rbfkm_engine.overshoot`) where the cells' fit prices its moves (Euclidean fits)
    and ``k`` is fixed; ``k`` itself otherwise (``n_clusters="auto"`` anneals past the
    counts it chooses from)."""
    if auto is not None or ws.sphere:
        return ws.k
    return annealed_centres(ws.k, schedule.overshoot)


def _start(ctx: FitContext, mean: torch.Tensor, grown: int, auto: AutoK | None) -> Twins:
    """The twins a grown fit starts from. A fixed ``k`` trades slots once it has them all
    (:mod:`~rbfkm_engine.trades`); ``n_clusters="auto"`` does not, as its path must hold
    the counts as the phase transitions made them, nor do spherical fits, whose merges
    Ward's Euclidean cost does not price."""
    trade = auto is None and not ctx.passes.sphere
    return Twins(mean, grown, ctx.generator, ctx.passes.check, trade=trade)


def solve(
    ctx: FitContext,
    schedule: Schedule,
    C0: torch.Tensor | None,
    covariance: torch.Tensor | None = None,
    auto: AutoK | None = None,
) -> SolverResult:
    """Anneal over ``schedule`` (no temperatures: plain Lloyd from ``C0``), Lloyd to a fixed
    point, then the local search when annealed.

    ``C0=None`` grows the centres from the weighted mean (see :mod:`~rbfkm_engine.twins`);
    otherwise annealing starts from ``C0``. ``covariance``: the data's weighted covariance,
    when the caller has it (see :func:`~rbfkm_engine.anneal.anneal`). ``auto``: choose the
    number of centres from the annealing path before the Lloyd finish, each count settled by
    a short Lloyd finish (:mod:`~rbfkm_engine.kpath`). The result's ``path`` holds the
    counts of centres annealing passed through (with a fixed ``k``, as annealing left
    them).
    """
    ws = ctx.passes
    if ctx.path is None:
        limit = ws.k if auto is not None else min(ws.k, PATH_CENTRES_LIMIT)
        ctx.path = PathRecorder(limit)
    C = ws.mean() if C0 is None else C0.clone()
    if ws.sphere:
        C = C / C.norm(dim=1, keepdim=True).clamp_min(torch.finfo(C.dtype).tiny)
    sigma = 0.0
    if schedule.temperatures:
        grown = _grown_centres(ws, schedule, auto)
        start = _start(ctx, C, grown, auto) if C0 is None else C
        C, sigma = anneal(ctx, schedule, start, covariance)
        if C.shape[0] > ws.k:
            C = coarsen(ctx, C)
    if C.shape[0] < ws.k:  # no schedule (constant data): seed the rest, then Lloyd
        C = ws.add_farthest(C, ws.k - C.shape[0])
    path: list[PathCount] = []
    if auto is not None:
        path = ctx.path.counts(C, auto.max_clusters)
        sample = settle_path(ws, path, ctx.tol, ctx.generator, C, auto.max_clusters)
        k = choose(auto.criterion, path, auto.max_clusters, sample, ws.total_weight, auto.reference)
        chosen = [count.centres for count in path if count.k == k and count.centres is not None]
        ws.k = k if chosen else min(auto.max_clusters, C.shape[0])
        C = chosen[0] if chosen else C[: ws.k]  # no count settled: the budget ran out
    C, converged = lloyd(ctx, C)
    if schedule.temperatures and not ws.sphere:
        # The local search prices its moves by Euclidean means; spherical fits skip it.
        C, converged = search(ctx, C, converged)
    inertia = ws.hard_labels(C)
    labels = ws.labels.clone()
    if auto is None:
        # A fixed k: the path as annealing left it, at no cost (settling every count is
        # n_clusters="auto"'s work); the estimator gives the last count, the fit itself,
        # the fit's reported inertia.
        path = ctx.path.counts(C, ws.k)
    return SolverResult(
        centres=C,
        labels=labels,
        inertia=inertia,
        n_iter=ctx.budget.n_iter,
        sigma=sigma,
        history=ctx.history,
        converged=converged,
        stopped_early=ctx.budget.stopped,
        path=path,
    )
