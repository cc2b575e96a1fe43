"""Pauses of a pass's aid that did not pay: Hamerly's bounds, neighbour lists.

An aid (:class:`~rbfkm_engine.bounds.BoundsUse`, :class:`~rbfkm_engine.passes.NeighbourUse`)
judges from a pass's counts whether it paid. After a pass where it did not, the next
``first`` passes go without it, twice as many after each further such pass (up to
``most``), then it is tried again; a pass where it paid resets the pause.
"""

from __future__ import annotations


class Pause:
    """Whether the next pass uses an aid, from whether it paid in the last that did."""

    def __init__(self, first: int, most: int | None = None) -> None:
        """``most``: the longest pause (``None``: no limit; ``first``: no doubling)."""
        self._first = first
        self._most = most
        self._skip = 0
        self._pause = first

    def wanted(self) -> bool:
        """Whether the next pass uses the aid (asked once a pass)."""
        if self._skip > 0:
            self._skip -= 1
            return False
        return True

    def paid(self, paid: bool) -> None:
        """The last pass that used the aid did, or did not, pay for it."""
        if paid:
            self._pause = self._first
            return
        self._skip = self._pause
        self._pause *= 2
        if self._most is not None:
            self._pause = min(self._pause, self._most)
