"""Per shape: seeds at or below scikit-learn n_init=10, the geometric mean of the inertia
ratios, and the mean ratio of the annealing's fixed point to n_init=10's inertia.

    python wins.py sklearn-n10.jsonl default.jsonl kappa1.jsonl
"""

from __future__ import annotations

import json
import math
import sys

RTOL = 1e-6


def runs(path: str) -> dict[tuple[str, int], dict]:
    with open(path) as lines:
        return {(r["set"], r["seed"]): r for r in map(json.loads, lines)}


def main() -> None:
    reference, files = runs(sys.argv[1]), sys.argv[2:]
    tried = [runs(path) for path in files]
    sets = list(dict.fromkeys(name for name, _ in tried[0]))
    print("set | " + " | ".join(f"{path}: wins, geo ratio, first/n10" for path in files))
    totals = [[0, 0, 0.0] for _ in tried]
    for name in sets:
        row = [name]
        for total, fits in zip(totals, tried, strict=True):
            keys = [key for key in fits if key[0] == name and key in reference]
            ratios = [fits[key]["end"] / reference[key]["end"] for key in keys]
            wins = sum(ratio <= 1 + RTOL for ratio in ratios)
            logs = sum(math.log(ratio) for ratio in ratios)
            first = sum(fits[key]["first"] / reference[key]["end"] for key in keys) / len(keys)
            total[0] += wins
            total[1] += len(keys)
            total[2] += logs
            row.append(f"{wins}/{len(keys)} {math.exp(logs / len(keys)):.5f} {first:.4f}")
        print(" | ".join(row))
    for path, (wins, count, logs) in zip(files, totals, strict=True):
        print(f"{path}: wins {wins}/{count}, geometric mean {math.exp(logs / count):.5f}")


if __name__ == "__main__":
    main()
