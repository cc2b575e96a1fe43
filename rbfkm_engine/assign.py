"""Responsibility maps: how much each centre is responsible for each point.

With squared distances ``D`` (rows: points, columns: centres) and temperature ``sigma``,
the scores are ``z = -D / sigma`` and

- ``softmax``:  ``R_i = softmax(z_i)``, the Gaussian RBF layer. It minimises
  ``sum_j R_ij D_ij - sigma H(R_i)`` (Shannon entropy), with minimum value
  ``-sigma logsumexp(z_i)``. Dense.
- ``entmax15``: ``R_i = entmax15(z_i)``, ``R_ij = [z_ij / 2 - tau_i]_+^2`` with ``tau_i`` such
  that the row sums to 1 (Peters et al., 2019). It minimises
  ``sum_j R_ij D_ij - sigma H_T(R_i)`` with the Tsallis entropy
  ``H_T(p) = (4/3) (1 - sum_j p_j^{3/2})``. Sparse: after shifting the row so its maximum
  score is 0, ``tau >= -1``, so only centres with ``D_ij - min_j D_ij < 2 sigma`` can be in
  the support. The map is therefore computed exactly on the top-m nearest centres, with
  ``m`` the largest number of such candidates in the block: no partial-sort guess to check
  and re-sort. A point is exactly hard once ``sigma`` is below half the gap between its
  two nearest squared distances.
- ``hard``: one-hot argmin (``sigma = 0``, Lloyd).

Everything here works on one block of rows (see :mod:`rbfkm_engine.distances`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import scipy.sparse as sp
import torch
from entmax import entmax15

Assignment = Literal["entmax15", "softmax", "hard"]
ASSIGNMENTS: tuple[str, ...] = ("entmax15", "softmax", "hard")

#: Scores below this (after the row maximum is shifted to 0) are outside the entmax15
#: support whatever the row (``tau >= -1`` means ``z / 2 > -1`` is needed); clamping there
#: keeps every value finite at tiny ``sigma`` without changing the result.
_ENTMAX_FLOOR = -4.0


@dataclass(frozen=True)
class SparseRows:
    """Row-sparse responsibilities of fixed width: ``R[i, indices[i, s]] = values[i, s]``.

    Padding entries have value 0. ``indices[:, 0]`` is each row's nearest centre.
    """

    indices: torch.Tensor
    values: torch.Tensor
    n_clusters: int

    @property
    def width(self) -> int:
        return int(self.indices.shape[1])

    def nnz_per_row(self) -> torch.Tensor:
        return (self.values > 0).sum(dim=1)

    def to_dense(self) -> torch.Tensor:
        out = torch.zeros(
            (self.indices.shape[0], self.n_clusters),
            dtype=self.values.dtype,
            device=self.values.device,
        )
        return out.scatter_(1, self.indices, self.values)


@dataclass(frozen=True)
class EStep:
    """What one block's E-step hands to the M-step and the statistics."""

    responsibilities: torch.Tensor | SparseRows  # dense (m, k) or row-sparse
    energy: torch.Tensor  # (m,) per-point objective  sum_j R D - sigma H(R)
    min_dist: torch.Tensor  # (m,) squared distance to the nearest centre
    labels: torch.Tensor  # (m,) nearest centre
    n_soft: int  # points whose responsibility is not (numerically) one-hot


def _working_dtype(D: torch.Tensor) -> torch.Tensor:
    """entmax and softmax give NaN or lose the row sum in half precision: use float32."""
    if D.dtype in (torch.float16, torch.bfloat16):
        return D.float()
    return D


def hard_map(D: torch.Tensor) -> EStep:
    """One-hot argmin: plain Lloyd responsibilities."""
    min_dist, labels = D.min(dim=1)
    ones = torch.ones((D.shape[0], 1), dtype=D.dtype, device=D.device)
    rows = SparseRows(labels.unsqueeze(1), ones, D.shape[1])
    return EStep(rows, min_dist, min_dist, labels, 0)


def softmax_map(D: torch.Tensor, sigma: float) -> EStep:
    """Gaussian RBF responsibilities ``softmax(-D / sigma)``, computed stably.

    The row minimum is subtracted before dividing, so the largest score is exactly 0 and
    nothing overflows however small ``sigma`` is.
    """
    D = _working_dtype(D)
    min_dist, labels = D.min(dim=1)
    logits = (D - min_dist.unsqueeze(1)).div_(-sigma)
    lse = torch.logsumexp(logits, dim=1)
    R = logits.sub_(lse.unsqueeze(1)).exp_()
    energy = min_dist - sigma * lse
    n_soft = int((R.amax(dim=1) < 1.0 - 1e-6).sum())
    return EStep(R, energy, min_dist, labels, n_soft)


def entmax15_map(D: torch.Tensor, sigma: float) -> EStep:
    """Sparse ``entmax15(-D / sigma)`` on the exact candidate set of each row.

    Only centres within ``2 sigma`` of the nearest one can carry mass, so the map is
    evaluated (with the ``entmax`` package) on the ``m`` nearest centres, ``m`` being the
    largest candidate count in the block; the result equals the full-row entmax15.
    """
    D = _working_dtype(D)
    k = D.shape[1]
    min_dist, labels = D.min(dim=1)
    gap = D - min_dist.unsqueeze(1)
    width = int((gap < 2.0 * sigma).sum(dim=1).max()) if k > 1 else 1
    if width <= 1:
        ones = torch.ones((D.shape[0], 1), dtype=D.dtype, device=D.device)
        rows = SparseRows(labels.unsqueeze(1), ones, k)
        return EStep(rows, min_dist, min_dist, labels, 0)
    near_gap, indices = torch.topk(gap, width, dim=1, largest=False, sorted=True)
    scores = (near_gap / -sigma).clamp_min_(_ENTMAX_FLOOR)
    p = entmax15(scores, dim=-1)
    tsallis = (4.0 / 3.0) * (1.0 - p.pow(1.5).sum(dim=1))
    energy = min_dist + (p * near_gap).sum(dim=1) - sigma * tsallis
    n_soft = int((p[:, 1] > 0).sum())
    return EStep(SparseRows(indices, p, k), energy, min_dist, labels, n_soft)


def responsibilities(D: torch.Tensor, sigma: float, assignment: str) -> EStep:
    """Dispatch to the map named by ``assignment``; ``sigma <= 0`` means hard."""
    if assignment == "hard" or sigma <= 0.0:
        return hard_map(D)
    if assignment == "softmax":
        return softmax_map(D, sigma)
    if assignment == "entmax15":
        return entmax15_map(D, sigma)
    raise ValueError(f"assignment must be one of {ASSIGNMENTS}, got {assignment!r}")


def to_csr_block(R: torch.Tensor | SparseRows, n_clusters: int) -> sp.csr_matrix:
    """One block of responsibilities as a scipy CSR matrix holding only the nonzeros."""
    if isinstance(R, SparseRows):
        values = R.values.detach().cpu().numpy()
        indices = R.indices.detach().cpu().numpy()
        rows = np.broadcast_to(np.arange(values.shape[0])[:, None], values.shape)
        mask = values > 0
        return sp.csr_matrix(
            (values[mask], (rows[mask], indices[mask])), shape=(values.shape[0], n_clusters)
        )
    dense = R.detach().cpu().numpy()
    return sp.csr_matrix(dense, shape=(dense.shape[0], n_clusters))
