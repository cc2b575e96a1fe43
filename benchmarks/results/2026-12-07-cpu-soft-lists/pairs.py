"""Per-fit comparison of two runs' JSON lines (``set``, ``seed``, ``inertia`` or ``end``,
``wall``, ``ann_end`` where recorded): the second's inertia over the first's, both walls,
both annealed/end ratios, and per set the seeds the second run ends lower, equal and higher.

    python pairs.py large-k-lists.jsonl large-k-cell.jsonl
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict


def runs(path: str) -> dict[tuple[str, int], dict]:
    with open(path) as lines:
        return {(d["set"], d["seed"]): d for d in map(json.loads, lines)}


def inertia(fit: dict) -> float:
    return fit["inertia"] if "inertia" in fit else fit["end"]


def main() -> None:
    first, second = runs(sys.argv[1]), runs(sys.argv[2])
    tally: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for key, a in first.items():
        if key not in second:
            continue
        b = second[key]
        ratio = inertia(b) / inertia(a)
        tally[key[0]][0 if ratio < 1 else 1 if ratio == 1 else 2] += 1
        line = (
            f"{key[0]:26s} {key[1]}  {inertia(a):.6g} -> {inertia(b):.6g} ({ratio:.5f})"
            f"  wall {a['wall']:.2f} -> {b['wall']:.2f}"
        )
        if "ann_end" in a and "ann_end" in b:  # scripts that record it
            line += f"  annealed/end {a['ann_end']:.3f} -> {b['ann_end']:.3f}"
        print(line)
    for name, (lower, same, higher) in tally.items():
        print(f"{name}: lower {lower}, equal {same}, higher {higher}")


if __name__ == "__main__":
    main()
