"""Median wall of 13 default entmax15 fits (seeds 0-12, after 3 warm-up fits) of each
small table, by the engine first on ``PYTHONPATH``, with the mean temperatures and
iterations; run alternately for the two trees compared.

    cd /tmp && PYTHONPATH=<tree> python <this file> iris5,iris12,wine5,wine12
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/
import realdata

from rbfkm_engine import RBFKMeans


def main() -> None:
    torch.set_num_threads(2)
    for key in sys.argv[1].split(","):
        ds = realdata.load(key)
        X = ds.X.astype(np.float32)
        for seed in range(3):
            RBFKMeans(n_clusters=ds.k, random_state=seed).fit(X)
        walls, temperatures, iterations = [], [], []
        for seed in range(13):
            started = time.perf_counter()
            model = RBFKMeans(n_clusters=ds.k, random_state=seed).fit(X)
            walls.append(time.perf_counter() - started)
            temperatures.append(sum(1 for r in model.history_ if r["sigma"] > 0))
            iterations.append(model.n_iter_)
        print(
            f"{key} median {1e3 * statistics.median(walls):.1f} ms, "
            f"{statistics.mean(temperatures):.1f} temperatures, "
            f"{statistics.mean(iterations):.1f} iterations"
        )


if __name__ == "__main__":
    main()
