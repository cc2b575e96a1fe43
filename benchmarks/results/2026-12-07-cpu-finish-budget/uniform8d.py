"""A held-out shape: 200 000 uniform points in 8-d at ``k = 50``, three seeds, the engine
(the tree first on ``PYTHONPATH``; run from outside the repository) against scikit-learn
``KMeans(n_init=10)`` on the same seed, inertias recomputed in float64, two threads each.

    cd /tmp && PYTHONPATH=<tree> python <this file>
"""

from __future__ import annotations

import time

import numpy as np
import torch
from sklearn.cluster import KMeans
from threadpoolctl import threadpool_limits

from rbfkm_engine import RBFKMeans


def inertia(X64: torch.Tensor, C: np.ndarray) -> float:
    """Float64 inertia of the rows at their nearest centre, by blocks of rows."""
    centres = torch.from_numpy(np.asarray(C, dtype=np.float64))
    total = 0.0
    for start in range(0, len(X64), 50000):
        block = torch.cdist(X64[start : start + 50000], centres)
        total += float(block.square().min(1).values.sum())
    return total


def main() -> None:
    torch.set_num_threads(2)
    threadpool_limits(2)
    X = np.random.RandomState(1).rand(200000, 8).astype(np.float32)
    X64 = torch.from_numpy(X.astype(np.float64))
    for seed in range(3):
        started = time.perf_counter()
        model = RBFKMeans(n_clusters=50, random_state=seed).fit(X)
        wall = time.perf_counter() - started
        started = time.perf_counter()
        peer = KMeans(50, n_init=10, random_state=seed).fit(X)
        peer_wall = time.perf_counter() - started
        mine, theirs = inertia(X64, model.cluster_centers_), inertia(X64, peer.cluster_centers_)
        print(
            f"seed {seed}: engine {mine:.2f} ({wall:.2f} s, n_iter {model.n_iter_}, converged "
            f"{model.converged_}), n_init=10 {theirs:.2f} ({peer_wall:.2f} s), "
            f"ratio {mine / theirs:.5f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
