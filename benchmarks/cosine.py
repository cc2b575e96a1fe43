"""Spherical K-Means: ``RBFKMeans(metric="cosine")`` against two spherical baselines.

- ``sklearn-normalised``: ``KMeans`` (k-means++, ``n_init`` 1 and 10) on the normalised
  rows, its centres renormalised afterwards (the usual stand-in for spherical K-Means);
- ``spherical-lloyd``: plain spherical Lloyd (Dhillon and Modha, 2001) from k-means++ on the
  normalised rows: nearest centre by cosine, each centre its cluster's mean direction, until
  the labels stop changing.

Data: embedding-like sets, mixtures of directions in 64 and 256 dimensions with a spread of
concentrations and cluster sizes, rows of random length (only directions count); and the
digits, as 64-dimensional vectors. Every method is scored the same way: the cosine
inertia ``sum_i (1 - cos(x_i, c_{l_i}))`` of its centres (labels re-derived by nearest
direction), the adjusted Rand index against the true labels, and the fit time. Prints a
markdown table, the best of ``--repeats`` timings.

    python benchmarks/cosine.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from sklearn.cluster import KMeans
from sklearn.datasets import load_digits
from sklearn.metrics import adjusted_rand_score

from rbfkm_engine import RBFKMeans


def unit(X: np.ndarray) -> np.ndarray:
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def directions(n: int, d: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows around ``k`` random directions: per cluster a concentration and a size drawn
    at random, then a random length per row (as embeddings before normalisation)."""
    rng = np.random.RandomState(seed)
    means = unit(rng.randn(k, d))
    share = rng.dirichlet(np.full(k, 2.0))
    y = rng.choice(k, size=n, p=share)
    spread = rng.uniform(0.6, 1.4, size=k) / np.sqrt(d)
    X = means[y] + spread[y, None] * rng.randn(n, d) * 1.5
    return X * rng.uniform(0.5, 3.0, size=(n, 1)), y


def cosine_inertia(U: np.ndarray, C: np.ndarray) -> float:
    return float((1.0 - (U @ unit(C).T).max(axis=1)).sum())


def spherical_lloyd(U: np.ndarray, k: int, seed: int, max_iter: int = 300) -> np.ndarray:
    from sklearn.cluster import kmeans_plusplus

    C, _ = kmeans_plusplus(U, k, random_state=seed)
    C = unit(C)
    labels = None
    for _ in range(max_iter):
        new = (U @ C.T).argmax(axis=1)
        if labels is not None and np.array_equal(new, labels):
            break
        labels = new
        sums = np.zeros_like(C)
        np.add.at(sums, labels, U)
        empty = np.linalg.norm(sums, axis=1) == 0
        sums[empty] = C[empty]
        C = unit(sums)
    return C


def methods(k: int, seed: int) -> dict:
    return {
        "rbfkm-cosine": lambda X, U: (
            RBFKMeans(k, metric="cosine", random_state=seed, device="cpu").fit(X).cluster_centers_
        ),
        "sklearn-normalised n_init=1": lambda X, U: (
            KMeans(k, n_init=1, random_state=seed).fit(U).cluster_centers_
        ),
        "sklearn-normalised n_init=10": lambda X, U: (
            KMeans(k, n_init=10, random_state=seed).fit(U).cluster_centers_
        ),
        "spherical-lloyd": lambda X, U: spherical_lloyd(U, k, seed),
    }


def data_sets() -> dict[str, tuple[np.ndarray, np.ndarray, int]]:
    sets = {}
    for n, d, k, seed in ((20_000, 64, 20, 0), (20_000, 256, 50, 1)):
        X, y = directions(n, d, k, seed)
        sets[f"directions n={n} d={d} k={k}"] = (X, y, k)
    digits = load_digits()
    sets["digits (64-d) k=10"] = (digits.data + 1e-3, digits.target, 10)
    return sets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    print("| data | method | cosine inertia (mean of seeds) | ARI | time (s) |")
    print("|---|---|---|---|---|")
    for name, (X, y, k) in data_sets().items():
        U = unit(X)
        rows: dict[str, list[tuple[float, float, float]]] = {}
        for seed in range(args.seeds):
            for method, fit in methods(k, seed).items():
                best = np.inf
                for _ in range(args.repeats):
                    start = time.perf_counter()
                    C = fit(X, U)
                    best = min(best, time.perf_counter() - start)
                labels = (U @ unit(C).T).argmax(axis=1)
                score = (cosine_inertia(U, C), adjusted_rand_score(y, labels), best)
                rows.setdefault(method, []).append(score)
        for method, scores in rows.items():
            inertia, ari, seconds = np.mean(scores, axis=0)
            print(f"| {name} | {method} | {inertia:.2f} | {ari:.3f} | {seconds:.3f} |")


if __name__ == "__main__":
    main()
