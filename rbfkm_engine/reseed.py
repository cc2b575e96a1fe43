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

if TYPE_CHECKING:
    from .passes import Workspace

#: Re-seeding ``n`` centres looks for them among the ``max(FARTHEST_CANDIDATES, 16 n)``
#: points farthest from the centres first (see :func:`farthest_first`) ...
FARTHEST_CANDIDATES = 1024
#: ... and grows that pool by this factor when the picks may lie outside it.
FARTHEST_GROWTH = 8
#: A torch pick lowers its pool's distances this many differences at a time.
PICK_BLOCK = 1 << 22


def farthest_first(ws: Workspace, closest: torch.Tensor, n_new: int) -> torch.Tensor:
    """``n_new`` points of ``ws.X``, each the farthest from the centres and the points
    taken before it (``closest``: each point's squared distance to the centres; a copy it
    may overwrite).

    Taking a point only lowers the others' distances, so while every pick stays above the
    largest distance outside the ``m`` farthest points, the picks among those ``m`` are the
    picks among all: they run there, on ``m`` rows instead of a pass over ``X`` per pick.
    When that check fails the pool grows ``FARTHEST_GROWTH``-fold; a pool as large as
    ``X`` is the plain pass per pick. The fit's stop check (``ws.check``) runs before
    every pick. Every pool's picks are made alike (:func:`_picks`), so the picks do not
    depend on the pool's size, nor on how a data-parallel fit splits the rows.
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
    # Every point: a pass over X per pick (one point at a time, so copies of a point are
    # never taken twice, and repeating a point and weighting it give the same centres).
    every = _Pool(ws.X, score, torch.arange(n, device=score.device))
    picks = _picks(ws, every, torch.tensor(-math.inf), n_new)
    assert picks is not None  # every score is above -inf
    return picks


def _farthest_among(ws: Workspace, score: torch.Tensor, m: int, n_new: int) -> torch.Tensor | None:
    """:func:`farthest_first` among the ``m`` top-``score`` points, or ``None`` where a
    pick would not be above every point outside them."""
    top, order = torch.topk(score, m + 1)
    candidates = order[:m]
    pool = _Pool(ws.X[candidates], top[:m].clone(), candidates)
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
        rows = torch.full((m, ws.X.shape[1] + 2), -math.inf, dtype=torch.float64)
        rows[:taken, 0] = top[:taken].double().cpu()
        rows[:taken, 1] = (order[:taken] + ws.offset).double().cpu()
        rows[:taken, 2:] = ws.X[order[:taken]].double().cpu()
        gathered = reducer.gather(rows).reshape(-1, rows.shape[1])
        gathered = gathered[gathered[:, 1] > -math.inf]
        dtype, device = ws.X.dtype, ws.X.device
        pool = _Pool(
            gathered[:, 2:].to(device, dtype).contiguous(),
            gathered[:, 0].to(device, score.dtype).contiguous(),
            gathered[:, 1].to(device, torch.long).contiguous(),
        )
        picks = _picks(ws, pool, torch.tensor(outside, dtype=score.dtype), n_new)
        if picks is not None:
            return picks
        m *= FARTHEST_GROWTH


@dataclass
class _Pool:
    """Candidate points for farthest-first picks: the points, their scores (squared
    distances to the centres, lowered as picks are made) and their indices (which break
    ties: the lowest first, as ``argmax``)."""

    P: torch.Tensor
    values: torch.Tensor
    index: torch.Tensor


def _picks(ws: Workspace, pool: _Pool, outside: torch.Tensor, n_new: int) -> torch.Tensor | None:
    """``n_new`` farthest-first picks among ``pool``, or ``None`` where a pick would not be
    above ``outside``, the best score of the points outside it. A pick is one call of the
    fused kernel where it runs on the pool (a few torch ops per pick otherwise)."""
    kernel = ws.kernel_for(pool.P)
    by_kernel = (
        kernel is not None
        and pool.values.dtype == pool.P.dtype
        and all(t.is_contiguous() for t in (pool.P, pool.values, pool.index))
    )
    taken: list[int] = []
    for _ in range(n_new):
        ws.check()  # n_new picks of O(m) each: O(n_new^2) in all when many are empty
        if by_kernel:
            assert kernel is not None
            j = kernel.farthest_pick(pool.P, pool.values, pool.index, float(outside))
        else:
            j = _pick(pool, float(outside))
        if j is None:
            return None
        taken.append(j)
    return pool.P[taken]


def _pick(pool: _Pool, outside: float) -> int | None:
    """One farthest-first pick among ``pool`` in torch ops (see
    :meth:`~rbfkm_engine.native.LloydKernel.farthest_pick`), the differences made
    :data:`PICK_BLOCK` entries at a time (a pool can be the whole data)."""
    values = pool.values
    best = values.max()
    if not best > outside:
        return None
    ties = torch.nonzero(values == best).squeeze(1)
    j = int(ties[torch.argmin(pool.index[ties])])  # argmax's tie: the lowest index
    point = pool.P[j].clone()
    m, d = pool.P.shape
    step = max(1, PICK_BLOCK // max(d, 1))
    for start in range(0, m, step):
        rows = slice(start, start + step)
        d_new = (pool.P[rows] - point).square_().sum(dim=1)  # exact 0 for copies of it
        torch.minimum(values[rows], d_new.to(values.dtype), out=values[rows])
    return j
