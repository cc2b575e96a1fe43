"""DKM's fixed-point iterations inside the forward pass, differentiable.

Differentiable K-Means (Cho et al., ICLR 2022) runs a few soft K-Means iterations from the
layer's centres in the forward pass and backpropagates through them: each iteration is the
engine's M-step ``c_j = sum_i R_ij x_i / sum_i R_ij`` on the responsibilities of the
centres before it. At zero temperature the iterations are Lloyd's.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.nn import functional as F


def m_step(x: torch.Tensor, r: torch.Tensor, centroids: torch.Tensor, metric: str) -> torch.Tensor:
    """The weighted means ``R^T x / sum_i R_ij`` of ``x`` ``(..., n, d)`` under ``r``
    ``(..., n, k)``; a centre without mass keeps its place (as the engine's annealing
    does); cosine centres are renormalised."""
    mass = r.sum(dim=-2).unsqueeze(-1)
    means = (r.transpose(-1, -2) @ x) / mass.clamp_min(torch.finfo(x.dtype).tiny)
    centres = torch.where(mass > 0, means, centroids)
    return F.normalize(centres, dim=-1) if metric == "cosine" else centres


def iterate(
    x: torch.Tensor,
    centroids: torch.Tensor,
    n_iter: int,
    respond: Callable[[torch.Tensor], torch.Tensor],
    metric: str,
) -> torch.Tensor:
    """The centres after ``n_iter`` iterations from ``centroids``; ``respond(c)``: the
    responsibilities of ``x`` to centres ``c``. With batched ``x`` ``(B, n, d)`` each batch
    gets its own centres ``(B, k, d)``."""
    c = centroids
    for _ in range(n_iter):
        c = m_step(x, respond(c), c, metric)
    return c
