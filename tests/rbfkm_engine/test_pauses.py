"""rbfkm_engine/pauses.py: an aid that did not pay is skipped for a pause that doubles."""

from __future__ import annotations

from rbfkm_engine.pauses import Pause


def skipped(pause: Pause) -> int:
    """Passes the pause skips before the aid is wanted again."""
    count = 0
    while not pause.wanted():
        count += 1
    return count


def test_a_pause_doubles_after_each_miss_up_to_its_most() -> None:
    pause = Pause(2, 16)
    assert pause.wanted()
    lengths = []
    for _ in range(5):
        pause.paid(False)
        lengths.append(skipped(pause))
    assert lengths == [2, 4, 8, 16, 16]


def test_a_pass_that_paid_resets_the_pause() -> None:
    pause = Pause(3)
    for _ in range(3):
        pause.paid(False)
        skipped(pause)
    pause.paid(True)
    assert pause.wanted()
    pause.paid(False)
    assert skipped(pause) == 3


def test_without_a_limit_the_pause_keeps_doubling_and_with_most_first_it_never_does() -> None:
    growing, fixed = Pause(2), Pause(2, 2)
    for _ in range(6):
        growing.paid(False)
        fixed.paid(False)
        last, same = skipped(growing), skipped(fixed)
    assert (last, same) == (64, 2)
