"""Weighted moments of the data: mean, covariance and its largest eigenvalue.

Accumulated in float64 by blocks of rows, so they need no float64 copy of ``X``. The
covariance's largest eigenvalue sets the critical temperature
(:mod:`~rbfkm_engine.temperature`). Over the shards of a data-parallel fit (a ``reducer``,
see :mod:`~rbfkm_engine.reducer`) every sum is summed over the shards as well.
"""

from __future__ import annotations

import torch

from .blocks import iter_chunks
from .reducer import LOCAL, Reducer

#: Size of one float64 block of rows when accumulating statistics (a few rows at most
#: in very many dimensions): the blocks stay within the solver's chunk buffers.
_STAT_BLOCK_BYTES = 256 * 1024


def _stat_rows(n_features: int) -> int:
    """Rows per float64 statistics block of ``_STAT_BLOCK_BYTES``."""
    return max(1, _STAT_BLOCK_BYTES // (8 * max(n_features, 1)))


def weighted_mean(
    X: torch.Tensor, sample_weight: torch.Tensor | None = None, reducer: Reducer = LOCAL
) -> torch.Tensor:
    """The weighted mean in float64, accumulated by blocks (no float64 copy of ``X``)."""
    total = torch.zeros(X.shape[1], dtype=torch.float64, device=X.device)
    for rows in iter_chunks(X.shape[0], _stat_rows(X.shape[1])):
        block = X[rows].double()
        if sample_weight is None:
            total += block.sum(dim=0)
        else:
            total += sample_weight[rows].double() @ block
    (total,) = reducer.sum_many(total)
    return total / total_weight(X, sample_weight, reducer)


def total_weight(X: torch.Tensor, sample_weight: torch.Tensor | None, reducer: Reducer) -> float:
    """``sum_i w_i`` over every shard (the number of rows without weights)."""
    weight = X.shape[0] if sample_weight is None else float(sample_weight.double().sum())
    return reducer.sum_floats(weight)[0]


def weighted_covariance(
    X: torch.Tensor,
    sample_weight: torch.Tensor | None = None,
    mean: torch.Tensor | None = None,
    reducer: Reducer = LOCAL,
) -> torch.Tensor:
    """The ``(d, d)`` weighted covariance ``sum_i w_i (x_i - mu)(x_i - mu)^T / sum_i w_i``.

    Accumulated in float64 by blocks of rows, so it needs no copy of ``X``.
    """
    if mean is None:
        mean = weighted_mean(X, sample_weight, reducer)
    cov = torch.zeros((X.shape[1], X.shape[1]), dtype=torch.float64, device=X.device)
    for rows in iter_chunks(X.shape[0], _stat_rows(X.shape[1])):
        block = X[rows].to(torch.float64, copy=True).sub_(mean)
        if sample_weight is None:
            cov.addmm_(block.T, block)
        else:
            cov.addmm_((block * sample_weight[rows].double().unsqueeze(1)).T, block)
    (cov,) = reducer.sum_many(cov)
    return cov / total_weight(X, sample_weight, reducer)


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


#: Size of one float64 block of rows in the products of :func:`data_largest_eigenvalue`
#: (each of a few dozen products is a pass over X: larger blocks than the statistics').
_PRODUCT_BLOCK_BYTES = 4 * 1024 * 1024
#: A covariance of at most this many features is small enough to form whatever ``n``.
SMALL_COVARIANCE = 256


def data_largest_eigenvalue(
    X: torch.Tensor,
    sample_weight: torch.Tensor | None,
    mean: torch.Tensor,
    reducer: Reducer = LOCAL,
) -> float:
    """``lambda_max`` of the weighted covariance of ``X`` without forming it.

    Lanczos (ARPACK's ``eigsh``) on the operator ``v -> X_c^T W X_c v / W``, ``X_c = X -
    mean`` never materialised: each product is two passes over ``X`` in float64 blocks,
    memory ``O(n + d)``. The start vector is seeded, so the result is repeatable. In at
    most ``SMALL_COVARIANCE`` dimensions the (small) covariance is formed instead.
    """
    import numpy as np
    from scipy.sparse.linalg import ArpackError, LinearOperator, eigsh

    d = X.shape[1]
    if d <= SMALL_COVARIANCE:  # Lanczos is unreliable in a few dimensions; this is exact
        return largest_eigenvalue(weighted_covariance(X, sample_weight, mean, reducer))
    weight = total_weight(X, sample_weight, reducer)
    (squares,) = reducer.sum_floats(_centred_sum_of_squares(X, sample_weight, mean))
    trace = squares / weight  # >= lambda_max
    if trace <= 0.0 or d == 1:
        return max(0.0, trace)

    def times(v: np.ndarray) -> np.ndarray:
        vt = torch.as_tensor(np.ravel(v), dtype=torch.float64, device=X.device)
        product = _centred_gram_times(X, sample_weight, mean, vt, reducer)
        return (product / weight).cpu().numpy()

    operator = LinearOperator((d, d), matvec=times, dtype=np.float64)
    start = np.random.default_rng(0).standard_normal(d)
    try:
        value = eigsh(operator, k=1, which="LA", v0=start, tol=1e-10, return_eigenvectors=False)
    except ArpackError as failed:
        # The best Ritz value so far, else the trace (an operator that is zero up to
        # rounding): a temperature above the critical one costs a few hot temperatures.
        stalled = getattr(failed, "eigenvalues", [])
        value = stalled if len(stalled) else [trace]
    return min(trace, max(0.0, float(value[0])))


def _centred_gram_times(
    X: torch.Tensor,
    sample_weight: torch.Tensor | None,
    mean: torch.Tensor,
    v: torch.Tensor,
    reducer: Reducer = LOCAL,
) -> torch.Tensor:
    """``X_c^T W X_c v`` by blocks of rows (``X_c = X - mean``, never formed), over every
    shard."""
    out = torch.zeros_like(v)
    shift = float(mean @ v)
    total = 0.0
    rows_per_block = max(1, _PRODUCT_BLOCK_BYTES // (8 * X.shape[1]))
    for rows in iter_chunks(X.shape[0], rows_per_block):
        block = X[rows].double()
        along = block @ v - shift  # X_c v on the block
        if sample_weight is not None:
            along.mul_(sample_weight[rows].double())
        out.addmv_(block.T, along)
        total += float(along.sum())
    (out,) = reducer.sum_many(out)
    (total,) = reducer.sum_floats(total)
    return out.sub_(mean, alpha=total)  # X_c^T u = X^T u - mean sum(u)


def _centred_sum_of_squares(
    X: torch.Tensor, sample_weight: torch.Tensor | None, mean: torch.Tensor
) -> float:
    """``sum_i w_i ||x_i - mean||^2`` by blocks of rows (the covariance's trace times W)."""
    total = torch.zeros((), dtype=torch.float64, device=X.device)
    for rows in iter_chunks(X.shape[0], _stat_rows(X.shape[1])):
        squares = X[rows].to(torch.float64, copy=True).sub_(mean).square_().sum(dim=1)
        if sample_weight is not None:
            squares.mul_(sample_weight[rows].double())
        total += squares.sum()
    return float(total)
