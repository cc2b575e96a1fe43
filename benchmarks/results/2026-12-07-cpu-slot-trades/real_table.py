"""The real sets' table: per set and seed, each run's inertia over scikit-learn
``n_init=10``'s on the same seed (from ``../2026-12-07-cpu-halves-kernel/real.json``, the
same seeds and threads), the seeds won, the median wall ratio and annealed/end.

    python real_table.py real-old.jsonl real-new.jsonl
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

REFERENCE = Path(__file__).resolve().parent.parent / "2026-12-07-cpu-halves-kernel" / "real.json"


def references() -> dict[tuple[str, int], tuple[float, float]]:
    """(set, seed) -> scikit-learn ``n_init=10``'s inertia and wall."""
    data = json.loads(REFERENCE.read_text())
    out = {}
    for figures in data["datasets"].values():
        for row in figures["per_seed"]["rbfkm-entmax15"]["rows"]:
            out[(figures["key"], row["seed"])] = (row["ref_inertia"], row["ref_wall_s"])
    return out


def main() -> None:
    reference = references()
    runs = [[json.loads(line) for line in Path(p).read_text().splitlines()] for p in sys.argv[1:]]
    print("set | " + " | ".join(f"{p}: ratios, wins, wall, annealed/end" for p in sys.argv[1:]))
    sets = list(dict.fromkeys(r["set"] for r in runs[0]))
    for name in sets:
        if not any((name, r["seed"]) in reference for r in runs[0]):
            continue
        cells = []
        for run in runs:
            rows = [r for r in run if r["set"] == name and (name, r["seed"]) in reference]
            if not rows:
                cells.append("-")
                continue
            ratios = [r["end"] / reference[(name, r["seed"])][0] for r in rows]
            walls = [r["wall"] / reference[(name, r["seed"])][1] for r in rows]
            wins = sum(x <= 1 + 1e-6 for x in ratios)
            ann = " ".join(f"{r['ann_end']:.3f}" for r in rows)
            shown = " ".join(f"{x:.5f}" for x in ratios)
            cells.append(f"{shown}, {wins}/{len(rows)}, {statistics.median(walls):.2f}, {ann}")
        print(f"{name} | " + " | ".join(cells))
    for name in sets:
        if not any((name, r["seed"]) in reference for r in runs[0]):
            ends = [
                " ".join(
                    f"{r['end']:.4f} ({r['wall']:.1f} s, {r['ann_end']:.3f})"
                    for r in run
                    if r["set"] == name
                )
                for run in runs
            ]
            print(f"{name} (no n_init=10 reference) | " + " | ".join(ends))


if __name__ == "__main__":
    main()
