"""Hard Lloyd with and without neighbour lists, side by side, on data of several shapes.

A warm bounded Lloyd pass relabels a row whose bounds fail from its old centre's list of
nearest centres where the triangle inequality decides it (docs/algorithm.md, "Hard passes
on the CPU"), and keeps the lists only while they cut the candidates per relabelled row
enough to pay (``rbfkm_engine.passes.NeighbourUse``). This script times the same fit
(``assignment="hard"``, the same random rows as initial centres, ``tol=0``) three ways,
interleaved, best of ``--repeats``:

- ``lists``: lists at every warm pass of the fit (the policy's choice forced on);
- ``none``: no lists (every relabelled row scans all ``k`` centres);
- ``policy``: the engine's default;

and prints ms per iteration, ``lists / none`` and ``policy / best of the two``, with the
share of relabelled rows the lists decided and the candidates they computed per decided
row. The shapes: the real colour sets of ``compare.py`` (3 features, k = 256 and 4 096)
and blobs of 8 to 32 features with two centres per blob, k = 128 to 2 048.

    python benchmarks/neighbour_lists.py [--repeats 3] [--iters 20]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from sklearn.datasets import make_blobs

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

import common  # noqa: E402
import realdata  # noqa: E402

from rbfkm_engine import RBFKMeans, passes  # noqa: E402

#: (name, rows, features, k): synthetic shapes, two centres per blob.
BLOBS = [
    ("blobs", 100_000, 16, 128),
    ("blobs", 100_000, 16, 256),
    ("blobs", 60_000, 24, 384),
    ("blobs", 100_000, 32, 512),
    ("blobs", 200_000, 8, 1024),
    ("blobs", 150_000, 12, 2048),
]
REAL = ["colours256", "colours4096"]


@contextmanager
def lists(mode: str) -> Iterator[list[tuple[int, int, int]]]:
    """Neighbour lists as ``mode`` says, and the counts of the passes that made them."""
    seen: list[tuple[int, int, int]] = []
    saved = passes.NEIGHBOUR_MIN_K, passes.NeighbourUse.record, passes.NeighbourUse.wanted
    record = passes.NeighbourUse.record

    def counted(self: passes.NeighbourUse, k: int, *counts: int, made: int) -> None:
        seen.append(counts)
        record(self, k, *counts, made=made)

    passes.NeighbourUse.record = counted  # type: ignore[method-assign]
    if mode == "none":
        passes.NEIGHBOUR_MIN_K = 1 << 62
    elif mode == "lists":
        passes.NEIGHBOUR_MIN_K = 2
        passes.NeighbourUse.wanted = lambda self: True  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        passes.NEIGHBOUR_MIN_K, passes.NeighbourUse.record, passes.NeighbourUse.wanted = saved


def data(name: str, n: int, d: int, k: int) -> tuple[str, np.ndarray, int]:
    if name == "blobs":
        X, _ = make_blobs(n, n_features=d, centers=k // 2, cluster_std=3.0, random_state=0)
        return f"blobs {n} x {d}, k = {k}", X.astype(np.float32), k
    ds = realdata.load(name, False)
    X = np.ascontiguousarray(ds.X, dtype=np.float32)
    return f"{name} {X.shape[0]} x {X.shape[1]}, k = {ds.k}", X, ds.k


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # the fits stop at max_iter on purpose
    common.set_thread_env(args.threads)
    limiter = common.pin_threads(args.threads)  # noqa: F841 (held for the run)
    cases = [data(name, 0, 0, 0) for name in REAL] + [data(*shape) for shape in BLOBS]
    load_start = os.getloadavg()[0]
    print(
        "| data | lists ms | none ms | policy ms | lists / none | policy / best "
        "| decided | candidates |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for label, X, k in cases:
        iters = 10 if k >= 4096 else args.iters
        C0 = X[np.random.default_rng(0).choice(X.shape[0], k, replace=False)]
        best = {"lists": np.inf, "none": np.inf, "policy": np.inf}
        counts: list[tuple[int, int, int]] = []
        for _ in range(args.repeats):
            for mode in best:
                with lists(mode) as seen:
                    model = RBFKMeans(k, assignment="hard", init=C0, max_iter=iters, tol=0.0)
                    start = time.perf_counter()
                    model.fit(X)
                    wall = time.perf_counter() - start
                best[mode] = min(best[mode], 1000 * wall / iters)
                counts = seen if mode == "lists" else counts
        relabelled, decided, scanned = (sum(c[i] for c in counts) for i in range(3))
        print(
            f"| {label} | {best['lists']:.2f} | {best['none']:.2f} | {best['policy']:.2f} "
            f"| {best['lists'] / best['none']:.2f} "
            f"| {best['policy'] / min(best['lists'], best['none']):.2f} "
            f"| {decided / max(relabelled, 1):.2f} | {scanned / max(decided, 1):.1f} |",
            flush=True,
        )
    print(f"\nload average at start {load_start:.2f}, at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
