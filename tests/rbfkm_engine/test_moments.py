"""Weighted moments of the data: mean, covariance, largest eigenvalue."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rbfkm_engine.moments import (
    SMALL_COVARIANCE,
    data_largest_eigenvalue,
    largest_eigenvalue,
    weighted_covariance,
    weighted_mean,
)

from .conftest import examples
from .test_temperature import anisotropic_data


def test_weighted_covariance_matches_numpy() -> None:
    X = anisotropic_data()
    w = torch.from_numpy(np.random.default_rng(1).uniform(0.0, 3.0, X.shape[0]))
    np.testing.assert_allclose(
        weighted_covariance(X).numpy(), np.cov(X.numpy().T, bias=True), rtol=1e-10
    )
    np.testing.assert_allclose(
        weighted_covariance(X, w).numpy(),
        np.cov(X.numpy().T, aweights=w.numpy(), bias=True),
        rtol=1e-10,
    )
    # float32 input: accumulated in float64, still accurate far from the origin.
    X32 = (X + 1e4).float()
    np.testing.assert_allclose(
        weighted_covariance(X32).numpy(), np.cov(X32.double().numpy().T, bias=True), rtol=1e-6
    )


def test_statistics_over_many_blocks_match_numpy() -> None:
    # Many rows and features: the float64 statistics run over several row blocks.
    rng = np.random.default_rng(3)
    X = torch.from_numpy(rng.normal(5.0, 2.0, (6000, 40)))
    w = torch.from_numpy(rng.uniform(0.0, 2.0, 6000))
    np.testing.assert_allclose(weighted_mean(X, w).numpy(), np.average(X, 0, w.numpy()))
    np.testing.assert_allclose(
        weighted_covariance(X, w).numpy(),
        np.cov(X.numpy().T, aweights=w.numpy(), bias=True),
        rtol=1e-10,
    )


def test_integer_weights_equal_repeated_rows() -> None:
    X = anisotropic_data(60)
    w = torch.from_numpy(np.random.default_rng(2).integers(1, 4, 60)).double()
    repeated = X.repeat_interleave(w.long(), dim=0)
    torch.testing.assert_close(weighted_covariance(X, w), weighted_covariance(repeated))


@pytest.mark.parametrize("d", (1, 3, 50))
def test_largest_eigenvalue_small(d: int) -> None:
    A = torch.randn(d + 5, d, generator=torch.Generator().manual_seed(d), dtype=torch.float64)
    cov = A.T @ A
    assert largest_eigenvalue(cov) == pytest.approx(float(torch.linalg.eigvalsh(cov)[-1]))
    assert largest_eigenvalue(torch.zeros(d, d, dtype=torch.float64)) == 0.0


@pytest.mark.parametrize("top_direction", ("generic", "orthogonal_to_ones"))
def test_largest_eigenvalue_large_dimension(top_direction: str) -> None:
    # Above 2048 features the engine switches to an iterative method; it must still find
    # the top eigenvalue, whatever the direction of its eigenvector.
    d = 2100
    diag = torch.full((d,), 0.1, dtype=torch.float64)
    cov = torch.diag(diag)
    if top_direction == "generic":
        cov[0, 0] = 5.0
    else:
        # Top eigenvector (e0 - e1) / sqrt(2): anti-correlated features, eigenvalue 10.
        cov[0, 0] = cov[1, 1] = 5.0
        cov[0, 1] = cov[1, 0] = -5.0
    expected = 5.0 if top_direction == "generic" else 10.0
    assert largest_eigenvalue(cov) == pytest.approx(expected, rel=1e-6)


@settings(max_examples=examples(30), deadline=None)
@given(
    n=st.integers(1, 12),
    d=st.sampled_from((1, 2, 3, 40, SMALL_COVARIANCE + 1, 300, 700)),
    weighted=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_data_largest_eigenvalue_equals_the_covariances(
    n: int, d: int, weighted: bool, seed: int
) -> None:
    # Lanczos on X itself (no (d, d) matrix) against eigvalsh of the covariance.
    rng = np.random.default_rng(seed)
    X = torch.from_numpy(rng.normal(size=(n, d)) * rng.uniform(0.1, 3.0, size=d))
    w = torch.from_numpy(rng.uniform(0.1, 2.0, size=n)) if weighted else None
    mean = weighted_mean(X, w)
    expected = largest_eigenvalue(weighted_covariance(X, w, mean=mean))
    got = data_largest_eigenvalue(X, w, mean)
    assert got == pytest.approx(expected, rel=1e-8, abs=1e-12)


def test_data_largest_eigenvalue_of_constant_data_is_zero() -> None:
    X = torch.full((5, 7), 3.0, dtype=torch.float64)
    assert data_largest_eigenvalue(X, None, weighted_mean(X)) == 0.0


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64))
def test_moments_never_write_to_the_data(dtype: torch.dtype) -> None:
    rng = np.random.default_rng(5)
    X = torch.from_numpy(rng.normal(3.0, 1.0, size=(4, SMALL_COVARIANCE + 44))).to(dtype)
    w = torch.from_numpy(rng.uniform(0.5, 2.0, size=4)).to(dtype)
    before = X.clone()
    mean = weighted_mean(X, w)
    weighted_covariance(X, w, mean=mean)
    data_largest_eigenvalue(X, w, mean)
    torch.testing.assert_close(X, before, rtol=0, atol=0)
