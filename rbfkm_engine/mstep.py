"""The M-step's sums, accumulated block by block during a pass.

``c_j = sum_i w_i R_ij x_i / sum_i w_i R_ij``: dense responsibilities go through one GEMM
``R^T X`` per block; sparse ones (entmax15 at low temperature, hard) through
``index_add_`` over their few support slots plus a small GEMM for the soft rows, so there
is never a Python loop over points. Also the per-centre spread (the distortion behind the
twins' radii) and the count of nonzero responsibilities.
"""

from __future__ import annotations

import torch

from .assign import ONE_HOT_TOLERANCE, EStep, SparseResponsibilities


def weighted_sum(values: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    """``sum_i w_i v_i`` (``w = 1`` when ``None``) accumulated in float64."""
    return (values if weights is None else weights * values).sum(dtype=torch.float64)


def count_nonzeros(R: torch.Tensor | SparseResponsibilities, twins_from: int | None) -> int:
    """Nonzeros of one block, a centre's twin counted with the centre."""
    if isinstance(R, SparseResponsibilities):
        if twins_from is None or R.soft_rows.numel() == 0:
            return R.nnz()
        n_hard = R.n_rows - R.soft_rows.shape[0]
        if R.soft_cols is not None:
            # Distinct (row, centre) pairs among the nonzeros, a twin mapped to its centre.
            r, s = torch.nonzero(R.soft_vals, as_tuple=True)
            centre = R.soft_cols[r, s].remainder(twins_from)
            return n_hard + int(torch.unique(r * twins_from + centre).numel())
        block = R.soft_block
        folded = block[:, :twins_from] + block[:, twins_from:]
        return n_hard + int(torch.count_nonzero(folded))
    if twins_from is not None:
        R = R[:, :twins_from] + R[:, twins_from:]
    return int(torch.count_nonzero(R))


def shared_rows(
    R: torch.Tensor | SparseResponsibilities, soft_index: torch.Tensor, twins_from: int | None
) -> torch.Tensor:
    """The soft rows of one block (``soft_index``: the rows that are not one-hot) whose
    responsibilities fall on two centres or more, a centre's twin counted with the centre:
    a row shared by a centre and its twin alone is hard for the hand-over to Lloyd."""
    if twins_from is None or soft_index.numel() == 0:
        return soft_index
    if not isinstance(R, SparseResponsibilities):
        folded = R[soft_index, :twins_from] + R[soft_index, twins_from:]
        return soft_index[-torch.log(folded.amax(dim=1)) > ONE_HOT_TOLERANCE]
    if R.soft_cols is not None:
        r, s = torch.nonzero(R.soft_vals, as_tuple=True)
        pairs = torch.unique(r * twins_from + R.soft_cols[r, s].remainder(twins_from))
        row = torch.div(pairs, twins_from, rounding_mode="floor")
        centres = torch.bincount(row, minlength=R.soft_rows.shape[0])
    else:
        block = R.soft_block
        centres = torch.count_nonzero(block[:, :twins_from] + block[:, twins_from:], dim=1)
    return R.soft_rows[centres > 1]


def accumulate(
    num: torch.Tensor,
    den: torch.Tensor,
    X: torch.Tensor,
    w: torch.Tensor | None,
    R: torch.Tensor | SparseResponsibilities,
) -> None:
    """Add one block's ``R^T W X`` to ``num`` and ``R^T w`` to ``den`` (in place)."""
    if not isinstance(R, SparseResponsibilities):
        R = R.to(X.dtype)
        if w is not None:
            R = R * w.unsqueeze(1)
        num.addmm_(R.T, X)
        den.add_(R.sum(dim=0))
        return
    soft = R.soft_rows.numel() > 0
    if R.soft_rows.shape[0] < R.n_rows:
        _accumulate_hard_rows(num, den, X, w, R)
    if soft:
        block = R.soft_block.to(X.dtype)
        if w is not None:
            block = block * _rows(w, R).unsqueeze(1)
        num.addmm_(block.T, _rows(X, R))
        den.add_(block.sum(dim=0))


def _accumulate_hard_rows(
    num: torch.Tensor,
    den: torch.Tensor,
    X: torch.Tensor,
    w: torch.Tensor | None,
    R: SparseResponsibilities,
) -> None:
    """The one-hot rows' share of :func:`accumulate`."""
    soft = R.soft_rows.numel() > 0
    first = R.first.to(X.dtype)
    if w is not None:
        first = first * w
    if w is None and 2 * R.soft_rows.shape[0] < R.n_rows:
        # Every row at its label, minus the few soft rows: cheaper than scaling X by
        # ``first``.
        num.index_add_(0, R.labels, X)
        if soft:
            num.index_add_(0, R.labels[R.soft_rows], X[R.soft_rows], alpha=-1.0)
    else:
        num.index_add_(0, R.labels, X * first.unsqueeze(1))
    den.index_add_(0, R.labels, first)


def _rows(A: torch.Tensor, R: SparseResponsibilities) -> torch.Tensor:
    """``A[R.soft_rows]``, without the copy when every row is soft."""
    return A if R.soft_rows.shape[0] == R.n_rows else A[R.soft_rows]


def accumulate_spread(
    spread: torch.Tensor,
    D: torch.Tensor,
    x_sq: torch.Tensor,
    e: EStep,
    w: torch.Tensor | None,
) -> None:
    """Add the per-centre distortion ``sum_i w_i R_ij ||x_i - c_j||^2`` to ``spread``.

    ``D`` is the block without ``||x||^2`` (see :meth:`~rbfkm_engine.passes.Workspace.step`).
    """
    R = e.responsibilities
    if isinstance(R, SparseResponsibilities):
        if R.soft_rows.shape[0] < R.n_rows:  # the one-hot rows
            first = R.first if w is None else R.first * w
            spread.index_add_(0, R.labels, (first * e.min_dist).to(spread.dtype))
        if R.soft_cols is not None:
            rows = R.soft_rows.unsqueeze(1)
            dist = torch.take(D, rows * D.shape[1] + R.soft_cols).add_(x_sq[rows]).clamp_min_(0.0)
            vals = R.soft_vals if w is None else R.soft_vals * w[rows]
            spread.index_add_(0, R.soft_cols.flatten(), (vals * dist).flatten())
        elif R.soft_rows.numel():
            dist = (_rows(D, R) + _rows(x_sq, R).unsqueeze(1)).clamp_min_(0.0)
            block = R.soft_block if w is None else R.soft_block * _rows(w, R).unsqueeze(1)
            spread.add_((block * dist).sum(dim=0))
        return
    Rw = R if w is None else R * w.unsqueeze(1)
    spread.add_((Rw * (D + x_sq.unsqueeze(1)).clamp_min_(0.0)).sum(dim=0))
