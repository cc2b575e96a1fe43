"""Median wall of the default entmax15 fits before (ab840be) and after (the kernel's
changes), from ``speed.sh``'s runs, and whether every seed's inertia is the same.

    python walls.py
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    walls: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    inertias: dict[str, dict[str, set[float]]] = defaultdict(lambda: defaultdict(set))
    for tree in ("before", "after"):
        for path in sorted((HERE / tree).glob("*.json")):
            with open(path) as f:
                sets = json.load(f)["datasets"]
            for name, figures in sets.items():
                for run in figures["quality"]["rbfkm-entmax15"]["runs"]:
                    walls[name][tree].append(run["wall_s"])
                    inertias[name][tree].add(round(run["inertia"], 6))
    for name, by_tree in walls.items():
        before, after = (statistics.median(by_tree[t]) for t in ("before", "after"))
        same = inertias[name]["before"] == inertias[name]["after"]
        print(
            f"{name:40s} before {before:.3f} s (n={len(by_tree['before'])})  after {after:.3f} s "
            f"(n={len(by_tree['after'])})  ratio {after / before:.2f}  same inertias: {same}"
        )


if __name__ == "__main__":
    main()
