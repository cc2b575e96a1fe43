"""Five synthetic continua no choice was made on (Gaussian in 2, 3 and 5 dimensions,
log-normal and uniform in 2): per seed, the default entmax15 fit of the engine first on
``PYTHONPATH`` (with annealed/end) or scikit-learn's ``n_init=10``, one JSON line per fit,
the inertia from the benchmarks' one judge (``common.evaluate_centroids``).

    cd /tmp && PYTHONPATH=<tree> python <this file> engine > shapes-<side>.jsonl
    cd /tmp && python <this file> sklearn > shapes-sklearn-n10.jsonl
    python ../2026-12-07-cpu-search-budget/heldout/table.py shapes-sklearn-n10.jsonl \\
        shapes-old.jsonl shapes-new.jsonl
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from sklearn.cluster import KMeans

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/
import common

from rbfkm_engine import RBFKMeans


def shapes() -> Iterator[tuple[str, np.ndarray, int, int]]:
    """(name, X, k, seeds)."""
    rng = np.random.default_rng(0)
    yield "gauss2d k64", rng.normal(0, 1, (8000, 2)), 64, 10
    yield "lognormal2d k32", np.exp(rng.normal(0, 1, (8000, 2))), 32, 6
    yield "uniform2d k50", rng.random((10000, 2)), 50, 6
    yield "gauss3d k128", rng.normal(0, 1, (20000, 3)), 128, 6
    yield "gauss5d k64", rng.normal(0, 1, (20000, 5)), 64, 6


def main() -> None:
    reference = sys.argv[1] == "sklearn"
    for name, X, k, seeds in shapes():
        X = X.astype(np.float32)
        for seed in range(seeds):
            started = time.perf_counter()
            if reference:
                model = KMeans(k, n_init=10, random_state=seed).fit(X)
            else:
                model = RBFKMeans(n_clusters=k, random_state=seed).fit(X)
            wall = time.perf_counter() - started
            inertia = common.evaluate_centroids(X, model.cluster_centers_)["inertia"]
            line = {"set": name, "seed": seed, "inertia": inertia, "wall": wall}
            if not reference:
                line["ann_end"] = common.annealed_inertia(model.history_) / model.inertia_
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
