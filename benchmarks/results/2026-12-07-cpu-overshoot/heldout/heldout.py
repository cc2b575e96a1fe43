"""Held-out shapes for the overshoot comparison: a scratch script kept with its results.

None of these shapes was used to choose anything; each line is one fit as JSON (set, seed,
inertia recomputed in float64, wall seconds), two threads for every library.

    python heldout.py engine > default.jsonl
    python heldout.py engine --overshoot 2 > overshoot2.jsonl
    python heldout.py sklearn > sklearn-n10.jsonl
    python heldout.py engine --only coffee,wine --seeds 10 > default-10seeds.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from sklearn.datasets import load_breast_cancer, load_digits, load_wine, make_blobs
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # benchmarks/
import realdata


def shapes() -> Iterator[tuple[str, np.ndarray, int]]:
    """(name, X, k) of each held-out shape."""
    import skimage.data

    rng = np.random.RandomState(0)
    astronaut = skimage.data.astronaut().reshape(-1, 3) / 255.0
    yield "astronaut-colours k64", astronaut[rng.choice(len(astronaut), 100000, False)], 64
    yield "coffee-colours k16", skimage.data.coffee().reshape(-1, 3) / 255.0, 16
    yield "uniform-5d k100", np.random.RandomState(1).rand(50000, 5), 100
    X, _ = make_blobs(30000, n_features=10, centers=20, cluster_std=3.0, random_state=2)
    yield "overlapping-blobs 10d k20", X, 20
    X, _ = make_blobs(20000, n_features=2, centers=8, cluster_std=0.5, random_state=3)
    yield "separated-blobs 2d k8", X, 8
    yield "wine k8", StandardScaler().fit_transform(load_wine().data), 8
    yield "cancer k3", StandardScaler().fit_transform(load_breast_cancer().data), 3
    yield "digits k30", load_digits().data, 30
    patches = realdata.photo_patches(8)
    rows = np.random.RandomState(4).choice(len(patches), 20000, replace=False)
    yield "patches-8x8 k256", patches[rows], 256


def centres_of(which: str, X: np.ndarray, k: int, seed: int, overshoot: float) -> np.ndarray:
    """The centres of one fit: the engine at its defaults (and ``overshoot``), or
    scikit-learn's ``KMeans(n_init=10)``."""
    if which == "sklearn":
        from sklearn.cluster import KMeans

        return KMeans(k, n_init=10, random_state=seed).fit(X).cluster_centers_
    from rbfkm_engine import RBFKMeans

    return RBFKMeans(n_clusters=k, random_state=seed, overshoot=overshoot).fit(X).cluster_centers_


def inertia(X: np.ndarray, C: np.ndarray) -> float:
    """The inertia of ``C`` on ``X``, in float64, by blocks of rows."""
    Xd, Cd = torch.from_numpy(X).double(), torch.from_numpy(np.asarray(C)).double()
    total = 0.0
    for i in range(0, len(X), 20000):
        total += float(torch.cdist(Xd[i : i + 20000], Cd).square().min(1).values.sum())
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("which", choices=("engine", "sklearn"))
    parser.add_argument("--overshoot", type=float, default=1.0)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--only", default="", help="comma-separated words of the sets' names")
    args = parser.parse_args()
    torch.set_num_threads(2)
    threadpool_limits(2)
    wanted = [w for w in args.only.split(",") if w]
    for name, data, k in shapes():
        if wanted and not any(w in name for w in wanted):
            continue
        X = np.ascontiguousarray(data, dtype=np.float32)
        for seed in range(args.seeds):
            start = time.perf_counter()
            C = centres_of(args.which, X, k, seed, args.overshoot)
            wall = time.perf_counter() - start
            row = {"set": name, "seed": seed, "inertia": inertia(X, C), "wall": wall}
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
