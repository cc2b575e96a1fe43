"""From the cells annealing left, more than ``k``, to ``k`` centres: a weighted K-Means of
the cells (see :mod:`~rbfkm_engine.overshoot` for why there are more).

Label every point by its nearest annealed centre: ``m`` cells, cell ``c`` of mass ``M_c``
and mean ``mu_c``. For any grouping of the cells into ``k`` clusters, each of centre
``z``, the inertia is exactly

.. math::

    \\sum_c \\sum_{i \\in c} w_i \\|x_i - z_{g(c)}\\|^2
    = \\sum_c \\sum_{i \\in c} w_i \\|x_i - \\mu_c\\|^2 + \\sum_c M_c \\|\\mu_c - z_{g(c)}\\|^2,

the cells' own spread, which no grouping changes, plus the weighted K-Means objective of
the cells' means. So a K-Means of the ``m`` means with their masses as weights chooses the
``k`` centres by what each grouping costs the data (a coreset of ``m`` points); Lloyd on the
data then moves the boundaries the cells fixed. Greedy k-means++, Lloyd and the local search
run on the ``m`` points in a workspace of their own: each pass is cheap beside one over the
data, but at large ``k`` the cells' local search takes about as long as the data's (a third of
a fit at ``k = 4 096``, benchmarks/README.md).
"""

from __future__ import annotations

import torch

from .blocks import default_chunk_rows
from .context import FitContext
from .init import kmeans_plusplus
from .lloyd import lloyd
from .local_search import search
from .passes import Workspace
from .progress import Budget


def coarsen(ctx: FitContext, C: torch.Tensor) -> torch.Tensor:
    """``ctx.passes.k`` centres from the ``m > k`` annealed centres ``C``, in ``C``'s type."""
    ws = ctx.passes
    k = ws.k
    ws.hard_labels(C)
    counts = torch.bincount(ws.labels, weights=ws.w, minlength=C.shape[0]).double()
    mass = ws.reducer.sum(counts)
    held = mass > 0
    means, mass = C[held].double(), mass[held]
    if means.shape[0] <= k:  # fewer cells than centres: each keeps its own, the rest seeded
        return ws.add_farthest(means.to(C.dtype), k - means.shape[0])
    cells = _cells_context(ctx, means, mass)
    start = kmeans_plusplus(
        means,
        k,
        sample_weight=mass,
        generator=ctx.generator,
        x_sq=cells.passes.x_sq,
        check=ws.check,
        pool=ws.pool,
    )
    centres, converged = lloyd(cells, start)
    centres, _ = search(cells, centres, converged)
    ctx.say("coarsened {} cells to {} centres", means.shape[0], k)
    return _in_cell_order(cells.passes, centres).to(C.dtype)


def _in_cell_order(ws: Workspace, centres: torch.Tensor) -> torch.Tensor:
    """``centres`` ordered by the first cell each takes (the cells come in the order
    annealing made them): the fit's order of centres does not hang on the random draws of
    the cells' fit, only on the annealing (a centre that takes no cell goes last)."""
    m = ws.X.shape[0]
    ws.hard_labels(centres)
    first = torch.full((centres.shape[0],), m, dtype=torch.long, device=centres.device)
    cells = torch.arange(m, device=centres.device)
    first.scatter_reduce_(0, ws.labels, cells, reduce="amin")
    return centres[torch.argsort(first, stable=True)]


def _cells_context(ctx: FitContext, means: torch.Tensor, mass: torch.Tensor) -> FitContext:
    """A fit of the cells' ``means`` weighted by their ``mass`` (float64), in this process
    alone (every shard of a data-parallel fit holds the same cells), with a budget and a
    history of its own: its iterations are not the fit's."""
    ws = ctx.passes
    d, item = means.shape[1], means.element_size()
    chunk = default_chunk_rows(ws.k, d, item, means.device)
    passes = Workspace(means, mass, ws.k, chunk, check=ws.check, pool=ws.pool)
    budget = Budget(ctx.budget.max_iter)
    return FitContext(passes, budget, ctx.tol, ctx.generator, verbose=False)
