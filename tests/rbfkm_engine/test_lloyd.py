"""The Lloyd finish: a K-Means fixed point, one record per phase, early abandonment."""

from __future__ import annotations

from rbfkm_engine.lloyd import bound_to_end_above


def testbound_to_end_above_extrapolates_the_falling_inertia() -> None:
    assert not bound_to_end_above([10.0, 5.0], 1.0)  # too early to tell
    assert bound_to_end_above([10.0, 9.0, 8.9], 8.0)  # steps shrink 10x: ends near 8.88
    assert not bound_to_end_above([10.0, 9.0, 8.5], 8.0)  # steps halve: may reach 8
    assert not bound_to_end_above([10.0, 9.0, 7.9], 8.0)  # already below
