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
  the support. Rows with a single candidate are exactly one-hot and skip the map; the
  others get it on their ``m`` nearest centres, ``m`` the largest candidate count among
  them (an exact top-m), or on whole rows when ``m`` is large. Either way the package
  sorts only as many scores as the supports need (its ``k=`` option, which re-solves the
  rows whose support fills ``k``), since supports are usually a fraction of the
  candidates. A point is exactly hard once ``sigma`` is below half the gap between its
  two nearest squared distances.
- ``hard``: one-hot argmin (``sigma = 0``, Lloyd).

Everything here works on one block of rows (see :mod:`rbfkm_engine.distances`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import scipy.sparse as sp
import torch
from entmax import entmax15

from . import native
from .nearest import nearest
from .params import ASSIGNMENTS

Assignment = Literal["entmax15", "softmax", "hard"]

#: Scores below this (after the row maximum is shifted to 0) are outside the entmax15
#: support whatever the row (``tau >= -1`` means ``z / 2 > -1`` is needed); clamping there
#: keeps every value finite at tiny ``sigma`` without changing the result.
_ENTMAX_FLOOR = -4.0

#: A softmax row is soft (not numerically one-hot) where ``-log`` of its largest
#: responsibility exceeds this.
ONE_HOT_TOLERANCE = 1e-6

#: Size of one ``(rows, width)`` temporary of an entmax15 row group (see
#: :func:`_entmax15_groups`). Smaller groups fall to torch's parallel grain size, where a
#: group's element-wise ops run on one thread (see benchmarks/README.md).
_ENTMAX_GROUP_BYTES = 256 * 1024

#: The partial sort's width (see :func:`_partial_width`) is a multiple of this.
_PARTIAL_SORT_STEP = 16
#: The first row group of :func:`_entmax15_groups`, sorted in full, is this many times
#: smaller than the others.
_FIRST_GROUP_SHARE = 4


@dataclass(frozen=True)
class SparseResponsibilities:
    """Responsibilities that are one-hot on most rows, stored as such.

    A hard row ``i`` has the single nonzero ``R[i, labels[i]] = first[i] = 1``. The
    ``soft_rows`` have ``first = 0`` and their whole row in ``soft_block``
    (``R[soft_rows[r]] = soft_block[r]``, mostly zeros for entmax15). At low temperature few
    rows are soft, so the M-step costs one ``index_add_`` over the points plus one small
    GEMM for the soft ones.
    """

    labels: torch.Tensor  # (m,) int64, the nearest centre
    first: torch.Tensor  # (m,) 1 on hard rows, 0 on soft rows
    soft_rows: torch.Tensor  # (r,) int64
    soft_block: torch.Tensor  # (r, k)
    n_clusters: int
    # The soft rows' support packed, when it is narrow: ``soft_block[r, soft_cols[r, s]]
    # += soft_vals[r, s]`` (padding slots hold 0), so statistics need not scan (r, k).
    soft_cols: torch.Tensor | None = None  # (r, width) int64
    soft_vals: torch.Tensor | None = None  # (r, width)

    @classmethod
    def one_hot(
        cls, labels: torch.Tensor, n_clusters: int, dtype: torch.dtype
    ) -> SparseResponsibilities:
        return cls(
            labels,
            torch.ones(labels.shape[0], dtype=dtype, device=labels.device),
            labels.new_empty((0,)),
            torch.empty((0, n_clusters), dtype=dtype, device=labels.device),
            n_clusters,
        )

    @property
    def n_rows(self) -> int:
        return int(self.labels.shape[0])

    def nnz(self) -> int:
        n_soft = int(self.soft_rows.shape[0])
        block = self.soft_block if self.soft_vals is None else self.soft_vals
        return self.n_rows - n_soft + int(torch.count_nonzero(block))

    def nnz_per_row(self) -> torch.Tensor:
        counts = torch.ones(self.n_rows, dtype=torch.long, device=self.labels.device)
        if self.soft_rows.numel():
            counts[self.soft_rows] = torch.count_nonzero(self.soft_block, dim=1)
        return counts

    def to_dense(self) -> torch.Tensor:
        out = torch.zeros(
            (self.n_rows, self.n_clusters), dtype=self.first.dtype, device=self.first.device
        )
        out.scatter_(1, self.labels.unsqueeze(1), self.first.unsqueeze(1))
        if self.soft_rows.numel():
            out[self.soft_rows] = self.soft_block.to(out.dtype)
        return out

    def to_csr(self) -> sp.csr_matrix:
        """A scipy CSR matrix holding only the nonzeros."""
        first = self.first.detach().cpu().numpy()
        hard = np.flatnonzero(first > 0)
        rows = [hard]
        cols = [self.labels.cpu().numpy()[hard]]
        vals = [first[hard]]
        if self.soft_rows.numel():
            block = self.soft_block.detach().cpu().numpy()
            r, c = np.nonzero(block)
            rows.append(self.soft_rows.cpu().numpy()[r])
            cols.append(c)
            vals.append(block[r, c].astype(first.dtype, copy=False))
        return sp.csr_matrix(
            (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
            shape=(first.shape[0], self.n_clusters),
        )


@dataclass(frozen=True)
class EStep:
    """What one block's E-step hands to the M-step and the statistics."""

    responsibilities: torch.Tensor | SparseResponsibilities  # dense (m, k) or sparse
    energy: torch.Tensor  # (m,) per-point objective  sum_j R D - sigma H(R)
    min_dist: torch.Tensor  # (m,) squared distance to the nearest centre
    labels: torch.Tensor  # (m,) nearest centre
    n_soft: int  # points whose responsibility is not (numerically) one-hot
    soft_index: torch.Tensor | None = None  # (n_soft,) those points' rows, when any


def _working_dtype(D: torch.Tensor) -> torch.Tensor:
    """entmax and softmax give NaN or lose the row sum in half precision: use float32."""
    if D.dtype in (torch.float16, torch.bfloat16):
        return D.float()
    return D


def hard_map(
    D: torch.Tensor,
    row_offset: torch.Tensor | None = None,
    hint: torch.Tensor | None = None,
    scratch: torch.Tensor | None = None,
) -> EStep:
    """One-hot argmin: plain Lloyd responsibilities.

    ``row_offset``: the true distances are ``D + row_offset[:, None]`` (the solver drops
    ``||x||^2`` from its distance blocks, as no map depends on it). ``hint`` and
    ``scratch``: see :func:`nearest`.
    """
    D = _working_dtype(D)
    _, min_dist, labels, _ = row_minima(D, row_offset, hint, scratch)
    R = SparseResponsibilities.one_hot(labels, D.shape[1], D.dtype)
    return EStep(R, min_dist, min_dist, labels, 0)


def softmax_map(
    D: torch.Tensor,
    sigma: float,
    row_offset: torch.Tensor | None = None,
    hint: torch.Tensor | None = None,
    overwrite: bool = False,
    scratch: torch.Tensor | None = None,
) -> EStep:
    """Gaussian RBF responsibilities ``softmax(-D / sigma)``, computed stably.

    The row minimum is subtracted before dividing, so the largest score is exactly 0 and
    nothing overflows however small ``sigma`` is: ``exp`` of the scores lies in ``(0, 1]``
    and their row sum ``s`` in ``[1, k]``, so ``R = exp(z) / s`` and ``logsumexp = log s``
    are stable without ``logsumexp``'s own ``(rows, k)`` temporary. The largest
    responsibility is ``1 / s``, which counts the soft rows for free. ``overwrite``: the
    responsibilities may take ``D``'s storage. ``scratch``: see :func:`nearest`.
    """
    D = _working_dtype(D)
    d_min, min_dist, labels, _ = row_minima(D, row_offset, hint, scratch)
    R = D.sub_(d_min.unsqueeze(1)) if overwrite else D - d_min.unsqueeze(1)
    R.div_(-sigma).exp_()
    total = R.sum(dim=1)
    R.div_(total.unsqueeze(1))
    lse = total.log()
    energy = min_dist - sigma * lse
    soft_index = torch.nonzero(lse > ONE_HOT_TOLERANCE).squeeze(1)
    return EStep(R, energy, min_dist, labels, int(soft_index.shape[0]), soft_index)


def row_minima(
    D: torch.Tensor,
    row_offset: torch.Tensor | None,
    hint: torch.Tensor | None,
    scratch: torch.Tensor | None,
    threshold: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Row minima, true nearest distances, labels and, with ``threshold``, each row's count
    of columns below its minimum plus ``threshold``: in one sweep of the fused kernel on
    the CPU (:func:`~rbfkm_engine.native.row_minima`; ties to the lowest index), else by
    :func:`~rbfkm_engine.nearest.nearest` (``hint``, ``scratch``: see there) and a mask."""
    fused = native.row_minima(D, row_offset, threshold)
    if fused is not None:
        return fused
    d_min, min_dist, labels = nearest(D, row_offset, hint, scratch)
    if threshold is None:
        return d_min, min_dist, labels, None
    return d_min, min_dist, labels, _count_per_row(D < (d_min + threshold).unsqueeze(1))


def _pack_candidates(
    D: torch.Tensor,
    d_min: torch.Tensor,
    candidate: torch.Tensor,
    rows: torch.Tensor | slice,
    counts: torch.Tensor,
    sigma: float,
    near: torch.Tensor,
    near_scores: torch.Tensor,
) -> None:
    """Pack the candidate columns and scores ``-(D - d_min) / sigma`` of ``rows`` into
    ``near`` and ``near_scores``, both ``(len(rows), width)`` (``candidate``: the rows'
    mask of candidates, ``(len(rows), k)``).

    Cheaper than a ``topk`` of ``width`` or a gather of the rows of ``D`` (several times,
    on the CPU): one pass finds the candidates, one scatter packs them. ``counts``: the
    candidates of each row. Rows with fewer than ``width`` candidates are padded with the
    score floor (outside the support: probability exactly 0) on column 0.
    """
    r_idx, cols = torch.nonzero(candidate, as_tuple=True)  # row-major order
    start = torch.cumsum(counts, dim=0) - counts
    slot = torch.arange(r_idx.shape[0], device=D.device) - start[r_idx]
    near.zero_()[r_idx, slot] = cols
    source = r_idx + rows.start if isinstance(rows, slice) else rows[r_idx]
    scores = torch.take(D, source * D.shape[1] + cols).sub_(d_min[source]).div_(-sigma)
    near_scores.fill_(_ENTMAX_FLOOR)[r_idx, slot] = scores.clamp_min_(_ENTMAX_FLOOR)


def _group_rows(k: int, itemsize: int = 4) -> int:
    """Rows per group so that one ``(rows, k)`` temporary takes ``_ENTMAX_GROUP_BYTES``."""
    return max(1, _ENTMAX_GROUP_BYTES // (itemsize * max(k, 1)))


def _count_per_row(mask: torch.Tensor) -> torch.Tensor:
    """``mask.sum(dim=1)`` in int32, by groups of rows.

    A reduction over a bool block first casts the whole block to the result's integer
    type; by groups, that copy stays small.
    """
    counts = torch.empty(mask.shape[0], dtype=torch.int32, device=mask.device)
    group = _group_rows(mask.shape[1])
    for start in range(0, mask.shape[0], group):
        torch.sum(
            mask[start : start + group], dim=1, dtype=torch.int32, out=counts[start : start + group]
        )
    return counts


@dataclass(frozen=True)
class _RowMaps:
    """entmax15 of whole rows, with the per-row sums the energy and statistics need."""

    p: torch.Tensor  # (r, k)
    spent: torch.Tensor  # (r,) sum_j p_j (D_j - d_min)
    tsallis: torch.Tensor  # (r,) (4/3) (1 - sum_j p_j^{3/2})
    support: torch.Tensor  # (r,) int32, nonzeros


def _partial_width(support: int, k: int) -> int | None:
    """The ``k=`` to hand the ``entmax`` package for rows whose support is about ``support``.

    The package sorts only the ``m`` largest scores (``topk``) and re-solves with ``2 m``
    the rows whose support fills ``m``, so the result is exact whatever ``m``; the best
    ``m`` is just above the support. ``None`` (a full sort) once ``m`` would reach ``k``.
    """
    m = _PARTIAL_SORT_STEP * (support // _PARTIAL_SORT_STEP + 1)
    return m if m < k else None


def _entmax15_groups(
    scores: Callable[[slice], torch.Tensor], n_rows: int, p: torch.Tensor, sigma: float
) -> _RowMaps:
    """entmax15 of ``n_rows`` rows of scores into ``p``, with the per-row sums.

    ``scores(part)``: rows ``part`` of the scores ``-(D - d_min) / sigma``, clamped at the
    floor; they may be ``p[part]`` itself, which is written once they are used. The
    package's full sort makes about ten temporaries of the rows' size (the sorted scores,
    their indices, two cumulative sums, ...), so rows go through it in groups of
    ``_ENTMAX_GROUP_BYTES`` per temporary, and so do the sums, keeping the peak near that
    of the distance block itself. On the CPU the first group, smaller than the others, is
    sorted in full and each later one only partially, to just above the largest support
    of the group before (:func:`_partial_width`): supports are usually a fraction of the
    candidates. On a GPU a full sort is cheap, while the partial one's check for rows to
    re-solve waits for the device.
    """
    width = p.shape[1]
    out = _RowMaps(
        p=p,
        spent=p.new_empty(n_rows),
        tsallis=p.new_empty(n_rows),
        support=torch.empty(n_rows, dtype=torch.int32, device=p.device),
    )
    group = _group_rows(width, p.element_size())
    # Nothing to gain from a partial sort when the rows are narrow or fit in one group.
    partial = p.device.type == "cpu" and width > _PARTIAL_SORT_STEP and n_rows > group
    bounds = [0, max(1, group // _FIRST_GROUP_SHARE) if partial else group]
    while bounds[-1] < n_rows:
        bounds.append(bounds[-1] + group)
    sort_width = None
    for start, stop in itertools.pairwise(bounds):
        part = slice(start, stop)
        z = scores(part)
        support = out.support[part]
        if native.entmax15_rows(z, sigma, p[part], out.spent[part], out.tsallis[part], support):
            continue
        q = entmax15(z, dim=-1, k=sort_width)
        # Clamped scores are outside the support (q = 0): sum_j q_j gap_j = -sigma q . z
        out.spent[part] = (q * z).sum(dim=1).mul_(-sigma)
        out.tsallis[part] = (4.0 / 3.0) * (1.0 - q.pow(1.5).sum(dim=1))
        torch.sum(q > 0, dim=1, dtype=torch.int32, out=support)
        p[part] = q
        if partial:
            sort_width = _partial_width(int(support.max()), width)
    return out


def entmax15_map(
    D: torch.Tensor,
    sigma: float,
    row_offset: torch.Tensor | None = None,
    hint: torch.Tensor | None = None,
    overwrite: bool = False,
    scratch: torch.Tensor | None = None,
) -> EStep:
    """Sparse ``entmax15(-D / sigma)``, exact, evaluated only where it is not one-hot.

    A row is soft iff some other centre is within ``2 sigma`` of its nearest one; every
    other row is exactly one-hot and costs nothing beyond the row minimum. The soft rows go
    through the ``entmax`` package (its exact sort-based threshold), on their ``m`` nearest
    centres when ``m``, the largest candidate count, is small (an exact top-m, nothing to
    check), on whole rows otherwise, by groups of rows (:func:`_entmax15_groups`); scores
    below the support bound are clamped so that they stay finite at any ``sigma``.
    ``overwrite``: the soft rows' block may take ``D``'s storage. ``scratch``: see
    :func:`~rbfkm_engine.nearest.nearest`.
    """
    D = _working_dtype(D)
    k = D.shape[1]
    d_min, min_dist, labels, counts = row_minima(D, row_offset, hint, scratch, 2.0 * sigma)
    if k == 1:
        R = SparseResponsibilities.one_hot(labels, k, D.dtype)
        return EStep(R, min_dist, min_dist, labels, 0)
    assert counts is not None
    soft_rows = torch.nonzero(counts > 1).squeeze(1)
    if soft_rows.numel() == 0:
        R = SparseResponsibilities.one_hot(labels, k, D.dtype)
        return EStep(R, min_dist, min_dist, labels, 0)
    soft = _SoftRows(D, d_min, soft_rows, sigma, overwrite)
    soft_counts = counts[soft_rows]
    if int(soft_counts.max()) <= k // 4:
        # Narrow supports: the map on the candidate centres is the full-row map.
        candidate = D[soft_rows] < (d_min[soft_rows] + 2.0 * sigma).unsqueeze(1)
        maps, p, packed = _narrow_maps(soft, candidate, soft_counts)
    else:
        maps = _whole_row_maps(soft)
        p, packed = maps.p, (None, None)
    energy, first = _soft_energy(min_dist, soft_rows, maps, sigma)
    R = SparseResponsibilities(labels, first, soft_rows, p, k, *packed)
    soft_index = soft_rows[maps.support > 1]
    return EStep(R, energy, min_dist, labels, int(soft_index.shape[0]), soft_index)


@dataclass(frozen=True)
class _SoftRows:
    """The rows of a block that entmax15 maps (the others are one-hot)."""

    D: torch.Tensor  # the block (working dtype)
    d_min: torch.Tensor  # its row minima
    rows: torch.Tensor  # (r,) ascending
    sigma: float
    overwrite: bool  # the soft rows' map may take D's storage

    @property
    def every_row(self) -> bool:
        return self.rows.shape[0] == self.D.shape[0]


def _narrow_maps(
    soft: _SoftRows, candidate: torch.Tensor, soft_counts: torch.Tensor
) -> tuple[_RowMaps, torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """The map on each soft row's candidate centres (``candidate``: the soft rows' mask),
    packed into a narrow block; returns the maps, the soft rows' ``(r, k)`` block and the
    packed support ``(columns, values)``."""
    D, r, k = soft.D, soft.rows.shape[0], soft.D.shape[1]
    width = int(soft_counts.max())
    near = torch.empty((r, width), dtype=torch.long, device=D.device)
    near_scores = D.new_empty((r, width))

    def packed_scores(part: slice) -> torch.Tensor:
        # By groups too: finding and packing the candidates makes a few (nonzeros,) index
        # vectors.
        z = near_scores[part]
        rows = slice(part.start, min(part.stop, r)) if soft.every_row else soft.rows[part]
        counts = soft_counts[part]
        _pack_candidates(D, soft.d_min, candidate[part], rows, counts, soft.sigma, near[part], z)
        return z

    maps = _entmax15_groups(packed_scores, r, near_scores, soft.sigma)
    block = D[:r].zero_() if soft.overwrite else D.new_zeros((r, k))
    return maps, block.scatter_add_(1, near, maps.p), (near, maps.p)


def _whole_row_maps(soft: _SoftRows) -> _RowMaps:
    """The map on the soft rows' whole rows (many candidates)."""
    D, d_min, r = soft.D, soft.d_min, soft.rows.shape[0]

    def row_scores(part: slice) -> torch.Tensor:
        if soft.every_row:  # a slice, not a gather
            z = D[part].sub(d_min[part].unsqueeze(1))
        else:
            sub = soft.rows[part]
            z = D[sub].sub_(d_min[sub].unsqueeze(1))
        return z.div_(-soft.sigma).clamp_min_(_ENTMAX_FLOOR)

    # ``soft.rows`` is ascending, so soft row i is written to row i <= soft.rows[i] of ``D``
    # only once the groups that read that row are done.
    out = D[:r] if soft.overwrite else D.new_empty((r, D.shape[1]))
    return _entmax15_groups(row_scores, r, out, soft.sigma)


def _soft_energy(
    min_dist: torch.Tensor, soft_rows: torch.Tensor, maps: _RowMaps, sigma: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-point objective ``sum_j R D - sigma H_T(R)`` and the one-hot weight ``first``
    (1 on hard rows, 0 on soft ones)."""
    n = min_dist.shape[0]
    if soft_rows.shape[0] == n:
        energy = min_dist + (maps.spent - sigma * maps.tsallis)
        return energy, torch.zeros(n, dtype=min_dist.dtype, device=min_dist.device)
    energy = min_dist.clone()
    energy[soft_rows] += maps.spent - sigma * maps.tsallis
    first = torch.ones(n, dtype=min_dist.dtype, device=min_dist.device)
    first[soft_rows] = 0.0
    return energy, first


def responsibilities(
    D: torch.Tensor,
    sigma: float,
    assignment: str,
    row_offset: torch.Tensor | None = None,
    hint: torch.Tensor | None = None,
    overwrite: bool = False,
    scratch: torch.Tensor | None = None,
) -> EStep:
    """Dispatch to the map named by ``assignment``.

    ``sigma <= 0``, or so small that it is 0 in the working precision, means hard: that is
    the limit of both maps, and dividing by it would give NaN. ``row_offset``, ``hint`` and
    ``scratch``: see :func:`hard_map`. ``overwrite``: ``D`` is not needed afterwards, and
    the responsibilities may take its storage instead of a block of their own.
    """
    if assignment == "hard" or sigma < torch.finfo(_working_dtype(D).dtype).tiny:
        return hard_map(D, row_offset, hint, scratch)
    if assignment == "softmax":
        return softmax_map(D, sigma, row_offset, hint, overwrite, scratch)
    if assignment == "entmax15":
        return entmax15_map(D, sigma, row_offset, hint, overwrite, scratch)
    raise ValueError(f"assignment must be one of {ASSIGNMENTS}, got {assignment!r}")


def to_csr_block(R: torch.Tensor | SparseResponsibilities, n_clusters: int) -> sp.csr_matrix:
    """One block of responsibilities as a scipy CSR matrix holding only the nonzeros."""
    if isinstance(R, SparseResponsibilities):
        return R.to_csr()
    dense = R.detach().cpu().numpy()
    return sp.csr_matrix(dense, shape=(dense.shape[0], n_clusters))
