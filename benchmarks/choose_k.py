"""Choosing k: one annealed fit (``n_clusters="auto"``) against K scikit-learn fits.

For each data set with a known number of clusters, every method picks ``k`` in
``2 .. max_clusters``:

- ``rbfkm-<criterion>``: one ``RBFKMeans(n_clusters="auto")`` fit, ``k`` chosen from its
  annealing path by each criterion of :mod:`rbfkm_engine.choose_k` (silhouette, lifetime,
  BIC, and the gap statistic on the paths of the data and of its reference sets);
- ``sklearn-silhouette``: ``KMeans(k)`` for every ``k``, the best silhouette;
- ``sklearn-gap``: ``KMeans(k)`` for every ``k`` on the data and on ``B`` uniform reference
  sets in the box of the data's principal axes, the gap statistic's rule (Tibshirani,
  Walther and Hastie, 2001): the smallest ``k`` with ``gap(k) >= gap(k+1) - s(k+1)``.

Data: synthetic blobs of varied separation, size imbalance and dimension, and the labelled
sets shipped with scikit-learn (iris, wine, breast cancer, digits), standardised; nothing
is downloaded. Prints one table: the ``k`` each method chose (true ``k`` first), how many
sets each recovered exactly, and each method's summed fit time.

    python benchmarks/choose_k.py [--max-clusters 10] [--seeds 3] [--gap-refs 5]
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from sklearn import datasets
from sklearn.cluster import KMeans
from sklearn.metrics import silhouette_score
from sklearn.preprocessing import StandardScaler

from rbfkm_engine import RBFKMeans
from rbfkm_engine.choose_k import CRITERIA

SILHOUETTE_SAMPLE = 2000


def synthetic(seed: int) -> dict[str, tuple[np.ndarray, int]]:
    """Blobs of known k: separations, an imbalanced mixture, and dimensions."""
    rng = np.random.RandomState(seed)
    sets = {}
    for std in (0.5, 1.0, 2.0):
        X, _ = datasets.make_blobs(2000, n_features=2, centers=5, cluster_std=std, random_state=rng)
        sets[f"blobs k=5 d=2 std={std}"] = (X, 5)
    sizes = [1600, 200, 100, 60, 40]
    X, _ = datasets.make_blobs(sizes, n_features=2, cluster_std=1.0, random_state=rng)
    sets["imbalanced k=5 d=2"] = (X, 5)
    for d, k in ((10, 4), (50, 8)):
        X, _ = datasets.make_blobs(3000, n_features=d, centers=k, cluster_std=2.0, random_state=rng)
        sets[f"blobs k={k} d={d}"] = (X, k)
    return sets


def real() -> dict[str, tuple[np.ndarray, int]]:
    """The labelled sets scikit-learn ships, standardised."""
    sets = {}
    for name, load in (
        ("iris", datasets.load_iris),
        ("wine", datasets.load_wine),
        ("breast cancer", datasets.load_breast_cancer),
        ("digits", datasets.load_digits),
    ):
        bunch = load()
        X = StandardScaler().fit_transform(bunch.data)
        sets[name] = (X, len(np.unique(bunch.target)))
    return sets


def rbfkm_choices(
    X: np.ndarray, max_clusters: int, seed: int
) -> tuple[dict[str, int], dict[str, float]]:
    """The k each criterion picks from one annealed fit, and each fit's time (the path is
    the same for all; ``"gap"`` also fits its reference sets)."""
    picks, seconds = {}, {}
    for criterion in CRITERIA:
        km = RBFKMeans("auto", max_clusters=max_clusters, random_state=seed, device="cpu")
        km._k_criterion = criterion
        start = time.perf_counter()
        km.fit(X)
        seconds[f"rbfkm-{criterion}"] = time.perf_counter() - start
        picks[f"rbfkm-{criterion}"] = km.n_clusters_
    return picks, seconds


def sklearn_inertias(X: np.ndarray, ks: range, seed: int) -> tuple[list[float], list]:
    """Inertia and labels of ``KMeans(k)`` for every ``k``."""
    fits = [KMeans(k, n_init=1, random_state=seed).fit(X) for k in ks]
    return [fit.inertia_ for fit in fits], [fit.labels_ for fit in fits]


def sklearn_silhouette(X: np.ndarray, max_clusters: int, seed: int) -> tuple[int, float]:
    ks = range(2, max_clusters + 1)
    start = time.perf_counter()
    _, labels = sklearn_inertias(X, ks, seed)
    sample = min(SILHOUETTE_SAMPLE, X.shape[0])
    scores = [silhouette_score(X, lab, sample_size=sample, random_state=seed) for lab in labels]
    return ks[int(np.argmax(scores))], time.perf_counter() - start


def sklearn_gap(X: np.ndarray, max_clusters: int, seed: int, refs: int) -> tuple[int, float]:
    ks = range(2, max_clusters + 2)
    start = time.perf_counter()
    log_w = np.log(sklearn_inertias(X, ks, seed)[0])
    rng = np.random.RandomState(seed)
    mean = X.mean(axis=0)
    _, _, vt = np.linalg.svd(X - mean, full_matrices=False)
    Z = (X - mean) @ vt.T
    low, high = Z.min(axis=0), Z.max(axis=0)
    ref_logs = []
    for _ in range(refs):
        R = rng.uniform(low, high, size=Z.shape) @ vt + mean
        ref_logs.append(np.log(sklearn_inertias(R, ks, seed)[0]))
    ref_logs = np.array(ref_logs)
    gap = ref_logs.mean(axis=0) - log_w
    s = ref_logs.std(axis=0) * np.sqrt(1 + 1 / refs)
    chosen = ks[-2]
    for i in range(len(ks) - 1):
        if gap[i] >= gap[i + 1] - s[i + 1]:
            chosen = ks[i]
            break
    return chosen, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-clusters", type=int, default=10)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--gap-refs", type=int, default=5)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    methods = [f"rbfkm-{c}" for c in CRITERIA] + ["sklearn-silhouette", "sklearn-gap"]
    hits = dict.fromkeys(methods, 0)
    times = {f"rbfkm-{c}": 0.0 for c in CRITERIA}
    times |= {"sklearn-silhouette": 0.0, "sklearn-gap": 0.0}
    total = 0
    print("| set | seed | true k | " + " | ".join(methods) + " |")
    print("|---" * (len(methods) + 3) + "|")
    for seed in range(args.seeds):
        for name, (X, k) in {**synthetic(seed), **real()}.items():
            X = np.ascontiguousarray(X, dtype=np.float64)
            picks, seconds = rbfkm_choices(X, args.max_clusters, seed)
            for method, t in seconds.items():
                times[method] += t
            picks["sklearn-silhouette"], t = sklearn_silhouette(X, args.max_clusters, seed)
            times["sklearn-silhouette"] += t
            picks["sklearn-gap"], t = sklearn_gap(X, args.max_clusters, seed, args.gap_refs)
            times["sklearn-gap"] += t
            total += 1
            for method in methods:
                hits[method] += picks[method] == k
            row = " | ".join(str(picks[m]) for m in methods)
            print(f"| {name} | {seed} | {k} | {row} |", flush=True)
    print()
    print("| method | exact k | of |")
    print("|---|---|---|")
    for method in methods:
        print(f"| {method} | {hits[method]} | {total} |")
    print()
    for method, seconds in times.items():
        print(f"time {method}: {seconds:.2f} s")


if __name__ == "__main__":
    main()
