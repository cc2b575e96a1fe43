"""The engine and scikit-learn's KMeans on a quiet and on an oversubscribed machine.

Each round fits both on the same data with the machine quiet, then again while ``--hogs``
busy processes (one per usable core by default: 2x oversubscription for fits that use
every core) compete for the cores, alternating so that load from elsewhere falls on both
alike. Prints, per data set and method, the median wall time quiet and loaded and their
ratio, the slowdown, side by side; then whether the engine's slowdown is within
scikit-learn's.

    python benchmarks/oversubscription.py                  # every core (torch's default)
    python benchmarks/oversubscription.py --threads 1      # one thread each
    python benchmarks/oversubscription.py --load matmul    # hogs that multiply matrices

Both methods use ``--threads`` threads (default: the usable cores, cgroup quota included,
as a worker alone on the machine gets; see ``service/threads.py``). The data are the
benchmarks' own (``common.py``): scikit-learn's digits (real data, several fits per
timing so that it lasts) and the hard 50 000 x 16 set. The figures depend on the machine's
scheduler and on what else runs: repeat, and read the medians.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

import common  # noqa: E402

from service.threads import usable_cores  # noqa: E402

#: What a hog does until it is stopped.
LOADS = ("spin", "matmul")


def _hog(kind: str) -> None:
    """A competing process: a pure busy loop, or single-threaded matrix products."""
    if kind == "matmul":
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
        a = np.random.default_rng(0).random((256, 256))
        while True:
            a = a @ a
            a /= np.abs(a).max()
    while True:
        pass


@contextmanager
def hogs(count: int, kind: str) -> Iterator[list[BaseProcess]]:
    """``count`` hog processes for the duration of the block (killed after it)."""
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_hog, args=(kind,), daemon=True) for _ in range(count)]
    for process in processes:
        process.start()
    try:
        time.sleep(1.0)  # let them start and take their cores
        yield processes
    finally:
        for process in processes:
            process.kill()
        for process in processes:
            process.join()


def fitters(k: int, seed: int) -> dict[str, Callable[[np.ndarray], Any]]:
    """The methods timed: the engine (hard and entmax15 maps) and scikit-learn's KMeans."""
    from sklearn.cluster import KMeans

    from rbfkm_engine import RBFKMeans

    return {
        "rbfkm-hard": lambda X: RBFKMeans(
            k, assignment="hard", random_state=seed, device="cpu"
        ).fit(X),
        "rbfkm-entmax15": lambda X: RBFKMeans(
            k, assignment="entmax15", random_state=seed, device="cpu"
        ).fit(X),
        "sklearn": lambda X: KMeans(k, n_init=1, random_state=seed).fit(X),
    }


def datasets(quick: bool) -> list[tuple[common.Dataset, int]]:
    """(data set, fits per timing)."""
    if quick:
        return [(common.make_hard_dataset(2_000, d=4, k=5, seed=3), 1)]
    return [
        (common.load_digits_dataset(), 10),
        (common.make_hard_dataset(50_000, d=16, k=50, seed=3), 1),
    ]


def time_fits(fit: Callable[[np.ndarray], Any], X: np.ndarray, fits: int) -> float:
    """Seconds for ``fits`` fits of ``X``."""
    start = time.perf_counter()
    for _ in range(fits):
        fit(X)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="quiet/loaded rounds (median)")
    parser.add_argument("--threads", type=int, default=None, help="threads of every method")
    parser.add_argument("--hogs", type=int, default=None, help="competing processes")
    parser.add_argument("--load", choices=LOADS, default="spin", help="what the hogs do")
    parser.add_argument("--only", default=None, help="comma-separated methods to time")
    parser.add_argument("--quick", action="store_true", help="tiny data, for the smoke test")
    args = parser.parse_args(argv)
    cores = usable_cores()
    threads = args.threads or cores
    n_hogs = cores if args.hogs is None else args.hogs
    common.set_thread_env(threads)
    limiter = common.pin_threads(threads)
    warnings.simplefilter("ignore")
    print(
        f"usable cores {cores}, threads per fit {threads}, {n_hogs} '{args.load}' hogs "
        f"({(threads + n_hogs) / cores:.1f}x the cores), {args.rounds} rounds, "
        f"load average at start {os.getloadavg()[0]:.2f}"
    )
    rows: list[list[str]] = []
    verdicts: list[str] = []
    for data, fits in datasets(args.quick):
        methods = fitters(data.k, seed=0)
        if args.only:
            methods = {name: fit for name, fit in methods.items() if name in args.only.split(",")}
        small = data.X[: max(10 * data.k, 500)]
        for fit in methods.values():  # warm-up: imports, pools, allocator
            fit(small)
        quiet: dict[str, list[float]] = {name: [] for name in methods}
        loaded: dict[str, list[float]] = {name: [] for name in methods}
        for _ in range(args.rounds):
            for name, fit in methods.items():
                quiet[name].append(time_fits(fit, data.X, fits))
            with hogs(n_hogs, args.load):
                for name, fit in methods.items():
                    loaded[name].append(time_fits(fit, data.X, fits))
        slowdown: dict[str, float] = {}
        for name in methods:
            q, lo = statistics.median(quiet[name]), statistics.median(loaded[name])
            slowdown[name] = lo / q
            spread = f"{min(loaded[name]):.3f}-{max(loaded[name]):.3f}"
            rows.append(
                [data.name, name, f"{q:.3f}", f"{lo:.3f}", spread, f"{slowdown[name]:.2f}x"]
            )
        if "sklearn" in slowdown:
            for name in methods:
                if name == "sklearn":
                    continue
                ratio = slowdown[name] / slowdown["sklearn"]
                verdict = "within" if ratio <= 1.0 else "WORSE than"
                verdicts.append(
                    f"{data.name} {name}: slowdown {slowdown[name]:.2f}x, {verdict} "
                    f"scikit-learn's {slowdown['sklearn']:.2f}x (ratio {ratio:.2f})"
                )
    headers = ["data", "method", "quiet s", "loaded s", "loaded min-max", "slowdown"]
    print(common.format_table(headers, rows))
    print(f"load average at end {os.getloadavg()[0]:.2f}")
    for line in verdicts:
        print(line)
    del limiter
    return 0


if __name__ == "__main__":
    sys.exit(main())
