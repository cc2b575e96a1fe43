"""A held-out shape: 200 000 uniform points in 8-d at ``k = 50``, three seeds, the engine
(the tree first on ``PYTHONPATH``; run from outside the repository) against scikit-learn
``KMeans(n_init=10)`` on the same seed, inertias by the benchmarks' judge (float64), two
threads each.

    cd /tmp && PYTHONPATH=<tree> python <this file>
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import torch
from sklearn.cluster import KMeans
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/
from common import evaluate_centroids

from rbfkm_engine import RBFKMeans


def inertia(X: np.ndarray, C: np.ndarray) -> float:
    """The benchmarks' one judge of a fit's centres (float64)."""
    return float(evaluate_centroids(X, C)["inertia"])


def main() -> None:
    torch.set_num_threads(2)
    threadpool_limits(2)
    X = np.random.RandomState(1).rand(200000, 8).astype(np.float32)
    for seed in range(3):
        started = time.perf_counter()
        model = RBFKMeans(n_clusters=50, random_state=seed).fit(X)
        wall = time.perf_counter() - started
        started = time.perf_counter()
        peer = KMeans(50, n_init=10, random_state=seed).fit(X)
        peer_wall = time.perf_counter() - started
        mine, theirs = inertia(X, model.cluster_centers_), inertia(X, peer.cluster_centers_)
        print(
            f"seed {seed}: engine {mine:.2f} ({wall:.2f} s, n_iter {model.n_iter_}, converged "
            f"{model.converged_}), n_init=10 {theirs:.2f} ({peer_wall:.2f} s), "
            f"ratio {mine / theirs:.5f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
