"""The fit's frame: power-of-two scaling, centring only far from the origin, never writing
to the caller's data, and the way back to the data's units."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rbfkm_engine.frame import (
    CENTRE_ABOVE,
    centred,
    into_fit_frame,
    max_abs,
    may_share_memory,
    power_of_two_scale,
    scaled,
    squared_in_data_units,
    squared_in_fit_units,
    times_power_of_two,
    unscaled_callback,
    unscaled_record,
    weighted_total,
)
from rbfkm_engine.progress import FitProgress

from .conftest import examples

# float32: 2^42 (a third of its exponent range); float64: 2^341.
LIMITS = {torch.float32: 2.0**42, torch.float64: 2.0**341}


def is_power_of_two(value: float) -> bool:
    return value > 0 and math.frexp(value)[0] == 0.5


# ------------------------------------------------------------------ scale


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64))
def test_data_of_ordinary_size_are_not_scaled(dtype: torch.dtype) -> None:
    limit = LIMITS[dtype]
    for top in (1.0, 1e-3, 1e6, 1.0 / limit, limit, 0.0, math.nan, math.inf):
        assert power_of_two_scale(top, dtype) == 1.0


# The smallest magnitudes each dtype's data can have: the smallest subnormals.
SMALLEST = {torch.float32: 2.0**-149, torch.float64: 2.0**-1074}


@given(data=st.data(), dtype=st.sampled_from((torch.float32, torch.float64)))
@settings(max_examples=examples(200))
def test_a_scale_is_one_or_the_power_of_two_into_half_one(
    data: st.DataObject, dtype: torch.dtype
) -> None:
    top = data.draw(st.floats(min_value=SMALLEST[dtype], max_value=float(torch.finfo(dtype).max)))
    scale = power_of_two_scale(top, dtype)
    limit = LIMITS[dtype]
    if 1.0 / limit <= top <= limit:
        assert scale == 1.0
    elif top >= 2.0**-1024:  # 2^1023 (the largest finite power of two) or less does it
        assert is_power_of_two(scale)
        assert 0.5 <= top * scale < 1.0
    else:  # smaller float64 subnormals: the largest finite power of two, into the safe range
        assert scale == 2.0**1023
        assert 1.0 / limit <= top * scale < 0.5


def test_float64_data_of_subnormal_size_fit_scaled() -> None:
    from rbfkm_engine import RBFKMeans

    X = np.array([[0.0, 0.0], [1.0, 0.0], [10.0, 10.0], [11.0, 10.0]])
    params = dict(n_clusters=2, assignment="hard", init=X[[0, 2]], dtype="float64", device="cpu")
    tiny = RBFKMeans(**params).fit(X * 1e-310)
    np.testing.assert_array_equal(tiny.labels_, [0, 0, 1, 1])


def test_max_abs_sees_the_most_negative_value_and_nan() -> None:
    assert max_abs(torch.tensor([[1.0, -7.5], [3.0, 2.0]])) == 7.5
    assert max_abs(torch.tensor([[1.0, 9.0], [3.0, -2.0]])) == 9.0
    assert math.isnan(max_abs(torch.tensor([[1.0, math.nan]])))
    assert max_abs(torch.tensor([[1.0, -math.inf]])) == math.inf


def test_times_power_of_two_reaches_beyond_float32s_range_exactly() -> None:
    # 2^-149 (float32's smallest subnormal) times 2^149: one factor of 2^149 would be inf.
    t = torch.tensor([2.0**-149, -(2.0**-148), 3 * 2.0**-149], dtype=torch.float32)
    out = times_power_of_two(t, 2.0**149)
    assert out is t
    assert out.tolist() == [1.0, -2.0, 3.0]
    assert times_power_of_two(torch.tensor([6.0]), 2.0**-3).tolist() == [0.75]


# ------------------------------------------------------------------ copies and views


def test_may_share_memory() -> None:
    array = np.arange(6.0).reshape(3, 2)
    view = torch.from_numpy(array)
    assert may_share_memory(view, array)
    assert not may_share_memory(view.clone(), array)
    assert may_share_memory(view[1:], view)
    assert not may_share_memory(view.clone(), view)
    assert not may_share_memory(torch.tensor(array.tolist()), array.tolist())

    class Frame:  # any other container may hand out views: conservative
        pass

    assert may_share_memory(view.clone(), Frame())


def test_scaled_never_writes_to_the_callers_data() -> None:
    array = np.full((4, 2), 2.0**50)
    Xt = torch.from_numpy(array)
    out = scaled(Xt, array, 2.0**-51)
    assert out.data_ptr() != Xt.data_ptr()
    assert out.max().item() == 0.5
    np.testing.assert_array_equal(array, 2.0**50)


def test_scaled_works_in_place_on_a_copy_and_not_at_all_at_scale_one() -> None:
    source = [[2.0**50, 0.0], [0.0, -(2.0**50)]]
    Xt = torch.tensor(source, dtype=torch.float64)
    assert scaled(Xt, source, 1.0) is Xt
    out = scaled(Xt, source, 2.0**-51)
    assert out.data_ptr() == Xt.data_ptr()
    assert out.tolist() == [[0.5, 0.0], [0.0, -0.5]]
    assert source == [[2.0**50, 0.0], [0.0, -(2.0**50)]]


def test_centred_never_writes_to_the_callers_data() -> None:
    array = np.array([[1.0, 2.0], [3.0, 6.0]])
    Xt = torch.from_numpy(array)
    mean = torch.tensor([2.0, 4.0], dtype=torch.float64)
    out = centred(Xt, array, mean)
    assert out.tolist() == [[-1.0, -2.0], [1.0, 2.0]]
    np.testing.assert_array_equal(array, [[1.0, 2.0], [3.0, 6.0]])


def test_centred_works_in_place_on_a_copy() -> None:
    array = np.array([[1.0, 2.0], [3.0, 6.0]])
    Xt = torch.from_numpy(array).float()  # another dtype: already a copy
    out = centred(Xt, array, torch.tensor([2.0, 4.0], dtype=torch.float64))
    assert out.data_ptr() == Xt.data_ptr() and out.dtype == torch.float32
    assert out.tolist() == [[-1.0, -2.0], [1.0, 2.0]]
    np.testing.assert_array_equal(array, [[1.0, 2.0], [3.0, 6.0]])


def test_centred_at_a_zero_mean_is_the_data_itself() -> None:
    Xt = torch.ones(3, 2)
    assert centred(Xt, Xt, torch.zeros(2, dtype=torch.float64)) is Xt


# ------------------------------------------------------------------ into_fit_frame


def line_at(offset: float, n: int = 200) -> np.ndarray:
    """Points at ``offset - 1`` and ``offset + 1`` (variance 1) in the first feature."""
    X = np.zeros((n, 2))
    X[:, 0] = offset + np.where(np.arange(n) % 2 == 0, -1.0, 1.0)
    X[:, 1] = np.linspace(-0.5, 0.5, n)
    return X


def frame_of(X: np.ndarray, w: np.ndarray | None = None):
    Xt = torch.from_numpy(X)
    wt = None if w is None else torch.from_numpy(w)
    return Xt, into_fit_frame(Xt, X, wt, max_abs(Xt))


def test_near_the_origin_the_data_are_neither_copied_nor_centred() -> None:
    X = line_at(0.4)  # squared mean 0.16 < CENTRE_ABOVE x total variance (about 1.08)
    before = X.copy()
    Xt, framed = frame_of(X)
    assert framed.X is Xt and framed.scale == 1.0
    assert not bool(framed.origin.any())
    np.testing.assert_allclose(framed.mean.numpy(), X.mean(axis=0), atol=1e-15)
    assert framed.spread == pytest.approx(X.var(axis=0).sum(), rel=1e-12)
    np.testing.assert_allclose(framed.x_sq.numpy(), (X**2).sum(axis=1))
    np.testing.assert_array_equal(X, before)


def test_far_from_the_origin_the_data_are_centred_on_a_copy() -> None:
    X = line_at(1e3)
    before = X.copy()
    Xt, framed = frame_of(X)
    assert framed.X.data_ptr() != Xt.data_ptr()
    np.testing.assert_allclose(framed.origin.numpy(), X.mean(axis=0), rtol=1e-15, atol=1e-12)
    np.testing.assert_allclose(framed.X.numpy(), X - X.mean(axis=0), atol=1e-12)
    np.testing.assert_allclose(framed.x_sq.numpy(), (framed.X.numpy() ** 2).sum(axis=1))
    assert framed.spread == pytest.approx(X.var(axis=0).sum(), rel=1e-12)
    np.testing.assert_array_equal(X, before)


@pytest.mark.parametrize(("offset", "centred_expected"), [(0.45, False), (0.6, True)])
def test_centring_starts_where_the_mean_outweighs_the_spread(
    offset: float, centred_expected: bool
) -> None:
    X = line_at(offset)
    _, framed = frame_of(X)
    ratio = offset**2 / X.var(axis=0).sum()
    assert bool(ratio > CENTRE_ABOVE) is centred_expected
    assert bool(framed.origin.any()) is centred_expected


def test_a_copy_is_centred_in_place() -> None:
    source = line_at(50.0).tolist()
    Xt = torch.tensor(source, dtype=torch.float64)
    framed = into_fit_frame(Xt, source, None, max_abs(Xt))
    assert framed.X.data_ptr() == Xt.data_ptr()
    assert float(framed.X.mean(dim=0).abs().max()) < 1e-12
    assert source[0][0] == 49.0


def test_weighted_data_are_centred_on_the_weighted_mean() -> None:
    X = line_at(100.0)
    w = np.linspace(0.0, 2.0, X.shape[0])
    _, framed = frame_of(X, w)
    mean = np.average(X, axis=0, weights=w)
    np.testing.assert_allclose(framed.origin.numpy(), mean, rtol=1e-14)
    variance = np.average((X - mean) ** 2, axis=0, weights=w).sum()
    assert framed.spread == pytest.approx(variance, rel=1e-10)


def test_huge_float32_data_are_scaled_into_half_one() -> None:
    X = (line_at(0.0) * 1e20).astype(np.float32)
    before = X.copy()
    _, framed = frame_of(X)
    assert is_power_of_two(1.0 / framed.scale)
    assert 0.5 <= float(framed.X.abs().max()) < 1.0
    assert torch.isfinite(framed.x_sq).all()
    # The scaled fit's squared distances are the data's times scale^2.
    spread = squared_in_data_units(framed.spread, framed.scale)
    assert spread == pytest.approx(float(X.astype(np.float64).var(axis=0).sum()), rel=1e-5)
    np.testing.assert_array_equal(X, before)


# ------------------------------------------------------------------ units


@given(
    value=st.floats(min_value=1e-100, max_value=1e100),
    exponent=st.integers(min_value=-300, max_value=300),
)
@settings(max_examples=examples(200))
def test_units_round_trip(value: float, exponent: int) -> None:
    # Within float64's normal range (value x scale^2 between 2^-932 and 2^932): exact.
    scale = math.ldexp(1.0, exponent)
    fit = squared_in_fit_units(value, scale)
    assert 0.0 < fit < math.inf
    assert squared_in_data_units(fit, scale) == value


def test_fit_units_stay_positive_and_finite() -> None:
    assert squared_in_fit_units(1e300, 2.0**200) == sys.float_info.max
    assert squared_in_fit_units(1e-300, 2.0**-200) == sys.float_info.min
    # Divided twice: the square of a tiny scale would underflow to 0.
    assert squared_in_data_units(2.0**-1000, 2.0**-600) == 2.0**200


def test_unscaled_record_converts_squared_distances_only() -> None:
    record = {"sigma": 4.0, "objective": 8.0, "inertia": 16.0, "iterations": 3, "mean_nnz": 1.5}
    assert unscaled_record(record, 1.0) is record
    assert unscaled_record(record, 0.5) == {
        "sigma": 16.0,
        "objective": 32.0,
        "inertia": 64.0,
        "iterations": 3,
        "mean_nnz": 1.5,
    }


def test_unscaled_callback_reports_in_the_data_units_and_passes_the_stop_back() -> None:
    seen: list[FitProgress] = []

    def callback(info: FitProgress) -> bool:
        seen.append(info)
        return info.iteration >= 2

    assert unscaled_callback(None, 0.5) is None
    assert unscaled_callback(callback, 1.0) is callback
    told = unscaled_callback(callback, 2.0**-3)
    assert told is not None
    first = FitProgress(sigma=1.0, iteration=1, objective=2.0, fraction=0.25, phase="anneal")
    assert not told(first)
    assert told(FitProgress(0.0, 2, 0.5, 0.9, "lloyd"))
    assert seen[0] == FitProgress(
        sigma=64.0, iteration=1, objective=128.0, fraction=0.25, phase="anneal"
    )
    assert seen[1] == FitProgress(0.0, 2, 32.0, 0.9, "lloyd")


def test_weighted_total_is_float64() -> None:
    values = torch.full((10,), 0.1, dtype=torch.float32)
    assert weighted_total(values, None) == pytest.approx(1.0, rel=1e-7)
    w = torch.arange(10, dtype=torch.float32)
    assert weighted_total(values, w) == pytest.approx(4.5, rel=1e-7)
