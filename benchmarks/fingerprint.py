"""Fingerprints of fits at fixed seeds: run before and after a change meant to keep results.

Each line names a fit (data set, parameters, seed) and prints digests of its labels,
centres and history with its inertia and iteration count, so two runs compare with
``diff``. It exercises every path of a fit: the three maps, weights, an ``init`` array,
``n_init``, float64, data far from the origin (centred) and beyond float32's safe range
(scaled by a power of two), and the inference methods.

    python benchmarks/fingerprint.py > before.txt     # on the old code
    python benchmarks/fingerprint.py > after.txt      # on the new code
    diff before.txt after.txt                         # empty: the same results

``--quick`` leaves out the 100 000-row set; ``--full`` adds the benchmarks' hard set
(50 000 rows) and blobs 200k, every map (a few minutes). To fingerprint another version of
the engine, put its folder first on the path: ``PYTHONPATH=/tmp/old python ...`` (the
engine's location is printed to stderr).

torch's CPU GEMMs are MKL's, which picks its code path at run time (by memory alignment
and threads) and rounds the last bit differently from one run to the next: the same
program's ``transform`` digest changed in about one run in eight. So the script sets
``MKL_CBWR=COMPATIBLE`` (MKL's reproducible mode) unless it is set, before torch loads.
"""

from __future__ import annotations

import os

os.environ.setdefault("MKL_CBWR", "COMPATIBLE")

import argparse
import hashlib
import json
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common

from rbfkm_engine import RBFKMeans


def digest(array: Any) -> str:
    """A short digest of an array's bytes (exact: any change of a bit shows)."""
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()[:16]


def fingerprint(km: RBFKMeans, X: np.ndarray) -> str:
    """Digests of the fitted attributes and of the inference methods on ``X[:500]``."""
    head = X[:500]
    history = json.dumps(km.history_, sort_keys=True).encode()
    parts = {
        "labels": digest(km.labels_),
        "centres": digest(km.cluster_centers_),
        "history": hashlib.sha256(history).hexdigest()[:16],
        "inertia": repr(km.inertia_),
        "n_iter": str(km.n_iter_),
        "sigma": repr(km.sigma_),
        "predict": digest(km.predict(head)),
        "soft": digest(km.soft_assign(head).toarray()),
        "transform": digest(km.transform(head)),
    }
    return " ".join(f"{key}={value}" for key, value in parts.items())


def cases(quick: bool, full: bool) -> Iterator[tuple[str, np.ndarray, dict[str, Any], Any]]:
    """(name, X, parameters, sample weight) of every fit to fingerprint."""
    digits = common.load_digits_dataset().X
    hard = common.make_hard_dataset(20_000, d=8, k=30, seed=3).X
    blobs = common.make_blobs_dataset(20_000, 16, 24, seed=1).X
    for assignment in ("hard", "softmax", "entmax15"):
        for seed in (0, 1, 2):
            yield (
                f"digits {assignment} seed={seed}",
                digits,
                {
                    "n_clusters": 10,
                    "assignment": assignment,
                    "random_state": seed,
                },
                None,
            )
        for seed in (0, 1):
            yield (
                f"hard {assignment} seed={seed}",
                hard,
                {
                    "n_clusters": 30,
                    "assignment": assignment,
                    "random_state": seed,
                },
                None,
            )
        yield (
            f"blobs {assignment}",
            blobs,
            {
                "n_clusters": 24,
                "assignment": assignment,
                "random_state": 0,
            },
            None,
        )
    rng = np.random.default_rng(0)
    weights = rng.uniform(0.0, 3.0, size=hard.shape[0])
    yield "hard entmax15 weighted", hard, {"n_clusters": 30, "random_state": 0}, weights
    yield (
        "hard softmax n_init=2",
        hard,
        {
            "n_clusters": 30,
            "assignment": "softmax",
            "n_init": 2,
            "init": "random",
            "random_state": 0,
        },
        None,
    )
    init = hard[rng.choice(hard.shape[0], 30, replace=False)]
    yield (
        "hard entmax15 init array",
        hard,
        {"n_clusters": 30, "init": init, "random_state": 0},
        None,
    )
    yield (
        "digits entmax15 float64",
        digits.astype(np.float64),
        {
            "n_clusters": 10,
            "dtype": "float64",
            "random_state": 0,
        },
        None,
    )
    yield "digits entmax15 offset 1e3", digits + 1e3, {"n_clusters": 10, "random_state": 0}, None
    yield "digits entmax15 scaled 1e20", digits * 1e20, {"n_clusters": 10, "random_state": 0}, None
    yield (
        "digits entmax15 fixed sigmas",
        digits,
        {
            "n_clusters": 10,
            "sigma0": 5e4,
            "sigma_min": 10.0,
            "cooling": 0.5,
            "random_state": 0,
        },
        None,
    )
    yield (
        "digits hard max_iter=3",
        digits,
        {
            "n_clusters": 10,
            "assignment": "hard",
            "max_iter": 3,
            "random_state": 0,
        },
        None,
    )
    if full:
        yield from benchmark_sets()
    if not quick:
        big = common.make_blobs_dataset(100_000, 32, 64, seed=1).X
        for assignment in ("hard", "entmax15"):
            yield (
                f"blobs100k {assignment}",
                big,
                {
                    "n_clusters": 64,
                    "assignment": assignment,
                    "random_state": 0,
                },
                None,
            )


def benchmark_sets() -> Iterator[tuple[str, np.ndarray, dict[str, Any], Any]]:
    """The benchmarks' hard set and blobs 200k (compare.py's), every map, seed 0."""
    sets = (
        common.make_hard_dataset(50_000, d=8, k=50, seed=3),
        common.make_blobs_dataset(200_000, 128, 256, seed=2),
    )
    for data in sets:
        for assignment in ("hard", "softmax", "entmax15"):
            params = {"n_clusters": data.k, "assignment": assignment, "random_state": 0}
            yield f"{data.name} {assignment}", data.X, params, None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="leave out the 100k-row set")
    parser.add_argument("--full", action="store_true", help="add hard 50k and blobs 200k")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    common.pin_threads(args.threads)
    print(f"engine: {Path(sys.modules['rbfkm_engine'].__file__).parent}", file=sys.stderr)
    for name, X, params, weights in cases(args.quick, args.full):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            km = RBFKMeans(device="cpu", **params).fit(X, sample_weight=weights)
        print(f"{name}: {fingerprint(km, X)}", flush=True)


if __name__ == "__main__":
    main()
