"""The annealed fixed-point solver behind :class:`~rbfkm_engine.RBFKMeans`.

One *iteration* is an E-step (responsibilities of every point, block by block) fused with
the accumulation of the M-step ``c_j = sum_i w_i R_ij x_i / sum_i w_i R_ij``: dense
responsibilities go through one GEMM ``R^T X`` per block, sparse ones (entmax15 at low
temperature, hard) through ``index_add_`` over their few support slots, so there is never
a Python loop over points. At each temperature the iteration is repeated until the centres
move less than ``tol``; the temperature then falls geometrically, and a final phase of
hard (Lloyd) iterations ends on a true K-Means fixed point.

This module knows tensors only; validation and conversions live in ``model.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from .assign import EStep, SparseRows, responsibilities
from .distances import iter_chunks, squared_distances, squared_norms

#: Sparse responsibilities wider than this are scattered to a dense block for one GEMM.
_SPARSE_SLOTS_MAX = 8
#: Annealing hands over to Lloyd once at most this fraction of the points is still soft.
SOFT_FRACTION_STOP = 1e-3
#: Share of ``max_iter`` kept for the final Lloyd phase.
LLOYD_SHARE = 0.2


@dataclass(frozen=True)
class FitProgress:
    """What a fit callback is told after each fixed-point iteration."""

    sigma: float  # temperature of the iteration; 0.0 in the final Lloyd phase
    iteration: int  # iterations so far, all temperatures together
    objective: float  # J_sigma at the centres the iteration started from
    fraction: float  # estimate of the share of the fit done, in [0, 1]
    phase: str  # "anneal" or "lloyd"


Callback = Callable[[FitProgress], "bool | None"]


@dataclass
class IterationStats:
    """Totals of one pass over the data (weighted)."""

    objective: float
    inertia: float
    mean_nnz: float
    n_soft: int


@dataclass
class SolverResult:
    centres: torch.Tensor
    labels: torch.Tensor
    inertia: float
    n_iter: int
    sigma: float
    history: list[dict[str, float]] = field(default_factory=list)
    converged: bool = True
    stopped_early: bool = False
    n_empty_reseeded: int = 0


class FixedPointIteration:
    """Buffers and the fused E/M pass for one data set.

    Keeps per-point nearest distances and labels of the last pass, used to re-seed empty
    clusters and to report hard labels without another distance computation.
    """

    def __init__(
        self,
        X: torch.Tensor,
        sample_weight: torch.Tensor | None,
        n_clusters: int,
        chunk_size: int,
    ) -> None:
        self.X = X
        self.w = sample_weight
        self.k = n_clusters
        self.chunk_size = chunk_size
        self.x_sq = squared_norms(X)
        self.min_dist = torch.empty(X.shape[0], dtype=X.dtype, device=X.device)
        self.labels = torch.empty(X.shape[0], dtype=torch.long, device=X.device)
        self.total_weight = float(X.shape[0] if sample_weight is None else sample_weight.sum())

    def step(
        self, C: torch.Tensor, sigma: float, assignment: str
    ) -> tuple[torch.Tensor, torch.Tensor, IterationStats]:
        """One pass: returns the M-step sums ``(R^T W X, R^T w)`` and the statistics."""
        X, w = self.X, self.w
        num = torch.zeros_like(C)
        den = torch.zeros(self.k, dtype=C.dtype, device=C.device)
        objective = torch.zeros((), dtype=torch.float64, device=C.device)
        inertia = torch.zeros((), dtype=torch.float64, device=C.device)
        nnz = torch.zeros((), dtype=torch.float64, device=C.device)
        n_soft = 0
        c_sq = squared_norms(C)
        for rows in iter_chunks(X.shape[0], self.chunk_size):
            Xc = X[rows]
            wc = None if w is None else w[rows]
            D = squared_distances(Xc, C, self.x_sq[rows], c_sq)
            e = responsibilities(D, sigma, assignment)
            self.min_dist[rows] = e.min_dist
            self.labels[rows] = e.labels
            if wc is None:
                objective += e.energy.sum(dtype=torch.float64)
                inertia += e.min_dist.sum(dtype=torch.float64)
            else:
                objective += (wc * e.energy).sum(dtype=torch.float64)
                inertia += (wc * e.min_dist).sum(dtype=torch.float64)
            nnz += _count_nonzeros(e)
            n_soft += e.n_soft
            _accumulate(num, den, Xc, wc, e.responsibilities)
        stats = IterationStats(
            objective=float(objective),
            inertia=float(inertia),
            mean_nnz=float(nnz) / X.shape[0],
            n_soft=n_soft,
        )
        return num, den, stats

    def update(
        self, C: torch.Tensor, num: torch.Tensor, den: torch.Tensor
    ) -> tuple[torch.Tensor, int]:
        """New centres ``num / den``; clusters that received no mass are re-seeded.

        As scikit-learn and faiss do, an empty cluster moves to the point farthest from its
        nearest centre (points of weight 0 are never chosen).
        """
        C_new = num / den.clamp_min(torch.finfo(den.dtype).tiny).unsqueeze(1)
        empty = den <= 0
        n_empty = int(empty.sum())
        if n_empty:
            score = (
                self.min_dist if self.w is None else torch.where(self.w > 0, self.min_dist, -1.0)
            )
            far = torch.topk(score, n_empty).indices
            C_new[empty] = self.X[far].to(C_new.dtype)
        return C_new, n_empty

    def final_labels(self, C: torch.Tensor) -> float:
        """Hard E-step at ``C``: fills ``labels`` and ``min_dist``; returns the inertia."""
        c_sq = squared_norms(C)
        inertia = torch.zeros((), dtype=torch.float64, device=C.device)
        for rows in iter_chunks(self.X.shape[0], self.chunk_size):
            D = squared_distances(self.X[rows], C, self.x_sq[rows], c_sq)
            min_dist, labels = D.min(dim=1)
            self.min_dist[rows] = min_dist
            self.labels[rows] = labels
            wc = None if self.w is None else self.w[rows]
            inertia += (min_dist if wc is None else wc * min_dist).sum(dtype=torch.float64)
        return float(inertia)


def _count_nonzeros(e: EStep) -> torch.Tensor:
    R = e.responsibilities
    if isinstance(R, SparseRows):
        if R.width == 1:
            return torch.tensor(float(R.values.shape[0]), dtype=torch.float64)
        return (R.values > 0).sum(dtype=torch.float64)
    return (R > 0).sum(dtype=torch.float64)


def _accumulate(
    num: torch.Tensor,
    den: torch.Tensor,
    X: torch.Tensor,
    w: torch.Tensor | None,
    R: torch.Tensor | SparseRows,
) -> None:
    """Add one block's ``R^T W X`` to ``num`` and ``R^T w`` to ``den`` (in place)."""
    if isinstance(R, SparseRows) and R.width > _SPARSE_SLOTS_MAX:
        R = R.to_dense()
    if isinstance(R, SparseRows):
        values = R.values.to(X.dtype)
        if w is not None:
            values = values * w.unsqueeze(1)
        if R.width == 1 and w is None:
            num.index_add_(0, R.indices[:, 0], X)
            den.index_add_(0, R.indices[:, 0], values[:, 0])
            return
        for slot in range(R.width):
            idx, v = R.indices[:, slot], values[:, slot]
            num.index_add_(0, idx, X * v.unsqueeze(1))
            den.index_add_(0, idx, v)
        return
    R = R.to(X.dtype)
    if w is not None:
        R = R * w.unsqueeze(1)
    num.addmm_(R.T, X)
    den.add_(R.sum(dim=0))


def solve(
    X: torch.Tensor,
    sample_weight: torch.Tensor | None,
    C0: torch.Tensor,
    *,
    assignment: str,
    schedule: list[float],
    max_iter: int,
    tol: float,
    chunk_size: int,
    callback: Callback | None = None,
    progress_offset: float = 0.0,
    progress_scale: float = 1.0,
    verbose: bool = False,
) -> SolverResult:
    """Anneal over ``schedule`` (empty for plain Lloyd), then Lloyd to a fixed point.

    ``tol`` is absolute: the sum over centres of the squared centre shift.
    ``max_iter`` counts every iteration, all temperatures together; a share of it
    (``LLOYD_SHARE``) is kept for the Lloyd phase.
    """
    fp = FixedPointIteration(X, sample_weight, C0.shape[0], chunk_size)
    C = C0.clone()
    history: list[dict[str, float]] = []
    n_iter = 0
    n_empty_total = 0
    stopped = False
    sigma_reached = 0.0

    def report(sigma: float, objective: float, fraction: float, phase: str) -> bool:
        if callback is None:
            return False
        info = FitProgress(
            sigma=sigma,
            iteration=n_iter,
            objective=objective,
            fraction=min(1.0, progress_offset + progress_scale * fraction),
            phase=phase,
        )
        return bool(callback(info))

    anneal_budget = max_iter - max(1, math.ceil(LLOYD_SHARE * max_iter)) if schedule else 0
    for t, sigma in enumerate(schedule):
        if n_iter >= anneal_budget or stopped:
            break
        remaining_temps = len(schedule) - t
        cap = max(2, math.ceil(2 * (anneal_budget - n_iter) / remaining_temps))
        iters_here = 0
        stats = None
        while iters_here < cap and n_iter < anneal_budget:
            num, den, stats = fp.step(C, sigma, assignment)
            C_new, n_empty = fp.update(C, num, den)
            n_empty_total += n_empty
            shift = float(((C_new - C) ** 2).sum())
            C = C_new
            n_iter += 1
            iters_here += 1
            fraction = (1.0 - LLOYD_SHARE) * (t + min(1.0, iters_here / cap)) / len(schedule)
            if report(sigma, stats.objective, fraction, "anneal"):
                stopped = True
                break
            if shift <= tol and n_empty == 0:
                break
        assert stats is not None
        sigma_reached = sigma
        history.append(
            {
                "sigma": float(sigma),
                "objective": stats.objective,
                "inertia": stats.inertia,
                "iterations": iters_here,
                "mean_nnz": stats.mean_nnz,
            }
        )
        if verbose:
            print(
                f"sigma={sigma:.4g} iters={iters_here} J={stats.objective:.6g} "
                f"inertia={stats.inertia:.6g} nnz/row={stats.mean_nnz:.3g} soft={stats.n_soft}"
            )
        if stats.n_soft <= SOFT_FRACTION_STOP * X.shape[0]:
            break

    converged = False
    lloyd_iters = 0
    lloyd_budget = max(1, max_iter - n_iter)
    last = None
    while not stopped and n_iter < max_iter:
        num, den, last = fp.step(C, 0.0, "hard")
        C_new, n_empty = fp.update(C, num, den)
        n_empty_total += n_empty
        shift = float(((C_new - C) ** 2).sum())
        C = C_new
        n_iter += 1
        lloyd_iters += 1
        fraction = (1.0 - LLOYD_SHARE) + LLOYD_SHARE * lloyd_iters / lloyd_budget
        if report(0.0, last.objective, fraction, "lloyd"):
            stopped = True
        if shift <= tol and n_empty == 0:
            converged = True
            break
    if last is not None:
        history.append(
            {
                "sigma": 0.0,
                "objective": last.objective,
                "inertia": last.inertia,
                "iterations": lloyd_iters,
                "mean_nnz": 1.0,
            }
        )
        if verbose:
            print(f"lloyd iters={lloyd_iters} inertia={last.inertia:.6g} converged={converged}")
    inertia = fp.final_labels(C)
    return SolverResult(
        centres=C,
        labels=fp.labels.clone(),
        inertia=inertia,
        n_iter=n_iter,
        sigma=sigma_reached,
        history=history,
        converged=converged,
        stopped_early=stopped,
        n_empty_reseeded=n_empty_total,
    )
