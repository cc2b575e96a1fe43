"""Chunked squared distances against a float64 brute force."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rbfkm_engine.distances import squared_distances, squared_norms

from .conftest import examples


def brute_force(X: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    return torch.cdist(X.double(), C.double()) ** 2


def random_problem(
    n: int, k: int, d: int, seed: int = 0, dtype: torch.dtype = torch.float64
) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=gen, dtype=dtype) * 3 + 1
    C = torch.randn(k, d, generator=gen, dtype=dtype) * 3 + 1
    return X, C


def test_squared_norms() -> None:
    X, _ = random_problem(7, 1, 4)
    torch.testing.assert_close(squared_norms(X), (X**2).sum(dim=1))


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64))
def test_block_matches_brute_force(dtype: torch.dtype) -> None:
    X, C = random_problem(50, 7, 5, dtype=dtype)
    D = squared_distances(X, C)
    assert D.shape == (50, 7) and D.dtype == dtype
    tol = 1e-4 if dtype == torch.float32 else 1e-10
    torch.testing.assert_close(D.double(), brute_force(X, C), atol=tol, rtol=tol)


def test_precomputed_norms_are_used() -> None:
    X, C = random_problem(10, 3, 2)
    D = squared_distances(X, C, x_sq=squared_norms(X), c_sq=squared_norms(C))
    torch.testing.assert_close(D, brute_force(X, C))
    # Wrong norms change the answer: the arguments are not ignored.
    shifted = squared_distances(X, C, x_sq=squared_norms(X) + 1.0, c_sq=squared_norms(C))
    torch.testing.assert_close(shifted, brute_force(X, C) + 1.0)


@settings(max_examples=examples(40), deadline=None)
@given(
    n=st.integers(1, 40),
    k=st.integers(1, 9),
    d=st.integers(1, 6),
    scale=st.sampled_from([1e-3, 1.0, 1e3]),
    seed=st.integers(0, 2**16),
)
def test_squared_distances_match_brute_force(
    n: int, k: int, d: int, scale: float, seed: int
) -> None:
    X, C = random_problem(n, k, d, seed)
    X, C = X * scale, C * scale
    D = squared_distances(X, C)
    ref = brute_force(X, C)
    assert D.shape == (n, k)
    assert torch.all(D >= 0)
    torch.testing.assert_close(D, ref, atol=1e-9 * scale**2 * (1 + d), rtol=1e-9)


def test_clamped_at_zero_when_points_equal_centres() -> None:
    # Large offsets make ||x||^2 - 2 x.c + ||c||^2 cancel badly; the result must stay >= 0.
    gen = torch.Generator().manual_seed(1)
    X = torch.randn(200, 8, generator=gen) * 1e-3 + 1e4
    for dtype in (torch.float32, torch.float64):
        Xd = X.to(dtype)
        D = squared_distances(Xd, Xd[:17])
        assert torch.all(D >= 0)
        assert torch.all(torch.isfinite(D))
        if dtype == torch.float64:
            assert torch.all(D[torch.arange(17), torch.arange(17)] <= 1e-4)


def test_float64_stays_float64() -> None:
    X, C = random_problem(30, 4, 3, dtype=torch.float64)
    assert squared_distances(X, C).dtype == torch.float64
    assert squared_distances(X, C).dtype == torch.float64
    # Distances that float32 would round away are kept: at 1e6, ||x||^2 = 1e12 has a float32
    # ulp of 65536 but a float64 ulp of 1e-4.
    X = torch.tensor([[1e6], [1e6 + 1.0]], dtype=torch.float64)
    D = squared_distances(X, X[:1])
    assert D[1, 0].item() == pytest.approx(1.0, abs=1e-3)


def test_inputs_are_not_modified() -> None:
    X, C = random_problem(20, 3, 2)
    X0, C0 = X.clone(), C.clone()
    x_sq = squared_norms(X)
    x_sq0 = x_sq.clone()
    squared_distances(X, C, x_sq)
    torch.testing.assert_close(X, X0)
    torch.testing.assert_close(C, C0)
    torch.testing.assert_close(x_sq, x_sq0)
