"""Losses on the layer's output: the soft K-Means free energy and the commitment loss."""

from __future__ import annotations

import torch

from .kernels import dissimilarities


def entropy(r: torch.Tensor, assignment: str) -> torch.Tensor:
    """The entropy each map maximises, per row: Tsallis-1.5 ``(4/3)(1 - sum_j r_j^1.5)`` for
    entmax15, Shannon ``-sum_j r_j log r_j`` otherwise (0 on one-hot rows). Zeros of ``r``
    contribute 0 with a 0 gradient (no ``0 * log 0``)."""
    if assignment == "entmax15":
        return (4.0 / 3.0) * (1.0 - r.clamp_min(0.0).pow(1.5).sum(dim=-1))
    tiny = torch.finfo(r.dtype).tiny
    terms = torch.where(r > 0, r * torch.log(r.clamp_min(tiny)), torch.zeros_like(r))
    return -terms.sum(dim=-1)


def free_energy(
    r: torch.Tensor,
    e: torch.Tensor,
    sigma: torch.Tensor | float,
    assignment: str,
    *,
    weights: torch.Tensor | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """The objective the engine anneals, ``J_sigma = sum_i w_i (sum_j R_ij E_ij - sigma
    H(R_i))`` (docs/algorithm.md), from a :class:`~rbfkm_engine.nn.Clustering`'s
    ``responsibilities`` ``r`` and ``energies`` ``e`` (squared distances for the Gaussian
    kernel).

    For fixed centres the map's responsibilities minimise it, so its gradient to the
    centres is ``sum_i w_i R_ij dE_ij / dc_j`` (the M-step's direction) and to
    ``sigma`` ``-sum_i w_i H(R_i)``; as ``sigma -> 0`` it is the K-Means inertia.
    ``reduction``: ``"mean"`` (over the points, weighted) or ``"sum"``.
    """
    per_point = (r * e).sum(dim=-1) - sigma * entropy(r, assignment)
    return _reduce(per_point, weights, reduction)


def commitment_loss(
    x: torch.Tensor,
    centroids: torch.Tensor,
    r: torch.Tensor,
    metric: str = "euclidean",
    *,
    reduction: str = "mean",
) -> torch.Tensor:
    """VQ-VAE's commitment loss, soft: ``sum_j sg(R_ij) D(x_i, sg(c_j))``, which pulls the
    inputs (an encoder's codes) towards their centres and leaves the centres alone; with
    one-hot ``r`` it is ``||x_i - sg(c_{label_i})||^2``."""
    x = x.to(r.dtype)
    d = dissimilarities(x, centroids.detach().to(r.dtype), metric)
    return _reduce((r.detach() * d).sum(dim=-1), None, reduction)


def _reduce(per_point: torch.Tensor, weights: torch.Tensor | None, reduction: str) -> torch.Tensor:
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
    if weights is not None:
        weights = weights.to(per_point.dtype)
        total = (weights * per_point).sum()
        return total / weights.sum() if reduction == "mean" else total
    return per_point.mean() if reduction == "mean" else per_point.sum()
