"""Temperature schedule and critical temperature: merged just above, split just below."""

from __future__ import annotations

import itertools
import math
from itertools import pairwise

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rbfkm_engine.assign import responsibilities
from rbfkm_engine.moments import largest_eigenvalue, weighted_covariance
from rbfkm_engine.temperature import (
    COLD_EXTENSION,
    colder_temperatures,
    collapsed_objective,
    critical_temperature,
    geometric_schedule,
    grow_twin_linearly,
    iterations_per_temperature,
)

from .conftest import examples


def anisotropic_data(n: int = 400, seed: int = 0) -> torch.Tensor:
    """Gaussian data with a clear top principal axis (variances about 4 and 1), rotated."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2)) * np.array([2.0, 1.0])
    angle = 0.6
    rot = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
    return torch.from_numpy(X @ rot.T + np.array([3.0, -1.0]))


def fixed_point(
    X: torch.Tensor, C: torch.Tensor, sigma: float, assignment: str, iterations: int
) -> torch.Tensor:
    """Iterate ``C <- R^T X / R^T 1`` with the engine's map at a fixed temperature."""
    for _ in range(iterations):
        D = torch.cdist(X, C) ** 2
        R = responsibilities(D, sigma, assignment).responsibilities
        R = R if isinstance(R, torch.Tensor) else R.to_dense()
        C = (R.T @ X) / R.sum(dim=0).unsqueeze(1)
    return C


def spread(C: torch.Tensor) -> float:
    return float((C - C.mean(dim=0)).norm(dim=1).max())


# ------------------------------------------------------------------ critical temperature


@pytest.mark.parametrize("lam", (0.0, 0.5, 3.0))
@pytest.mark.parametrize("k", (1, 2, 5, 16))
def test_critical_temperature_formula(lam: float, k: int) -> None:
    assert critical_temperature(lam, k, "softmax") == pytest.approx(2.0 * lam)
    assert critical_temperature(lam, k, "entmax15") == pytest.approx(2.0 * math.sqrt(k) * lam)


def test_critical_temperature_rejects_hard() -> None:
    with pytest.raises(ValueError, match="assignment"):
        critical_temperature(1.0, 3, "hard")


@pytest.mark.parametrize(
    ("assignment", "k"), [("softmax", 2), ("softmax", 3), ("entmax15", 2), ("entmax15", 3)]
)
def test_merged_just_above_split_just_below(assignment: str, k: int) -> None:
    X = anisotropic_data(200)
    lam = largest_eigenvalue(weighted_covariance(X))
    tc = critical_temperature(lam, k, assignment)
    gen = torch.Generator().manual_seed(k)
    start = X.mean(dim=0) + 1e-3 * torch.randn(k, 2, generator=gen, dtype=torch.float64)

    # Linear rates 1/1.1 and 1/0.9 per iteration: 200 iterations shrink the perturbation
    # by 1e-8 above Tc and grow it (until the nonlinearity stops it) by 1e9 below.
    above = fixed_point(X, start, 1.1 * tc, assignment, iterations=200)
    below = fixed_point(X, start, 0.9 * tc, assignment, iterations=200)

    assert spread(above) < 1e-6, f"sigma = 1.1 Tc: centres did not merge ({spread(above):.3g})"
    assert spread(below) > 0.1 * math.sqrt(lam), (
        f"sigma = 0.9 Tc: centres did not split ({spread(below):.3g})"
    )
    torch.testing.assert_close(above.mean(dim=0), X.mean(dim=0), atol=1e-6, rtol=0)


def test_entmax_splits_later_than_softmax_tc_suggests() -> None:
    # The k-dependence is real: at 1.1 x the softmax Tc (below entmax15's 2 sqrt(k) lambda)
    # entmax15 centres already split.
    X = anisotropic_data(200)
    lam = largest_eigenvalue(weighted_covariance(X))
    start = X.mean(dim=0) + 1e-3 * torch.randn(
        4, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64
    )
    C = fixed_point(X, start, 1.1 * critical_temperature(lam, 4, "softmax"), "entmax15", 200)
    assert spread(C) > 0.1 * math.sqrt(lam)


def test_weighted_critical_temperature() -> None:
    # Weights that stretch the data along its minor axis move Tc with them.
    X = anisotropic_data()
    w = 1.0 + 20.0 * (X[:, 1] - X[:, 1].mean()).abs()
    lam_w = largest_eigenvalue(weighted_covariance(X, w))
    assert lam_w != pytest.approx(largest_eigenvalue(weighted_covariance(X)), rel=1e-3)
    repeated_lam = largest_eigenvalue(weighted_covariance(X.repeat(2, 1), w.repeat(2)))
    assert lam_w == pytest.approx(repeated_lam)


# ----------------------------------------------------------------- linearised first twin


@pytest.mark.parametrize("assignment", ["entmax15", "softmax"])
@pytest.mark.parametrize("ratio", [1.1, 0.9, 0.6])
def test_linear_twin_growth_matches_one_iteration(assignment: str, ratio: float) -> None:
    # The centre at the mean and a twin at a small offset e: one real fixed-point
    # iteration moves the pair apart (below Tc) or together (above) as the linearised map
    # says, up to O(|e|^2).
    X = anisotropic_data(2000)
    cov = weighted_covariance(X)
    lam = largest_eigenvalue(cov)
    sigma = ratio * critical_temperature(lam, 2, assignment)
    mean = X.mean(dim=0)
    e = 1e-3 * math.sqrt(lam) * torch.tensor([0.6, 0.8], dtype=torch.float64)
    C = fixed_point(X, torch.stack([mean, mean + e]), sigma, assignment, iterations=1)
    steps, predicted = grow_twin_linearly(cov, e, [sigma], assignment, floor=0.0, limit=math.inf)
    assert steps == 1
    torch.testing.assert_close(C[1] - C[0], predicted, rtol=1e-2, atol=0)


def test_linear_twin_growth_keeps_the_floor_and_stops_before_the_limit() -> None:
    # Along the top axis each step multiplies the offset by Tc / sigma: 0.8 (below the
    # floor: rescaled to it), 1.25, 1.5625, then 1.953 would pass the limit.
    cov = torch.diag(torch.tensor([4.0, 1.0], dtype=torch.float64))
    tc = critical_temperature(4.0, 2, "entmax15")
    schedule = [1.25 * tc] + [tc * 0.8**t for t in range(1, 6)]
    e = torch.tensor([0.1, 0.0], dtype=torch.float64)
    steps, grown = grow_twin_linearly(cov, e, schedule, "entmax15", floor=0.1, limit=0.3)
    assert steps == 3
    torch.testing.assert_close(grown, torch.tensor([0.1 * 1.25 * 1.5625, 0.0]).double())
    steps, _ = grow_twin_linearly(cov, e, schedule, "entmax15", floor=0.1, limit=math.inf)
    assert steps == len(schedule)


@pytest.mark.parametrize("assignment", ["entmax15", "softmax"])
def test_collapsed_objective_is_the_maps_energy(assignment: str) -> None:
    # Two centres at the mean: every point's responsibility is (1/2, 1/2).
    X = anisotropic_data()
    mean = X.mean(dim=0, keepdim=True)
    D = torch.cdist(X, torch.cat([mean, mean])) ** 2
    sigma = 3.0
    energy = float(responsibilities(D, sigma, assignment).energy.sum())
    inertia = float(D[:, 0].sum())
    assert collapsed_objective(inertia, X.shape[0], sigma, assignment) == pytest.approx(
        energy, rel=1e-12
    )


# --------------------------------------------------------------------------------- schedule


def test_geometric_schedule_basic() -> None:
    assert geometric_schedule(8.0, 1.0, 0.5) == pytest.approx([8.0, 4.0, 2.0, 1.0])
    s = geometric_schedule(10.0, 0.3, 0.5)
    assert s[0] == 10.0 and s[-1] == 0.3
    np.testing.assert_allclose(np.array(s[1:-1]) / np.array(s[:-2]), 0.5)
    assert geometric_schedule(1.0, 2.0, 0.5) == [1.0]
    assert geometric_schedule(1.0, 1.0, 0.5) == [1.0]


def test_geometric_schedule_extreme_ratio() -> None:
    # sigma_min / sigma0 underflows to 0 in floating point: the span still comes out.
    s = geometric_schedule(1e300, 1e-300, 0.5)
    assert s[0] == 1e300 and s[-1] == 1e-300
    assert len(s) == math.ceil(600 * math.log(10) / math.log(2)) + 1


def test_geometric_schedule_max_length_keeps_the_hottest() -> None:
    assert geometric_schedule(8.0, 1.0, 0.5, max_length=2) == [8.0, 4.0]
    assert geometric_schedule(8.0, 1.0, 0.5, max_length=4) == [8.0, 4.0, 2.0, 1.0]
    # A cooling rate next to 1 over 600 decades would be ~1e12 temperatures: not built.
    s = geometric_schedule(1e300, 1e-300, 1.0 - 1e-9, max_length=300)
    assert len(s) == 300 and s[0] == 1e300


@settings(max_examples=examples(80), deadline=None)
@given(
    sigma0=st.floats(1e-6, 1e6),
    ratio=st.floats(1e-12, 0.999),
    cooling=st.floats(0.05, 0.99),
)
def test_geometric_schedule_properties(sigma0: float, ratio: float, cooling: float) -> None:
    sigma_min = sigma0 * ratio
    s = geometric_schedule(sigma0, sigma_min, cooling)
    assert s[0] == sigma0
    assert s[-1] == pytest.approx(sigma_min, rel=1e-12)
    assert all(b < a for a, b in itertools.pairwise(s)), "temperatures must strictly decrease"
    ratios = np.array(s[1:]) / np.array(s[:-1])
    np.testing.assert_allclose(ratios[:-1], cooling, rtol=1e-9)
    # The last step is at most one cooling step, and a real step.
    assert cooling * (1 - 1e-9) <= ratios[-1] < 1.0 - 1e-9


@pytest.mark.parametrize(("cooling", "power"), [(0.9, 4), (0.1, 5), (0.5, 29), (0.8, 10)])
def test_schedule_ending_on_an_exact_power_has_no_repeat(cooling: float, power: int) -> None:
    s = geometric_schedule(1.0, cooling**power, cooling)
    assert len(s) == power + 1, s[-3:]


@pytest.mark.parametrize("cooling", (0.0, 1.0, -0.5, 1.5))
def test_schedule_rejects_bad_cooling(cooling: float) -> None:
    with pytest.raises(ValueError, match="cooling"):
        geometric_schedule(1.0, 0.1, cooling)


@pytest.mark.parametrize(
    ("cooling", "iterations"), [(0.8, 1), (0.95, 1), (0.64, 2), (0.6, 3), (0.5, 4), (0.1, 11)]
)
def test_iterations_per_temperature(cooling: float, iterations: int) -> None:
    # Enough that the temperature falls by at most 0.8 per iteration: 0.8**2 is exactly 2.
    assert iterations_per_temperature(cooling) == iterations
    assert cooling ** (1 / iterations) >= 0.8 - 1e-12


@pytest.mark.parametrize("cooling", (0.0, 1.0, -0.5))
def test_iterations_per_temperature_rejects_bad_cooling(cooling: float) -> None:
    with pytest.raises(ValueError, match="cooling"):
        iterations_per_temperature(cooling)


@pytest.mark.parametrize(("sigma0", "sigma_min"), [(0.0, 0.1), (1.0, 0.0), (-1.0, 0.1)])
def test_schedule_rejects_nonpositive_temperatures(sigma0: float, sigma_min: float) -> None:
    with pytest.raises(ValueError, match="sigma"):
        geometric_schedule(sigma0, sigma_min, 0.5)


def test_colder_temperatures_go_on_from_an_automatic_floor() -> None:
    schedule = geometric_schedule(1.0, 1e-3, 0.5)
    params = {"sigma_min": "auto", "cooling": 0.5}
    below = colder_temperatures(params, schedule, max_length=100)
    assert below[0] == pytest.approx(0.5 * schedule[-1])
    assert all(b == pytest.approx(0.5 * a) for a, b in pairwise(below[:-1]))
    assert below[-1] == pytest.approx(COLD_EXTENSION * schedule[-1])
    assert len(colder_temperatures(params, schedule, max_length=5)) == 5
    # An explicit floor is where annealing ends; no temperatures, nothing below them.
    assert colder_temperatures({"sigma_min": 1e-3, "cooling": 0.5}, schedule, 100) == []
    assert colder_temperatures(params, [], 100) == []
