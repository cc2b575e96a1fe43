"""Which logged trials (``trials.py``) each abandonment rule would have cut: per log, the
trials, the winners (converged below their level), and per rule the winners it cut and the
iterations all trials would have taken. The rule is the engine's (a geometric
extrapolation of the last two steps, their ratio doubled), judging from iteration
``after`` on; the engine it imports must be on ``PYTHONPATH``.

    python judge.py trials-*.json
"""

from __future__ import annotations

import json
import sys

import rbfkm_engine.lloyd as lloyd


def rule(after: int):
    """The engine's ``bound_to_end_above``, judging from iteration ``after`` on."""

    def bound(s: list[float], level: float) -> bool:
        lloyd.TRIAL_CHECK_AFTER = after
        return lloyd.bound_to_end_above(s, level)

    return bound


RULES = {after: rule(after) for after in (3, 6, 10)}


def main() -> None:
    print(
        "log | trials | winners | iterations | "
        + " | ".join(f"from {a}: winners cut, iterations" for a in RULES)
    )
    for path in sys.argv[1:]:
        with open(path) as f:
            log = [t for t in json.load(f)["log"] if t["seq"]]
        winners = [t["conv"] and t["seq"][-1] < t["level"] for t in log]
        cells = []
        for bound in RULES.values():
            cut = spent = 0
            for t, won in zip(log, winners, strict=False):
                at = next(
                    (i for i in range(1, len(t["seq"]) + 1) if bound(t["seq"][:i], t["level"])),
                    None,
                )
                cut += bool(at and won)
                spent += at or len(t["seq"])
            cells.append(f"{cut}, {spent}")
        total = sum(len(t["seq"]) for t in log)
        print(f"{path} | {len(log)} | {sum(winners)} | {total} | " + " | ".join(cells))


if __name__ == "__main__":
    main()
