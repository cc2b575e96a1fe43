"""The held-out table: per shape, the mean inertia over ``n_init=10``'s on the same seeds
for each engine run given, the seeds won (at most 1e-6 above), and the median wall ratio.

    python table.py sklearn-n10.jsonl before.jsonl after.jsonl
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict


def rows(path: str) -> dict[tuple[str, int], dict]:
    with open(path) as f:
        return {(r["set"], r["seed"]): r for r in map(json.loads, f)}


def main() -> None:
    reference, *runs = (rows(p) for p in sys.argv[1:])
    shapes: dict[str, list[int]] = defaultdict(list)
    for name, seed in reference:
        shapes[name].append(seed)
    names = sys.argv[2:]
    print("shape | " + " | ".join(f"{n}: ratio, wins, wall" for n in names))
    logs = [[] for _ in runs]
    for shape, seeds in shapes.items():
        cells = []
        for run, log in zip(runs, logs, strict=True):
            ratios = [run[shape, s]["inertia"] / reference[shape, s]["inertia"] for s in seeds]
            walls = [run[shape, s]["wall"] / reference[shape, s]["wall"] for s in seeds]
            log.extend(ratios)
            wins = sum(r <= 1 + 1e-6 for r in ratios)
            cells.append(
                f"{statistics.fmean(ratios):.4f}, {wins}/{len(seeds)}, "
                f"{statistics.median(walls):.2f}"
            )
        print(f"{shape} | " + " | ".join(cells))
    for name, log in zip(names, logs, strict=True):
        wins = sum(r <= 1 + 1e-6 for r in log)
        mean = statistics.geometric_mean(log)
        print(f"{name}: geometric mean {mean:.4f}, wins {wins}/{len(log)}")


if __name__ == "__main__":
    main()
