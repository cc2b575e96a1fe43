"""Responsibility maps: the simplex, sparsity, the hard limit, the entmax reference, stability."""

from __future__ import annotations

import entmax
import numpy as np
import pytest
import scipy.sparse as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from rbfkm_engine.assign import (
    ASSIGNMENTS,
    EStep,
    _partial_width,
    entmax15_map,
    hard_map,
    responsibilities,
    softmax_map,
    to_csr_block,
)

from .conftest import examples

PROPERTY = settings(max_examples=examples(60), deadline=None)


def dense(step: EStep) -> torch.Tensor:
    """The responsibilities as a dense (n, k) tensor, whatever the map's storage."""
    R = step.responsibilities
    return R if isinstance(R, torch.Tensor) else R.to_dense()


def distance_rows(min_rows: int = 1, max_rows: int = 8, min_k: int = 1, max_k: int = 7):
    """Strategy: (n, k) float64 squared distances, nonnegative, moderate range."""
    shapes = st.tuples(st.integers(min_rows, max_rows), st.integers(min_k, max_k))
    values = st.floats(0.0, 100.0, allow_nan=False, allow_infinity=False)
    return shapes.flatmap(lambda s: arrays(np.float64, s, elements=values)).map(torch.from_numpy)


def tie_free_rows(max_rows: int = 8, max_k: int = 7):
    """Strategy: squared distances with no ties, all values distinct by at least 0.01."""
    shapes = st.tuples(st.integers(1, max_rows), st.integers(2, max_k))
    values = st.integers(0, 10_000)
    return shapes.flatmap(lambda s: arrays(np.int64, s, elements=values, unique=True)).map(
        lambda a: torch.from_numpy(a.astype(np.float64) / 100.0)
    )


sigmas = st.floats(1e-3, 1e3, allow_nan=False)


def shannon(p: torch.Tensor) -> torch.Tensor:
    return -(torch.where(p > 0, p * p.clamp_min(1e-300).log(), torch.zeros_like(p))).sum(dim=1)


def tsallis15(p: torch.Tensor) -> torch.Tensor:
    return (4.0 / 3.0) * (1.0 - p.pow(1.5).sum(dim=1))


# ----------------------------------------------------------------------------- the simplex


@PROPERTY
@given(D=distance_rows(), sigma=sigmas, assignment=st.sampled_from(ASSIGNMENTS))
def test_rows_on_the_simplex(D: torch.Tensor, sigma: float, assignment: str) -> None:
    step = responsibilities(D, sigma, assignment)
    R = dense(step)
    assert R.shape == D.shape
    assert torch.all(torch.isfinite(R))
    assert torch.all(R >= 0)
    torch.testing.assert_close(R.sum(dim=1), torch.ones(D.shape[0], dtype=R.dtype))


@PROPERTY
@given(D=distance_rows(), sigma=sigmas, assignment=st.sampled_from(ASSIGNMENTS))
def test_labels_and_min_dist(D: torch.Tensor, sigma: float, assignment: str) -> None:
    step = responsibilities(D, sigma, assignment)
    torch.testing.assert_close(step.min_dist, D.min(dim=1).values)
    # labels point at a nearest centre (ties allowed).
    torch.testing.assert_close(D.gather(1, step.labels[:, None]).squeeze(1), step.min_dist)


def test_hard_map_is_one_hot_argmin() -> None:
    D = torch.tensor([[3.0, 1.0, 2.0], [0.0, 5.0, 5.0], [9.0, 8.0, 7.0]])
    step = hard_map(D)
    torch.testing.assert_close(dense(step), torch.eye(3)[[1, 0, 2]])
    torch.testing.assert_close(step.labels, torch.tensor([1, 0, 2]))
    torch.testing.assert_close(step.energy, torch.tensor([1.0, 0.0, 7.0]))
    assert step.n_soft == 0


@pytest.mark.parametrize("sigma", (0.0, -1.0))
def test_nonpositive_sigma_means_hard(sigma: float) -> None:
    D = torch.tensor([[3.0, 1.0, 2.0]])
    for assignment in ASSIGNMENTS:
        torch.testing.assert_close(dense(responsibilities(D, sigma, assignment)), torch.eye(3)[[1]])


def test_unknown_assignment_raises() -> None:
    with pytest.raises(ValueError, match="assignment"):
        responsibilities(torch.zeros(2, 2), 1.0, "sparsemax")


# ------------------------------------------------------------------------ reference maps


@PROPERTY
@given(D=distance_rows(min_k=2), sigma=sigmas)
def test_softmax_equals_torch_softmax(D: torch.Tensor, sigma: float) -> None:
    torch.testing.assert_close(softmax_map(D, sigma).responsibilities, torch.softmax(-D / sigma, 1))


@PROPERTY
@given(D=distance_rows(min_k=2), sigma=sigmas)
def test_entmax15_equals_bisection_reference(D: torch.Tensor, sigma: float) -> None:
    R = dense(entmax15_map(D, sigma))
    ref = entmax.entmax_bisect(-D / sigma, alpha=1.5, dim=-1, n_iter=200)
    torch.testing.assert_close(R, ref, atol=1e-7, rtol=1e-6)


@PROPERTY
@given(D=distance_rows(min_k=2), sigma=sigmas)
def test_entmax15_equals_exact_entmax15(D: torch.Tensor, sigma: float) -> None:
    torch.testing.assert_close(dense(entmax15_map(D, sigma)), entmax.entmax15(-D / sigma, dim=-1))


@PROPERTY
@given(D=distance_rows(min_k=2), sigma=sigmas, assignment=st.sampled_from(("softmax", "entmax15")))
def test_energy_is_the_regularised_minimum(D: torch.Tensor, sigma: float, assignment: str) -> None:
    step = responsibilities(D, sigma, assignment)
    R = dense(step)
    entropy = shannon if assignment == "softmax" else tsallis15
    objective = (R * D).sum(dim=1) - sigma * entropy(R)
    torch.testing.assert_close(step.energy, objective, atol=1e-6 * (1 + sigma), rtol=1e-6)
    # And it is a minimum over the simplex: random rows do no better.
    torch.manual_seed(0)
    for _ in range(5):
        Q = torch.distributions.Dirichlet(torch.ones(D.shape[1], dtype=D.dtype)).sample(
            (D.shape[0],)
        )
        other = (Q * D).sum(dim=1) - sigma * entropy(Q)
        assert torch.all(step.energy <= other + 1e-6 * (1 + sigma + other.abs()))


@PROPERTY
@given(
    D=tie_free_rows(),  # subtracting the offset must not round two distances into a tie
    sigma=sigmas,
    assignment=st.sampled_from(ASSIGNMENTS),
    shift=st.floats(-50.0, 50.0),
)
def test_row_offset_gives_the_same_map(
    D: torch.Tensor, sigma: float, assignment: str, shift: float
) -> None:
    # The solver hands the maps D - ||x||^2 and the offset separately: the responsibilities
    # must not change, and min_dist / energy must be those of the true distances.
    offset = torch.linspace(0.0, 1.0, D.shape[0], dtype=D.dtype) * shift + 7.0
    ref = responsibilities(D, sigma, assignment)
    got = responsibilities(D - offset[:, None], sigma, assignment, row_offset=offset)
    torch.testing.assert_close(dense(got), dense(ref), atol=1e-9, rtol=1e-9)
    torch.testing.assert_close(got.min_dist, ref.min_dist, atol=1e-9, rtol=1e-9)
    torch.testing.assert_close(got.energy, ref.energy, atol=1e-8 * (1 + sigma), rtol=1e-9)


# -------------------------------------------------------------------------------- sparsity


@PROPERTY
@given(D=distance_rows(min_k=2), s1=sigmas, s2=sigmas)
def test_entmax_sparsity_grows_as_sigma_falls(D: torch.Tensor, s1: float, s2: float) -> None:
    hot, cold = max(s1, s2), min(s1, s2)
    nnz_hot = (dense(entmax15_map(D, hot)) > 0).sum(dim=1)
    nnz_cold = (dense(entmax15_map(D, cold)) > 0).sum(dim=1)
    assert torch.all(nnz_cold <= nnz_hot), (nnz_hot, nnz_cold)


@PROPERTY
@given(D=distance_rows(min_k=2), sigma=sigmas)
def test_entmax_nnz_statistics(D: torch.Tensor, sigma: float) -> None:
    step = entmax15_map(D, sigma)
    nnz = (dense(step) > 0).sum(dim=1)
    assert step.n_soft == int((nnz > 1).sum())
    if not isinstance(step.responsibilities, torch.Tensor):
        torch.testing.assert_close(step.responsibilities.nnz_per_row(), nnz)


def test_entmax_is_sparse_softmax_is_dense() -> None:
    D = torch.tensor([[0.0, 1.0, 50.0, 100.0]])
    R = dense(entmax15_map(D, 1.0))
    assert (R > 0).sum() == 2
    assert torch.all(dense(softmax_map(D, 1.0)) > 0)


# ------------------------------------------------------------------------- the hard limit


@PROPERTY
@given(
    D=tie_free_rows(),
    sigma=st.floats(1e-6, 1e2),
    assignment=st.sampled_from(("softmax", "entmax15")),
)
def test_argmax_agrees_with_hard_argmin(D: torch.Tensor, sigma: float, assignment: str) -> None:
    R = dense(responsibilities(D, sigma, assignment))
    torch.testing.assert_close(R.argmax(dim=1), D.argmin(dim=1))


@PROPERTY
@given(D=tie_free_rows())
def test_maps_tend_to_one_hot_as_sigma_falls(D: torch.Tensor) -> None:
    sorted_d = D.sort(dim=1).values
    gap = sorted_d[:, 1] - sorted_d[:, 0]
    hard = dense(hard_map(D))
    sigma = float(gap.min()) / 40.0
    torch.testing.assert_close(dense(softmax_map(D, sigma)), hard, atol=1e-12, rtol=0)
    torch.testing.assert_close(dense(entmax15_map(D, sigma)), hard, atol=0, rtol=0)


@PROPERTY
@given(D=tie_free_rows(), frac=st.floats(0.01, 0.999))
def test_entmax_exactly_one_hot_below_half_the_gap(D: torch.Tensor, frac: float) -> None:
    sorted_d = D.sort(dim=1).values
    gap = sorted_d[:, 1] - sorted_d[:, 0]
    sigma = frac * float(gap.min()) / 2.0
    step = entmax15_map(D, sigma)
    R = dense(step)
    assert torch.all((R == 0) | (R == 1))
    torch.testing.assert_close(R, dense(hard_map(D)), atol=0, rtol=0)
    assert step.n_soft == 0


def test_cold_row_is_exactly_one_hot_next_to_a_soft_row() -> None:
    # Row 0: gap 1 > 2 sigma, exactly hard; row 1: gap 0.5 < 2 sigma, soft. Same block.
    D = torch.tensor([[0.0, 1.0, 5.0], [0.0, 0.5, 0.6]], dtype=torch.float64)
    step = entmax15_map(D, 0.4)
    R = dense(step)
    torch.testing.assert_close(
        R[0], torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64), atol=0, rtol=0
    )
    assert (R[1] > 0).sum() >= 2
    assert step.n_soft == 1


@PROPERTY
@given(D=tie_free_rows(), frac=st.floats(1.01, 100.0))
def test_entmax_soft_above_half_the_gap(D: torch.Tensor, frac: float) -> None:
    # Just above half the gap of a row its two nearest centres share the point.
    sorted_d = D.sort(dim=1).values
    gap = sorted_d[:, 1] - sorted_d[:, 0]
    sigma = frac * float(gap[0]) / 2.0
    R = dense(entmax15_map(D[:1], sigma))
    assert (R > 0).sum() >= 2


# ------------------------------------------------------------------------------ stability


@pytest.mark.parametrize("assignment", ("softmax", "entmax15"))
@pytest.mark.parametrize("dtype", (torch.float32, torch.float64))
@pytest.mark.parametrize("sigma", (1e-30, 1e-300))
def test_tiny_sigma_is_finite(assignment: str, dtype: torch.dtype, sigma: float) -> None:
    gen = torch.Generator().manual_seed(0)
    D = (torch.rand(50, 6, generator=gen, dtype=torch.float64) * 10).to(dtype)
    D[0] = 4.0  # an exact tie
    step = responsibilities(D, sigma, assignment)
    R = dense(step)
    assert torch.all(torch.isfinite(R))
    assert torch.all(torch.isfinite(step.energy))
    torch.testing.assert_close(R.sum(dim=1), torch.ones(50, dtype=R.dtype))
    torch.testing.assert_close(R[1:].argmax(dim=1), D[1:].argmin(dim=1))


@pytest.mark.parametrize("assignment", ("softmax", "entmax15"))
@pytest.mark.parametrize(
    ("dtype", "big"), [(torch.float32, 1e30), (torch.float64, 1e300), (torch.float32, 3e38)]
)
def test_huge_distances_are_finite(assignment: str, dtype: torch.dtype, big: float) -> None:
    D = torch.tensor([[big, big / 2, 0.0], [big, big, big], [1.0, big, 2.0]], dtype=dtype)
    for sigma in (1e-3, 1.0, 1e6):
        step = responsibilities(D, sigma, assignment)
        R = dense(step)
        assert torch.all(torch.isfinite(R)), (sigma, R)
        torch.testing.assert_close(R.sum(dim=1), torch.ones(3, dtype=R.dtype))
        assert R[0].argmax() == 2 and R[2].argmax() == 0


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
@pytest.mark.parametrize("half", (torch.float16, torch.bfloat16))
def test_half_precision_is_computed_in_float32(assignment: str, half: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(3)
    D64 = torch.rand(40, 5, generator=gen, dtype=torch.float64) * 4
    step = responsibilities(D64.to(half), 0.5, assignment)
    R = dense(step)
    if assignment != "hard":  # a one-hot row is exact in any precision
        assert R.dtype in (torch.float32, torch.float64)
    assert torch.all(torch.isfinite(R))
    torch.testing.assert_close(R.sum(dim=1), torch.ones(40, dtype=R.dtype))
    ref = dense(responsibilities(D64.to(half).double(), 0.5, assignment))
    torch.testing.assert_close(R.double(), ref, atol=1e-5, rtol=1e-5)


def test_all_equal_row_is_uniform() -> None:
    D = torch.full((2, 4), 7.0, dtype=torch.float64)
    for assignment in ("softmax", "entmax15"):
        torch.testing.assert_close(
            dense(responsibilities(D, 1.0, assignment)),
            torch.full((2, 4), 0.25, dtype=torch.float64),
        )


def test_single_centre() -> None:
    D = torch.tensor([[3.0], [0.0]])
    for assignment in ASSIGNMENTS:
        torch.testing.assert_close(dense(responsibilities(D, 1.0, assignment)), torch.ones(2, 1))


# --------------------------------------------------------------------------- sparse output


@PROPERTY
@given(D=distance_rows(), sigma=sigmas, assignment=st.sampled_from(ASSIGNMENTS))
def test_csr_block_holds_only_nonzeros(D: torch.Tensor, sigma: float, assignment: str) -> None:
    step = responsibilities(D, sigma, assignment)
    R = dense(step)
    csr = to_csr_block(step.responsibilities, D.shape[1])
    assert sp.issparse(csr) and csr.format == "csr"
    assert csr.shape == D.shape
    assert csr.nnz == int((R > 0).sum())
    assert np.all(csr.data > 0)
    np.testing.assert_allclose(csr.toarray(), R.numpy(), atol=0, rtol=0)
    np.testing.assert_allclose(np.asarray(csr.sum(axis=1)).ravel(), 1.0, rtol=1e-12)


def test_entmax_storage_is_sparse_when_cold() -> None:
    gen = torch.Generator().manual_seed(4)
    D = torch.rand(100, 64, generator=gen, dtype=torch.float64) * 100
    step = entmax15_map(D, 1e-2)
    assert not isinstance(step.responsibilities, torch.Tensor), "cold entmax stored dense"
    csr = to_csr_block(step.responsibilities, 64)
    assert csr.nnz < 2 * 100


@pytest.mark.parametrize("sigma", [0.05, 50.0])  # narrow supports (packed) / whole rows
def test_entmax15_on_many_rows_equals_the_package(sigma: float) -> None:
    # Blocks larger than one row group of the whole-row path, and the packed path with
    # rows of different candidate counts: both equal the package's map on full rows.
    g = torch.Generator().manual_seed(0)
    D = torch.rand((3000, 64), generator=g, dtype=torch.float64) * 10.0
    e = entmax15_map(D, sigma)
    expected = entmax.entmax15(-(D - D.min(dim=1, keepdim=True).values) / sigma, dim=-1)
    R = e.responsibilities
    torch.testing.assert_close(R.to_dense(), expected, atol=1e-12, rtol=0)
    assert R.nnz() == int(torch.count_nonzero(expected))
    assert e.n_soft == int((torch.count_nonzero(expected, dim=1) > 1).sum())


@pytest.mark.parametrize("overwrite", [False, True])
@pytest.mark.parametrize(("candidates", "far"), [(256, 1.9), (60, 5.0)])  # whole / packed
def test_entmax15_partial_sort_is_exact_when_supports_change(
    overwrite: bool, candidates: int, far: float
) -> None:
    # Supports jump from 5 to most of the candidates and back between row groups: the
    # partial sort's width, guessed from the group before, is too narrow for the package
    # at first (it re-solves those rows) and too wide afterwards. Whole rows (every centre
    # a candidate) and packed candidates (60 of 256) both equal the package's full sort.
    k, n = 256, 600
    g = torch.Generator().manual_seed(3)
    narrow = torch.full((n, k), far, dtype=torch.float64)
    narrow[:, :5] = torch.rand((n, 5), generator=g, dtype=torch.float64) * 0.05
    wide = torch.full((n, k), far, dtype=torch.float64)
    wide[:, :candidates] = torch.rand((n, candidates), generator=g, dtype=torch.float64)
    D = torch.cat([narrow, wide, narrow])
    expected = entmax.entmax15(-(D - D.min(dim=1, keepdim=True).values), dim=-1)
    e = entmax15_map(D.clone(), 1.0, overwrite=overwrite)
    R = e.responsibilities
    assert (R.soft_cols is None) == (candidates > k // 4), "not the intended path"
    torch.testing.assert_close(R.to_dense(), expected, atol=1e-12, rtol=0)
    support = torch.count_nonzero(expected, dim=1)
    assert int(support[:n].max()) == 5 and int(support[n : 2 * n].min()) > 16
    torch.testing.assert_close(R.nnz_per_row(), support)
    energy = (expected * D).sum(dim=1) - tsallis15(expected)
    torch.testing.assert_close(e.energy, energy)


@pytest.mark.parametrize(("support", "expected"), [(0, 16), (5, 16), (16, 32), (40, 48)])
def test_partial_width_is_just_above_the_support(support: int, expected: int) -> None:
    assert _partial_width(support, 256) == expected
    assert _partial_width(support, expected) is None  # a full sort once it reaches k


@pytest.mark.parametrize("assignment", ("softmax", "entmax15"))
@pytest.mark.parametrize("sigma", [0.002, 0.3, 50.0])  # packed / whole, some rows / all rows
def test_overwrite_gives_the_same_map_in_the_distance_block(assignment: str, sigma: float) -> None:
    g = torch.Generator().manual_seed(2)
    D = torch.rand((2000, 40), generator=g, dtype=torch.float64) * 10.0
    D[::3] *= 0.01  # rows of near ties among rows with clear winners: soft rows are a subset
    expected = responsibilities(D, sigma, assignment)
    block = D.clone()
    step = responsibilities(block, sigma, assignment, overwrite=True)
    torch.testing.assert_close(dense(step), dense(expected), atol=1e-12, rtol=0)
    torch.testing.assert_close(step.energy, expected.energy)
    assert step.n_soft == expected.n_soft
    R = step.responsibilities
    storage = R if isinstance(R, torch.Tensor) else R.soft_block
    if storage.numel():
        assert storage.untyped_storage().data_ptr() == block.untyped_storage().data_ptr()
