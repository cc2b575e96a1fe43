"""Scratch experiment kept with its results: a split rule for the annealing's twins.

Per shape and seed, one JSON line: the inertia of the Lloyd fixed point the annealing
reached before the local search (``first``), the fit's end, both recomputed in float64,
and the wall. ``setting`` sets module constants of the engine imported (``"twins.KAPPA=1"``
on a tree with ``kappa.diff`` applied, first on ``PYTHONPATH``), or ``sklearn`` fits
scikit-learn ``KMeans(n_init=10)`` instead. Two threads for every library.

    python split.py "" 13 3 > default.jsonl
    PYTHONPATH=<tree with kappa.diff> python split.py "twins.KAPPA=1" 13 3 > kappa1.jsonl
    python split.py sklearn 13 3 > sklearn-n10.jsonl
    python wins.py sklearn-n10.jsonl default.jsonl kappa1.jsonl
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch
from sklearn.datasets import load_digits

BENCH = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(BENCH))
import realdata  # noqa: E402
from common import evaluate_centroids  # noqa: E402

from rbfkm_engine import RBFKMeans, solver, twins  # noqa: E402

TABLES = [("iris", 3), ("iris", 5), ("iris", 12), ("wine", 5), ("wine", 8), ("cancer", 3)]
TABLES += [("cancer", 12), ("diabetes", 5)]
HELD_OUT = ("separated", "overlapping", "coffee")  # of the overshoot session's shapes


def _module(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def shapes() -> Iterator[tuple[str, np.ndarray, int]]:
    """(name, X, k): eight tables, the digits at two k, three held-out shapes."""
    for table, k in TABLES:
        yield f"{table} k{k}", realdata.tabular_dataset(table, k).X, k
    yield "digits k10", load_digits().data, 10
    yield "digits k30", load_digits().data, 30
    heldout = _module("heldout", BENCH / "results/2026-12-07-cpu-overshoot/heldout/heldout.py")
    for name, X, k in heldout.shapes():
        if any(word in name for word in HELD_OUT):
            yield name, X, k


def inertia(X: np.ndarray, C: Any) -> float:
    """The benchmarks' one judge of a fit's centres (float64)."""
    return float(evaluate_centroids(X, C)["inertia"])


def main() -> None:
    setting, seeds, large_seeds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(2)
    for assignment in [] if setting == "sklearn" else filter(None, setting.split(",")):
        name, value = assignment.split("=")
        module, constant = name.split(".")
        setattr({"twins": twins, "solver": solver}[module], constant, float(value))
    first: dict[str, float] = {}
    search = solver.search

    def recording_search(ctx: Any, C: torch.Tensor) -> torch.Tensor:
        first["inertia"] = ctx.passes.hard_labels(C)
        return search(ctx, C)

    solver.search = recording_search
    for name, X, k in shapes():
        X = X.astype(np.float32)
        for seed in range(seeds if X.shape[0] < 5000 else large_seeds):
            started = time.perf_counter()
            if setting == "sklearn":
                from sklearn.cluster import KMeans

                centres = KMeans(k, n_init=10, random_state=seed).fit(X).cluster_centers_
                first["inertia"] = 0.0
            else:
                centres = RBFKMeans(n_clusters=k, random_state=seed).fit(X).cluster_centers_
            wall = time.perf_counter() - started
            line = {"set": name, "seed": seed, "first": first["inertia"], "wall": wall}
            print(json.dumps({**line, "end": inertia(X, centres)}), flush=True)


if __name__ == "__main__":
    main()
