"""Weighted moments of the data: mean, covariance and its largest eigenvalue.

Accumulated in float64 by blocks of rows, so they need no float64 copy of ``X``. The
covariance's largest eigenvalue sets the critical temperature
(:mod:`~rbfkm_engine.temperature`).
"""

from __future__ import annotations

import torch

from .distances import iter_chunks

#: Size of one float64 block of rows when accumulating statistics (a few rows at most
#: in very many dimensions): the blocks stay within the solver's chunk buffers.
_STAT_BLOCK_BYTES = 256 * 1024


def _stat_rows(n_features: int) -> int:
    """Rows per float64 statistics block of ``_STAT_BLOCK_BYTES``."""
    return max(1, _STAT_BLOCK_BYTES // (8 * max(n_features, 1)))


def weighted_mean(X: torch.Tensor, sample_weight: torch.Tensor | None = None) -> torch.Tensor:
    """The weighted mean in float64, accumulated by blocks (no float64 copy of ``X``)."""
    total = torch.zeros(X.shape[1], dtype=torch.float64, device=X.device)
    for rows in iter_chunks(X.shape[0], _stat_rows(X.shape[1])):
        block = X[rows].double()
        if sample_weight is None:
            total += block.sum(dim=0)
        else:
            total += sample_weight[rows].double() @ block
    weight = X.shape[0] if sample_weight is None else float(sample_weight.double().sum())
    return total / weight


def weighted_covariance(
    X: torch.Tensor,
    sample_weight: torch.Tensor | None = None,
    mean: torch.Tensor | None = None,
) -> torch.Tensor:
    """The ``(d, d)`` weighted covariance ``sum_i w_i (x_i - mu)(x_i - mu)^T / sum_i w_i``.

    Accumulated in float64 by blocks of rows, so it needs no copy of ``X``.
    """
    if mean is None:
        mean = weighted_mean(X, sample_weight)
    cov = torch.zeros((X.shape[1], X.shape[1]), dtype=torch.float64, device=X.device)
    for rows in iter_chunks(X.shape[0], _stat_rows(X.shape[1])):
        block = X[rows].to(torch.float64, copy=True).sub_(mean)
        if sample_weight is None:
            cov.addmm_(block.T, block)
        else:
            cov.addmm_((block * sample_weight[rows].double().unsqueeze(1)).T, block)
    weight = X.shape[0] if sample_weight is None else float(sample_weight.double().sum())
    return cov / weight


def largest_eigenvalue(cov: torch.Tensor) -> float:
    """``lambda_max`` of a symmetric PSD matrix."""
    if cov.shape[0] <= 2048:
        return float(torch.linalg.eigvalsh(cov)[-1].clamp_min(0.0))
    # A seeded random start has a component along the top eigenvector almost surely
    # (a constant start misses, e.g., anti-correlated features).
    generator = torch.Generator(device=cov.device).manual_seed(0)
    v = torch.randn(cov.shape[0], generator=generator, dtype=cov.dtype, device=cov.device)
    v /= v.norm()
    value = 0.0
    for _ in range(1000):
        w = cov @ v
        value_new = float(w.norm())
        if value_new == 0.0:
            return 0.0
        v = w / value_new
        if abs(value_new - value) <= 1e-10 * value_new:
            break
        value = value_new
    return value_new
