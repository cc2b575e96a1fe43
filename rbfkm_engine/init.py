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
    potential = next(parts)
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
) -> torch.Tensor:
    """Greedy k-means++ seeding; returns ``(n_clusters, d)`` centres (copies of points).

    Each of the ``n_clusters`` steps prices its candidates against every point, so
    ``check`` (the fit's stop check, :func:`~rbfkm_engine.progress.interrupter`) runs
    before each step. ``pool``: the threads the distance blocks are spread over.
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
    first = int(sample_proportional(w, 1, generator))
    centres[0] = X[first]
    closest = _min_distances_to(X, x_sq, centres[:1], chunk, pool)[0].squeeze(1)
    potential = float((w * closest).sum())
    for c in range(1, n_clusters):
        if check is not None:
            check()
        weights = w * closest
        if potential <= 0.0 or not math.isfinite(potential):
            # Every point already coincides with a centre: pick any remaining point.
            candidates = sample_proportional(w, n_local_trials, generator)
        else:
            candidates = sample_proportional(weights, n_local_trials, generator)
        cand_dist, cand_potential = _min_distances_to(
            X, x_sq, X[candidates], chunk, pool, closest, w
        )
        best = int(torch.argmin(cand_potential))
        centres[c] = X[candidates[best]]
        closest = cand_dist[:, best].clone()
        potential = float(cand_potential[best])
    return centres


def random_init(
    X: torch.Tensor,
    n_clusters: int,
    *,
    sample_weight: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """``n_clusters`` distinct points drawn with probability proportional to their weight.

    Weighted sampling without replacement by the Gumbel-top-k trick (points of weight 0
    come last, so they are picked only when fewer than ``n_clusters`` points have weight).
    """
    n = X.shape[0]
    w = (
        torch.ones(n, dtype=torch.float64, device=X.device)
        if sample_weight is None
        else sample_weight.to(torch.float64)
    )
    u = _uniform(n, generator, X.device)
    gumbel = -torch.log(-torch.log(u.clamp_min(1e-300)))
    keys = torch.where(w > 0, torch.log(w.clamp_min(1e-300)) + gumbel, gumbel - 1e300)
    idx = torch.topk(keys, n_clusters).indices
    return X[idx].clone()
