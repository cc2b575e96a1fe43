"""One run of a fit: the phases in order."""

from __future__ import annotations

import pytest

from rbfkm_engine.solver import annealing_budget


@pytest.mark.parametrize(("max_iter", "budget"), [(1, 0), (2, 1), (5, 4), (10, 8), (300, 240)])
def test_annealing_leaves_lloyd_its_share(max_iter: int, budget: int) -> None:
    assert annealing_budget(max_iter) == budget
