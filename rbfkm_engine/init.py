"""Initial centres: greedy k-means++ (Arthur & Vassilvitskii, 2007) and random points.

Greedy k-means++ draws ``2 + log k`` candidates per step with probability proportional to
the (weighted) squared distance to the nearest chosen centre and keeps the one that lowers
the potential most, as scikit-learn does. Distances are computed by GEMM in chunks.
"""

from __future__ import annotations

import math

import torch

from .blocks import chunk_size_for, iter_chunks
from .distances import squared_distances, squared_norms
from .parallel import BlockPool
from .progress import Interrupt
from .reducer import LOCAL, Reducer


def sample_proportional(
    weights: torch.Tensor, n_samples: int, generator: torch.Generator | None
) -> torch.Tensor:
    """Indices drawn with replacement with probability ``weights / weights.sum()``.

    Inverse-CDF sampling: unlike ``torch.multinomial`` it has no limit on the number of
    categories (2**24 there).
    """
    cdf = torch.cumsum(weights.double(), dim=0)
    u = _uniform(n_samples, generator, weights.device)
    idx = torch.searchsorted(cdf, u * cdf[-1], right=True)
    return idx.clamp_max_(weights.shape[0] - 1)


def draw_points(
    X: torch.Tensor,
    weights: torch.Tensor,
    n_samples: int,
    generator: torch.Generator | None,
    reducer: Reducer = LOCAL,
) -> torch.Tensor:
    """``n_samples`` rows of ``X`` drawn with replacement with probability ``weights /
    weights.sum()``, the same on every rank of a data-parallel fit.

    Over shards, every rank draws the same uniforms (the generators are seeded alike);
    each draw falls in one shard by the shards' total weights, that shard finds the row by
    its own cumulative weights, and the rows are summed over the ranks (the others add
    zeros): the draw of one process on the concatenated data, up to the rounding of the
    cumulative sums.
    """
    if not reducer.active:
        return X[sample_proportional(weights, n_samples, generator)]
    u = _uniform(n_samples, generator, torch.device("cpu"))
    totals = reducer.gather(weights.double().sum().reshape(1).cpu()).ravel()
    ends = torch.cumsum(totals, dim=0)
    target = u * ends[-1]
    owner = torch.searchsorted(ends, target, right=True).clamp_max_(reducer.world - 1)
    mine = torch.nonzero(owner == reducer.rank).squeeze(1)
    points = torch.zeros((n_samples, X.shape[1]), dtype=torch.float64)
    if mine.numel() and X.shape[0]:
        cdf = torch.cumsum(weights.double(), dim=0)
        start = ends[reducer.rank] - totals[reducer.rank]
        local = (target[mine] - start).to(cdf.device)
        idx = torch.searchsorted(cdf, local, right=True).clamp_max_(X.shape[0] - 1)
        points[mine] = X[idx].double().cpu()
    return reducer.sum(points).to(device=X.device, dtype=X.dtype)


def _uniform(n: int, generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    """``n`` float64 draws from U[0, 1) on ``device``, made on the generator's own device (a
    CUDA generator cannot fill a CPU tensor, nor the reverse)."""
    source = device if generator is None else generator.device
    u = torch.rand(n, generator=generator, dtype=torch.float64, device=source)
    return u.to(device)


def _min_distances_to(
    X: torch.Tensor,
    x_sq: torch.Tensor,
    centres: torch.Tensor,
    chunk_size: int,
    pool: BlockPool,
    closest: torch.Tensor | None = None,
    w: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(n, c)`` squared distances from every point to each of ``c`` candidate centres,
    each at most the point's ``closest`` distance so far when given; and the potential
    each candidate would leave, ``sum_i w_i out_ic`` (blocks added in order)."""
    out = torch.empty((X.shape[0], centres.shape[0]), dtype=X.dtype, device=X.device)
    c_sq = squared_norms(centres)

    def block(rows: slice) -> torch.Tensor:
        D = squared_distances(X[rows], centres, x_sq[rows], c_sq, out=out[rows])
        if closest is not None:
            torch.minimum(D, closest[rows].unsqueeze(1), out=D)
        return (D if w is None else w[rows].unsqueeze(1) * D).sum(dim=0)

    parts = pool.map(block, list(iter_chunks(X.shape[0], pool.block_rows(X.shape[0], chunk_size))))
    potential = next(parts, torch.zeros(centres.shape[0], dtype=X.dtype, device=X.device))
    for part in parts:
        potential = potential + part
    return out, potential


def kmeans_plusplus(
    X: torch.Tensor,
    n_clusters: int,
    *,
    sample_weight: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    n_local_trials: int | None = None,
    x_sq: torch.Tensor | None = None,
    check: Interrupt | None = None,
    pool: BlockPool | None = None,
    reducer: Reducer = LOCAL,
) -> torch.Tensor:
    """Greedy k-means++ seeding; returns ``(n_clusters, d)`` centres (copies of points).

    Each of the ``n_clusters`` steps prices its candidates against every point, so
    ``check`` (the fit's stop check, :func:`~rbfkm_engine.progress.interrupter`) runs
    before each step. ``pool``: the threads the distance blocks are spread over.

    ``reducer``: over the shards of a data-parallel fit, the same greedy k-means++ as on
    the concatenated data (not k-means||): candidates drawn by :func:`draw_points`, their
    potentials summed over the shards; a few small collectives per centre.
    """
    pool = BlockPool(1) if pool is None else pool
    n = X.shape[0]
    if x_sq is None:
        x_sq = squared_norms(X)
    if n_local_trials is None:
        n_local_trials = 2 + int(math.log(n_clusters))
    w = (
        torch.ones(n, dtype=X.dtype, device=X.device)
        if sample_weight is None
        else sample_weight.to(X.dtype)
    )
    chunk = chunk_size_for(n_local_trials, X.shape[1], X.element_size())
    centres = torch.empty((n_clusters, X.shape[1]), dtype=X.dtype, device=X.device)
    centres[0] = draw_points(X, w, 1, generator, reducer)[0]
    closest = _min_distances_to(X, x_sq, centres[:1], chunk, pool)[0].squeeze(1)
    (potential,) = reducer.sum_floats(float((w * closest).sum()))
    for c in range(1, n_clusters):
        if check is not None:
            check()
        weights = w * closest
        if potential <= 0.0 or not math.isfinite(potential):
            # Every point already coincides with a centre: pick any remaining point.
            candidates = draw_points(X, w, n_local_trials, generator, reducer)
        else:
            candidates = draw_points(X, weights, n_local_trials, generator, reducer)
        cand_dist, cand_potential = _min_distances_to(X, x_sq, candidates, chunk, pool, closest, w)
        cand_potential = reducer.sum(cand_potential)
        best = int(torch.argmin(cand_potential))
        centres[c] = candidates[best]
        closest = cand_dist[:, best].clone()
        potential = float(cand_potential[best])
    return centres


def random_init(
    X: torch.Tensor,
    n_clusters: int,
    *,
    sample_weight: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    reducer: Reducer = LOCAL,
) -> torch.Tensor:
    """``n_clusters`` distinct points drawn with probability proportional to their weight.

    Weighted sampling without replacement by the Gumbel-top-k trick (points of weight 0
    come last, so they are picked only when fewer than ``n_clusters`` points have weight).
    Over shards (``reducer``) every rank draws the uniforms of all points and keeps its
    own shard's, so the keys are those of one process on the concatenated data; each
    shard's best keys are gathered and the best of them taken.
    """
    n = X.shape[0]
    w = (
        torch.ones(n, dtype=torch.float64, device=X.device)
        if sample_weight is None
        else sample_weight.to(torch.float64)
    )
    sizes = reducer.gather_ints(n)
    start = sum(sizes[: reducer.rank])
    u = _uniform(sum(sizes), generator, X.device)[start : start + n]
    gumbel = -torch.log(-torch.log(u.clamp_min(1e-300)))
    keys = torch.where(w > 0, torch.log(w.clamp_min(1e-300)) + gumbel, gumbel - 1e300)
    if not reducer.active:
        idx = torch.topk(keys, n_clusters).indices
        return X[idx].clone()
    best = torch.full((n_clusters, X.shape[1] + 1), -math.inf, dtype=torch.float64)
    top = torch.topk(keys, min(n_clusters, n))
    best[: top.indices.shape[0], 0] = top.values.cpu()
    best[: top.indices.shape[0], 1:] = X[top.indices].double().cpu()
    gathered = reducer.gather(best).reshape(-1, best.shape[1])
    chosen = torch.topk(gathered[:, 0], n_clusters).indices
    return gathered[chosen, 1:].to(device=X.device, dtype=X.dtype)
