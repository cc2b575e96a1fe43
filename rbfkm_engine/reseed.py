"""Farthest-first seeding: new centres where the data are farthest from the centres.

Empty clusters are re-seeded at the point farthest from its nearest centre, as
scikit-learn and faiss do, and a fit that reached fewer centres than asked for is topped
up the same way. Points of weight 0 are never taken while others remain.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from .distances import squared_distances

if TYPE_CHECKING:
    from .passes import Workspace

#: Re-seeding ``n`` centres looks for them among the ``max(FARTHEST_CANDIDATES, 16 n)``
#: points farthest from the centres first (see :func:`farthest_first`) ...
FARTHEST_CANDIDATES = 1024
#: ... and grows that pool by this factor when the picks may lie outside it.
FARTHEST_GROWTH = 8


def farthest_first(ws: Workspace, closest: torch.Tensor, n_new: int) -> torch.Tensor:
    """``n_new`` points of ``ws.X``, each the farthest from the centres and the points
    taken before it (``closest``: each point's squared distance to the centres; a copy it
    may overwrite).

    Taking a point only lowers the others' distances, so while every pick stays above the
    largest distance outside the ``m`` farthest points, the picks among those ``m`` are the
    picks among all: they run there, on ``m`` rows instead of a pass over ``X`` per pick.
    When that check fails the pool grows ``FARTHEST_GROWTH``-fold; a pool as large as
    ``X`` is the plain pass per pick. The fit's stop check (``ws.check``) runs before
    every pick.
    """
    n = closest.shape[0]
    score = closest if ws.w is None else torch.where(ws.w > 0, closest, -1.0)
    m = max(FARTHEST_CANDIDATES, 16 * n_new)
    if ws.reducer.active:
        return _farthest_across_shards(ws, score, m, n_new)
    while m < n:
        picks = _farthest_among(ws, score, m, n_new)
        if picks is not None:
            return picks
        m *= FARTHEST_GROWTH
    picks = []
    for _ in range(n_new):  # a pass over X per pick: the fit's stop check before each
        ws.check()
        picks.append(_take_farthest(ws, closest))
    return torch.stack(picks)


def _farthest_among(ws: Workspace, score: torch.Tensor, m: int, n_new: int) -> torch.Tensor | None:
    """:func:`farthest_first` among the ``m`` top-``score`` points, or ``None`` where a
    pick would not be above every point outside them."""
    top, order = torch.topk(score, m + 1)
    candidates = order[:m]
    pool = _Pool(ws.X[candidates], ws.x_sq[candidates], top[:m].clone(), candidates)
    return _picks(ws, pool, top[m], n_new)


def _farthest_across_shards(ws: Workspace, score: torch.Tensor, m: int, n_new: int) -> torch.Tensor:
    """:func:`farthest_first` over every shard of a data-parallel fit: each shard's ``m``
    top-``score`` points are gathered on every rank and the picks made among them (by
    global index on ties, as on one process), the pool growing while a pick might lie
    outside it. Every rank makes the same picks."""
    reducer = ws.reducer
    while True:
        taken = min(m, score.shape[0])
        top, order = torch.topk(score, min(m + 1, score.shape[0]))
        # The best score a shard left out of its pool (none: -inf).
        outside = reducer.max_float(float(top[m]) if top.shape[0] > m else -math.inf)
        rows = torch.full((m, ws.X.shape[1] + 3), -math.inf, dtype=torch.float64)
        rows[:taken, 0] = top[:taken].double().cpu()
        rows[:taken, 1] = (order[:taken] + ws.offset).double().cpu()
        rows[:taken, 2] = ws.x_sq[order[:taken]].double().cpu()
        rows[:taken, 3:] = ws.X[order[:taken]].double().cpu()
        gathered = reducer.gather(rows).reshape(-1, rows.shape[1])
        gathered = gathered[gathered[:, 1] > -math.inf]
        dtype, device = ws.X.dtype, ws.X.device
        pool = _Pool(
            gathered[:, 3:].to(device, dtype),
            gathered[:, 2].to(device, dtype),
            gathered[:, 0].to(device, score.dtype),
            gathered[:, 1].to(device, torch.long),
        )
        picks = _picks(ws, pool, torch.tensor(outside, dtype=score.dtype), n_new)
        if picks is not None:
            return picks
        m *= FARTHEST_GROWTH


@dataclass
class _Pool:
    """Candidate points for farthest-first picks: the points, their squared norms, their
    scores (distances to the centres, updated as picks are made) and their indices (which
    break ties: the lowest first, as ``argmax``)."""

    P: torch.Tensor
    p_sq: torch.Tensor
    values: torch.Tensor
    index: torch.Tensor


def _picks(ws: Workspace, pool: _Pool, outside: torch.Tensor, n_new: int) -> torch.Tensor | None:
    """``n_new`` farthest-first picks among ``pool``, or ``None`` where a pick would not be
    above ``outside``, the best score of the points outside it."""
    P, p_sq, values, candidates = pool.P, pool.p_sq, pool.values, pool.index
    taken: list[int] = []
    for _ in range(n_new):
        ws.check()  # n_new picks of O(m) each: O(n_new^2) in all when many are empty
        best = values.max()
        if not best > outside:
            return None
        ties = torch.nonzero(values == best).squeeze(1)
        j = int(ties[torch.argmin(candidates[ties])])  # argmax's tie: the lowest index
        taken.append(j)
        d_new = squared_distances(P, P[j : j + 1], p_sq).squeeze(1)
        torch.minimum(values, d_new.to(values.dtype), out=values)
    return P[taken]


def _take_farthest(ws: Workspace, closest: torch.Tensor) -> torch.Tensor:
    """The point farthest from the centres (``closest``: each point's squared distance to
    them, updated in place to count the returned point as a centre).

    One point at a time: copies of a point are never taken twice, so repeating a point
    and weighting it give the same centres.
    """
    score = closest if ws.w is None else torch.where(ws.w > 0, closest, -1.0)
    far = int(torch.argmax(score))
    point = ws.X[far : far + 1]
    d_new = squared_distances(ws.X, point, ws.x_sq).squeeze(1)
    torch.minimum(closest, d_new.to(closest.dtype), out=closest)
    return point[0]
