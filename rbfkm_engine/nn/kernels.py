"""Dissimilarities and kernels: what the layer's temperature divides.

The layer's scores are ``-E / sigma`` with ``E`` an *energy* per point and centre. ``E``
is the dissimilarity ``D`` (a metric's) passed through a kernel:

- ``"gaussian"``: ``E = D``, the Gaussian RBF of the engine;
- ``"student_t"``: ``E = ((alpha + 1) / 2) log(1 + D / alpha)``, so that
  ``softmax(-E)`` is DEC's Student-t soft assignment ``q_ij ∝ (1 + D_ij / alpha)^-(alpha+1)/2``
  at ``sigma = 1``; the temperature sharpens it as for the Gaussian.

Both energies increase with ``D``, so every map's zero-temperature limit is the K-Means
assignment ``argmin_j D_ij`` whatever the kernel.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

#: The dissimilarities, by name.
METRICS = ("euclidean", "cosine")
#: The kernels, by name.
KERNELS = ("gaussian", "student_t")


def dissimilarities(x: torch.Tensor, centroids: torch.Tensor, metric: str) -> torch.Tensor:
    """``(..., n, d)`` points and ``(k, d)`` or ``(..., k, d)`` centres -> ``(..., n, k)``.

    ``"euclidean"``: squared distances ``||x||^2 - 2 x.c + ||c||^2`` (one GEMM), clamped
    at 0; ``"cosine"``: ``1 - cos(x, c)``, in ``[0, 2]``, the squared distance of the unit
    vectors halved.
    """
    c_t = centroids.transpose(-1, -2)
    if metric == "cosine":
        return (1.0 - F.normalize(x, dim=-1) @ F.normalize(c_t, dim=-2)).clamp_min(0.0)
    x_sq = (x * x).sum(-1, keepdim=True)
    c_sq = (centroids * centroids).sum(-1).unsqueeze(-2)
    return (x_sq - 2.0 * (x @ c_t) + c_sq).clamp_min(0.0)


def energies(d: torch.Tensor, kernel: str, alpha: float = 1.0) -> torch.Tensor:
    """The kernel's energy ``E`` of dissimilarities ``d`` (see the module docstring)."""
    if kernel == "student_t":
        return (0.5 * (alpha + 1.0)) * torch.log1p(d / alpha)
    return d
