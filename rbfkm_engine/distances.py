"""Chunked squared Euclidean distances.

``D_ij = ||x_i||^2 - 2 x_i . c_j + ||c_j||^2`` is one GEMM per block of rows (``addmm``),
clamped at 0 because cancellation can make it slightly negative. Rows are processed in
chunks sized from a memory budget, so the peak extra memory is bounded by the budget and
not by ``n x k``.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

#: Default memory budget for the per-chunk buffers (distances, responsibilities).
DEFAULT_BUDGET_BYTES = 256 * 1024**2

#: Target size of one ``(rows, k)`` block on the CPU (see :func:`cache_chunk_size`).
CPU_BLOCK_BYTES = 8 * 1024**2

#: Rows per chunk never exceed this: larger blocks stop paying off in cache behaviour.
MAX_CHUNK_ROWS = 65_536


#: ``squared_norms`` of fewer elements than this squares a copy, faster than ``einsum``
#: there (whose fixed cost dominates); from it on, ``einsum`` spares a copy of ``X`` that
#: would count in the fit's peak memory.
_EINSUM_FROM = 1 << 20


def squared_norms(X: torch.Tensor) -> torch.Tensor:
    """Row-wise squared norms ``||x_i||^2`` (shape ``(n,)``)."""
    if X.numel() < _EINSUM_FROM:
        return X.square().sum(dim=1)
    return torch.einsum("ij,ij->i", X, X)


def chunk_size_for(
    n_clusters: int,
    n_features: int,
    itemsize: int,
    budget_bytes: int = DEFAULT_BUDGET_BYTES,
    buffers_per_row: int = 4,
) -> int:
    """Rows per chunk so that ``buffers_per_row`` ``(rows, k)`` blocks fit in the budget.

    The factor covers the distance block, the scores and the responsibilities, plus one
    ``(rows, d)`` block for weighted points.
    """
    per_row = itemsize * (buffers_per_row * n_clusters + n_features)
    return int(max(1, min(MAX_CHUNK_ROWS, budget_bytes // max(per_row, 1))))


def cache_chunk_size(n_clusters: int, device: torch.device, itemsize: int = 4) -> int:
    """Rows per block for the solver's passes: cache-sized on the CPU.

    With few features the distance GEMM is cheap and the passes over the ``(rows, k)``
    block (minimum, argmin check, candidate count) dominate. Each pass is a few torch ops
    with a fixed cost per op (dispatch, waking the threads): blocks of about 8 MiB, served
    from the last-level cache, need fewer ops per pass than blocks that stay in L2 and
    ran faster (benchmarks/README.md). GPUs prefer large blocks (fewer kernel launches).
    """
    if device.type == "cuda":
        return MAX_CHUNK_ROWS
    return int(max(256, min(MAX_CHUNK_ROWS, CPU_BLOCK_BYTES // (itemsize * max(n_clusters, 1)))))


def default_chunk_rows(
    n_clusters: int, n_features: int, itemsize: int, device: torch.device
) -> int:
    """Rows per block of a fit that sets no ``chunk_size``: cache-sized, within the
    memory budget."""
    budget = chunk_size_for(n_clusters, n_features, itemsize)
    return min(budget, cache_chunk_size(n_clusters, device, itemsize))


def squared_distances(
    X: torch.Tensor,
    C: torch.Tensor,
    x_sq: torch.Tensor | None = None,
    c_sq: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Squared distances of one block of rows to every centre, by one GEMM.

    Parameters
    ----------
    X : (m, d) tensor
    C : (k, d) tensor, same dtype and device
    x_sq, c_sq : precomputed squared norms of X and C (optional)
    out : (m, k) tensor to write the result into (optional)

    Returns
    -------
    (m, k) tensor ``max(||x||^2 - 2 X C^T + ||c||^2, 0)``
    """
    if x_sq is None:
        x_sq = squared_norms(X)
    if c_sq is None:
        c_sq = squared_norms(C)
    D = torch.addmm(c_sq.unsqueeze(0), X, C.T, beta=1.0, alpha=-2.0, out=out)
    D.add_(x_sq.unsqueeze(1))
    return D.clamp_min_(0.0)


def iter_chunks(n: int, chunk_size: int) -> Iterator[slice]:
    """Consecutive row slices of at most ``chunk_size`` rows covering ``range(n)``."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    for start in range(0, n, chunk_size):
        yield slice(start, min(start + chunk_size, n))
