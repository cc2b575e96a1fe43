"""The hard-Lloyd table of two sides' ``compare.py --json`` runs, two rounds each
(``speed-<base|new>-<1|2>.json``): every run's ms per iteration, and the engine's best
after over the fastest peer's best.

    python speed_table.py speed > speed/table.md
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    folder = sys.argv[1]
    runs: dict[str, dict[tuple[str, str], list[float]]] = {}
    for side in ("base", "new"):
        for round_ in (1, 2):
            with open(f"{folder}/speed-{side}-{round_}.json") as f:
                data = json.load(f)
            for name, ds in data["datasets"].items():
                for method, v in ds["speed"].items():
                    runs.setdefault(name, {}).setdefault((method, side), []).append(
                        v["t_iter_s"] * 1e3
                    )
    print("| data | engine before | engine after | scikit-learn `n_init=1` | faiss", end="")
    print(" | after / fastest |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, v in runs.items():
        before, after = v[("rbfkm-hard", "base")], v[("rbfkm-hard", "new")]
        sklearn = v[("sklearn-n1", "base")] + v[("sklearn-n1", "new")]
        faiss = v[("faiss", "base")] + v[("faiss", "new")]
        ratio = min(after) / min(min(sklearn), min(faiss))

        def cell(xs: list[float]) -> str:
            return " / ".join(f"{x:.2f}" for x in xs)

        print(f"| {name} | {cell(before)} | {cell(after)} | {cell(sklearn)}", end="")
        print(f" | {cell(faiss)} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
