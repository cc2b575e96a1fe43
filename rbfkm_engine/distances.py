"""Squared Euclidean distances of a block of rows to the centres.

``D_ij = ||x_i||^2 - 2 x_i . c_j + ||c_j||^2`` is one GEMM per block of rows (``addmm``),
clamped at 0 because cancellation can make it slightly negative. The blocks' sizes are
:mod:`~rbfkm_engine.blocks`'s, so the peak extra memory is bounded by a budget and not by
``n x k``.
"""

from __future__ import annotations

import torch

#: ``squared_norms`` of fewer elements than this squares a copy, faster than ``einsum``
#: there (whose fixed cost dominates); from it on, ``einsum`` spares a copy of ``X`` that
#: would count in the fit's peak memory.
_EINSUM_FROM = 1 << 20


def squared_norms(X: torch.Tensor) -> torch.Tensor:
    """Row-wise squared norms ``||x_i||^2`` (shape ``(n,)``)."""
    if X.numel() < _EINSUM_FROM:
        return X.square().sum(dim=1)
    return torch.einsum("ij,ij->i", X, X)


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
