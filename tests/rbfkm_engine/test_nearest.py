"""The nearest centre of each row, exactly argmin's: hints, packed candidates, ties."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rbfkm_engine.nearest import nearest, packed_argmin

from .conftest import examples

PROPERTY = settings(max_examples=examples(60), deadline=None)


@pytest.mark.parametrize("moved_share", (0.0, 0.05, 0.5, 1.0))
def test_nearest_with_hints_equals_argmin_and_keeps_tied_hints(moved_share: float) -> None:
    # Few moved rows take the gathered argmin, many take the whole-block one.
    g = torch.Generator().manual_seed(1)
    D = torch.rand((400, 16), generator=g, dtype=torch.float64)
    _, expected = D.min(dim=1)
    hint = expected.clone()
    moved = torch.rand(400, generator=g) < moved_share
    hint[moved] = (expected[moved] + 1) % 16
    D[0, 3] = D[0, 7] = -1.0  # a tie: the hinted centre stays
    hint[0], expected[0] = 7, 7
    d_min, true_min, labels = nearest(D, torch.ones(400, dtype=D.dtype), hint)
    torch.testing.assert_close(d_min, D.amin(dim=1))
    torch.testing.assert_close(true_min, (D.amin(dim=1) + 1.0).clamp_min(0.0))
    torch.testing.assert_close(labels, expected)


def near_tie_rows(dtype: torch.dtype):
    """Strategy: ``(D, row_offset)`` blocks of ``c_sq - 2 x.c``-like values: few distinct
    magnitudes (exact ties), signed zeros, values one ulp apart and slightly negative true
    distances, as the distance GEMM's rounding makes them."""
    base = st.sampled_from([0.0, -0.0, 1.0, 1.5, 2.0, 1e-30, -1e-7, 3.0, 1e6])
    nudge = st.sampled_from([0, 0, 1, -1, 2])
    cell = st.tuples(base, nudge)

    def block(shape: tuple[int, int]):
        cells = st.lists(cell, min_size=shape[0] * shape[1], max_size=shape[0] * shape[1])
        offsets = st.lists(st.sampled_from([0.0, 0.5, 1e-7]), min_size=shape[0], max_size=shape[0])
        return st.tuples(cells, offsets).map(lambda co: _near_tie_block(shape, *co, dtype))

    return st.tuples(st.integers(1, 6), st.integers(1, 70)).flatmap(block)


def _near_tie_block(shape, cells, offsets, dtype):
    D = torch.tensor([b for b, _ in cells], dtype=dtype)
    for steps in range(1, 3):  # move some values ``steps`` ulps up or down
        for sign in (1, -1):
            pick = torch.tensor([n == sign * steps for _, n in cells])
            target = torch.full_like(D, sign * float("inf"))
            for _ in range(steps):
                D = torch.where(pick, torch.nextafter(D, target), D)
    offset = torch.tensor(offsets, dtype=dtype) - D.view(shape).amin(dim=1).clamp_max(0.0)
    return D.view(shape), offset


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64))
@given(data=st.data())
@PROPERTY
def test_nearest_without_hints_is_argmin_ties_included(dtype: torch.dtype, data) -> None:
    # The packed candidates are checked against the row minimum: the labels are argmin's,
    # the lowest index among tied minima, signed zeros and near ties included.
    D, offset = data.draw(near_tie_rows(dtype))
    for row_offset in (offset, None):
        d_min, _, labels = nearest(D, row_offset)
        torch.testing.assert_close(labels, D.argmin(dim=1), rtol=0, atol=0)
        torch.testing.assert_close(d_min, D.amin(dim=1), rtol=0, atol=0)


def test_packed_argmin_finds_the_minimum_of_distinct_values() -> None:
    # Values further apart than the index bits' precision: the candidates are exact.
    g = torch.Generator().manual_seed(3)
    D = torch.rand((300, 50), generator=g) * 100.0 - 40.0
    offset = torch.full((300,), 40.0)
    before = D.clone()
    torch.testing.assert_close(packed_argmin(D, offset, torch.empty(300 * 64)), D.argmin(dim=1))
    torch.testing.assert_close(D, before, rtol=0, atol=0)  # the keys go to the scratch


def test_packed_argmin_with_many_centres_falls_back_to_argmin() -> None:
    D = torch.rand((3, 2**16 + 1), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(packed_argmin(D), D.argmin(dim=1))
