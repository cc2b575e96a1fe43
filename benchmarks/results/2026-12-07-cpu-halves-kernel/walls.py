"""Median engine and scikit-learn walls per table, before and after, from compare.py's JSON
(``python walls.py``): two rounds of each side, run alternately."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent


def medians(path: Path) -> dict[str, tuple[float, float, list[float]]]:
    """Per data set: the engine's and n_init=10's median walls, and the engine's inertias."""
    report = json.loads(path.read_text())["datasets"]
    out = {}
    for name, res in report.items():
        engine, peer = res["quality"]["rbfkm-entmax15"], res["quality"]["sklearn-n10"]
        walls = [run["wall_s"] for run in engine["runs"]]
        peer_walls = [run["wall_s"] for run in peer["runs"]]
        inertias = [run["inertia"] for run in engine["runs"]]
        out[name] = (statistics.median(walls), statistics.median(peer_walls), inertias)
    return out


def main() -> None:
    sides = {
        side: [medians(HERE / f"tabular13-{side}-{r}.json") for r in (1, 2)]
        for side in ("before", "after")
    }
    print("table | engine ms before | after | after / before | n_init=10 ms | same inertias")
    print("--- | --- | --- | --- | --- | ---")
    for name in sides["before"][0]:
        before = [run[name][0] * 1e3 for run in sides["before"]]
        after = [run[name][0] * 1e3 for run in sides["after"]]
        peer = [run[name][1] * 1e3 for side in sides.values() for run in side]
        same = all(
            run[name][2] == sides["before"][0][name][2] for side in sides.values() for run in side
        )
        ratio = statistics.mean(after) / statistics.mean(before)
        print(
            f"{name} | {before[0]:.1f}, {before[1]:.1f} | {after[0]:.1f}, {after[1]:.1f} | "
            f"{ratio:.2f} | {min(peer):.1f}-{max(peer):.1f} | {same}"
        )


if __name__ == "__main__":
    main()
