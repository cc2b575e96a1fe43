"""The M-step's sums: dense and sparse responsibilities give the dense reference's
``R^T W X``, ``R^T w``, per-centre spreads and nonzero counts, twins folded or not."""

from __future__ import annotations

import pytest
import torch

from rbfkm_engine.assign import SparseResponsibilities, responsibilities
from rbfkm_engine.distances import squared_norms
from rbfkm_engine.mstep import accumulate, accumulate_spread, count_nonzeros, weighted_sum

from .conftest import blob_tensor

# Sixteen centres around four blobs: at low temperature a point's support is a few nearby
# centres (entmax15 packs them narrowly), at high temperature it is most of the row.
BLOBS = [[-6.0, 0.0], [6.0, 0.0], [0.0, 6.0], [0.0, -6.0]]


def data() -> tuple[torch.Tensor, torch.Tensor]:
    X = blob_tensor(BLOBS, n_per=50, spread=1.0, seed=1)
    g = torch.Generator().manual_seed(2)
    C = X[torch.randperm(X.shape[0], generator=g)[:16]] + 0.1
    return X, C


def weights(n: int, weighted: bool) -> torch.Tensor | None:
    if not weighted:
        return None
    w = torch.rand(n, generator=torch.Generator().manual_seed(3), dtype=torch.float64) * 2.0
    w[::7] = 0.0
    return w


def e_step(X: torch.Tensor, C: torch.Tensor, sigma: float, assignment: str) -> tuple:
    """The E-step as a pass makes it (a block without ``||x||^2``) and the dense ``R``."""
    x_sq = squared_norms(X)
    D = torch.addmm(squared_norms(C).unsqueeze(0), X, C.T, alpha=-2.0)
    e = responsibilities(D.clone(), sigma, assignment, row_offset=x_sq)
    R = e.responsibilities
    dense = R.to_dense() if isinstance(R, SparseResponsibilities) else R
    return D, x_sq, e, dense


# (assignment, sigma, the layout the responsibilities must have)
CASES = [
    ("softmax", 4.0, "dense"),
    ("entmax15", 1e-3, "one-hot"),  # every row hard
    ("entmax15", 0.3, "packed"),  # a few soft rows, narrow supports
    ("entmax15", 200.0, "whole rows"),  # every row soft, wide supports
    ("hard", 0.0, "one-hot"),
]


def layout(R: torch.Tensor | SparseResponsibilities) -> str:
    if not isinstance(R, SparseResponsibilities):
        return "dense"
    if R.soft_rows.numel() == 0:
        return "one-hot"
    return "packed" if R.soft_cols is not None else "whole rows"


@pytest.mark.parametrize(("assignment", "sigma", "kind"), CASES)
@pytest.mark.parametrize("weighted", (False, True))
def test_accumulate_equals_the_dense_reference(
    assignment: str, sigma: float, kind: str, weighted: bool
) -> None:
    X, C = data()
    w = weights(X.shape[0], weighted)
    _, _, e, R = e_step(X, C, sigma, assignment)
    assert layout(e.responsibilities) == kind
    Rw = R if w is None else R * w.unsqueeze(1)
    num, den = torch.zeros_like(C), torch.zeros(C.shape[0], dtype=C.dtype)
    accumulate(num, den, X, w, e.responsibilities)
    torch.testing.assert_close(num, Rw.T @ X, rtol=1e-12, atol=1e-10)
    torch.testing.assert_close(den, Rw.sum(dim=0), rtol=1e-12, atol=1e-10)
    # The sums add to what is there (a pass accumulates block after block).
    accumulate(num, den, X, w, e.responsibilities)
    torch.testing.assert_close(den, 2.0 * Rw.sum(dim=0), rtol=1e-12, atol=1e-10)


def test_accumulate_by_blocks_equals_one_block() -> None:
    X, C = data()
    w = weights(X.shape[0], True)
    whole = (torch.zeros_like(C), torch.zeros(C.shape[0], dtype=C.dtype))
    blocks = (torch.zeros_like(C), torch.zeros(C.shape[0], dtype=C.dtype))
    accumulate(*whole, X, w, e_step(X, C, 0.3, "entmax15")[2].responsibilities)
    for rows in (slice(0, 37), slice(37, 150), slice(150, 200)):
        e = e_step(X[rows], C, 0.3, "entmax15")[2]
        accumulate(*blocks, X[rows], w[rows], e.responsibilities)
    for got, expected in zip(blocks, whole, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-10)


def hard_rows_of_all_but_a_few(X: torch.Tensor, C: torch.Tensor) -> tuple:
    """One-hot responsibilities with the last three rows soft: both of the hard rows'
    paths (every row at its label minus the soft ones; scaled rows)."""
    labels = torch.cdist(X, C).argmin(dim=1)
    first = torch.ones(X.shape[0], dtype=X.dtype)
    soft_rows = torch.arange(X.shape[0] - 3, X.shape[0])
    first[soft_rows] = 0.0
    block = torch.softmax(-torch.cdist(X[soft_rows], C), dim=1)
    R = SparseResponsibilities(labels, first, soft_rows, block, C.shape[0])
    return R, R.to_dense()


@pytest.mark.parametrize("weighted", (False, True))
def test_accumulate_hard_rows_minus_soft_rows(weighted: bool) -> None:
    X, C = data()
    w = weights(X.shape[0], weighted)
    R, dense = hard_rows_of_all_but_a_few(X, C)
    Rw = dense if w is None else dense * w.unsqueeze(1)
    num, den = torch.zeros_like(C), torch.zeros(C.shape[0], dtype=C.dtype)
    accumulate(num, den, X, w, R)
    torch.testing.assert_close(num, Rw.T @ X, rtol=1e-12, atol=1e-10)
    torch.testing.assert_close(den, Rw.sum(dim=0), rtol=1e-12, atol=1e-10)


@pytest.mark.parametrize(("assignment", "sigma", "kind"), CASES)
@pytest.mark.parametrize("weighted", (False, True))
def test_accumulate_spread_equals_the_dense_reference(
    assignment: str, sigma: float, kind: str, weighted: bool
) -> None:
    X, C = data()
    w = weights(X.shape[0], weighted)
    D, x_sq, e, R = e_step(X, C, sigma, assignment)
    Rw = R if w is None else R * w.unsqueeze(1)
    exact = torch.cdist(X, C) ** 2
    spread = torch.zeros(C.shape[0], dtype=C.dtype)
    accumulate_spread(spread, D, x_sq, e, w)
    torch.testing.assert_close(spread, (Rw * exact).sum(dim=0), rtol=1e-9, atol=1e-9)


def twinned(C: torch.Tensor) -> torch.Tensor:
    """``C`` and a twin of each centre, displaced a little."""
    g = torch.Generator().manual_seed(4)
    return torch.cat([C, C + 0.05 * torch.randn(C.shape, generator=g, dtype=C.dtype)])


def folded_nonzeros(R: torch.Tensor, twins_from: int | None) -> int:
    if twins_from is not None:
        R = R[:, :twins_from] + R[:, twins_from:]
    return int(torch.count_nonzero(R))


@pytest.mark.parametrize(("assignment", "sigma", "kind"), CASES)
@pytest.mark.parametrize("twins", (False, True))
def test_count_nonzeros_equals_the_dense_count(
    assignment: str, sigma: float, kind: str, twins: bool
) -> None:
    X, C = data()
    C = twinned(C[:8]) if twins else C
    twins_from = 8 if twins else None
    _, _, e, R = e_step(X, C, sigma, assignment)
    assert count_nonzeros(e.responsibilities, twins_from) == folded_nonzeros(R, twins_from)


def test_twins_count_with_their_centres() -> None:
    # Every point splits its weight between a centre and its twin: counted once.
    X, C = data()
    C = torch.cat([C[:1], C[:1] + 1e-6])
    _, _, e, R = e_step(X, C, 50.0, "entmax15")
    assert layout(e.responsibilities) == "whole rows"
    assert int(torch.count_nonzero(R)) == 2 * X.shape[0]
    assert count_nonzeros(e.responsibilities, 1) == X.shape[0]
    assert count_nonzeros(R, 1) == X.shape[0]


def test_weighted_sum_in_float64() -> None:
    values = torch.full((1000,), 0.1, dtype=torch.float32)
    total = weighted_sum(values, None)
    assert total.dtype == torch.float64
    assert float(total) == pytest.approx(100.0, rel=1e-7)
    w = torch.arange(1000, dtype=torch.float32)
    assert float(weighted_sum(values, w)) == pytest.approx(0.1 * 999 * 500, rel=1e-6)
