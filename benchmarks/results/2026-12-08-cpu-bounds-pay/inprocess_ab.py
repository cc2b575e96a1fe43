"""Two versions of the engine in one process, their hard Lloyd fits alternating.

Each version is copied under its own package name (relative imports only, so the copy
works as is), and every round fits each version from the same random rows, 20 iterations,
tol 0, two threads, in alternating order; the machine's drift (its walls change by tens
of per cent within minutes) then falls on both alike. Prints median ms an iteration,
new / old, and whether the labels agree. No peer runs in the process: scikit-learn's and
faiss's OpenMP threads spin after their runs and slowed both engines' next fits here by a
quarter (compare.py runs the peers).

    git archive 499f2fb rbfkm_engine | tar -x -C /tmp/old
    python inprocess_ab.py /tmp/old/rbfkm_engine ../../../rbfkm_engine hard colours
"""

from __future__ import annotations

import importlib
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/
import common
import compare

common.pin_threads(2)
warnings.simplefilter("ignore")

import numpy as np  # noqa: E402

ROUNDS = 8


def packages(old: str, new: str) -> dict[str, object]:
    """Both engines, imported as ``rbfkm_old`` and ``rbfkm_new``."""
    root = Path(tempfile.mkdtemp())
    for name, source in (("rbfkm_old", old), ("rbfkm_new", new)):
        shutil.copytree(source, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    sys.path.insert(0, str(root))
    return {name: importlib.import_module(name) for name in ("rbfkm_old", "rbfkm_new")}


def main() -> None:
    engines = packages(sys.argv[1], sys.argv[2])
    for name in sys.argv[3:]:
        ds = compare.build_dataset(common, name, quick=False)
        init = common.initial_centroids(ds.X, ds.k, 0)
        walls: dict[str, list[float]] = {"old": [], "new": []}
        labels = {}
        for r in range(ROUNDS):
            for side in ("old", "new") if r % 2 == 0 else ("new", "old"):
                estimator = engines[f"rbfkm_{side}"].RBFKMeans
                model = estimator(
                    ds.k, assignment="hard", init=init, n_init=1, max_iter=20, tol=0.0
                )
                started = time.perf_counter()
                model.fit(ds.X)
                walls[side].append((time.perf_counter() - started) / model.n_iter_)
                labels[side] = model.labels_
        ms = {side: 1e3 * statistics.median(w) for side, w in walls.items()}
        n, d = ds.X.shape
        print(
            f"{name:12s} {n:7d} x {d:3d} k {ds.k:5d}: old {ms['old']:7.2f}  new {ms['new']:7.2f}"
            f" ms/iter;  new/old {ms['new'] / ms['old']:.2f}"
            f"  labels equal {np.array_equal(labels['old'], labels['new'])}",
            flush=True,
        )


if __name__ == "__main__":
    main()
