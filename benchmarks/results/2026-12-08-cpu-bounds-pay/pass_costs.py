"""A Lloyd pass with Hamerly's bounds against one without, at the same centres, pass by pass.

Hard fits from the same random rows (20 iterations, tol 0) run three times each with the
bounds kept at every pass and three times without them, alternately, on one thread; the
labels are the same either way, so pass i of each run is at the same centres. Prints, per
warm pass, the fraction of rows the bounds failed to keep and the median time of the pass
with bounds over the one without, and what ``BoundsUse`` decides from the pass's counts.

    python pass_costs.py hard colours colours256 blobs100k
"""

from __future__ import annotations

import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/
import common
import compare

common.pin_threads(1)
warnings.simplefilter("ignore")

from rbfkm_engine import RBFKMeans, passes  # noqa: E402
from rbfkm_engine.bounds import BoundsUse  # noqa: E402


def run(ds: common.Dataset, bounded: bool) -> tuple[list[float], list[tuple]]:
    """One fit: each pass's seconds, and each warm bounded pass's (index, counts)."""
    times: list[float] = []
    counts: list[tuple] = []
    fused = passes.Workspace._fused_pass
    record, wanted = BoundsUse.record, BoundsUse.wanted

    def timed(self, *args, **kwargs):
        started = time.perf_counter()
        out = fused(self, *args, **kwargs)
        times.append(time.perf_counter() - started)
        return out

    def recorded(self, rows, width, d, pass_counts):
        counts.append((len(times), rows, width, d, pass_counts))

    passes.Workspace._fused_pass = timed
    BoundsUse.record = recorded
    BoundsUse.wanted = lambda self: bounded
    try:
        init = common.initial_centroids(ds.X, ds.k, 0)
        RBFKMeans(ds.k, assignment="hard", init=init, max_iter=20, n_init=1, tol=0.0).fit(ds.X)
    finally:
        passes.Workspace._fused_pass = fused
        BoundsUse.record, BoundsUse.wanted = record, wanted
    return times, counts


def main() -> None:
    for name in sys.argv[1:]:
        ds = compare.build_dataset(common, name, quick=False)
        runs: dict[bool, list[list[float]]] = {True: [], False: []}
        for _ in range(3):
            for bounded in (True, False):
                times, counts = run(ds, bounded)
                runs[bounded].append(times)
                if bounded:
                    seen = counts
        with_b = [statistics.median(t) for t in zip(*runs[True], strict=True)]
        without = [statistics.median(t) for t in zip(*runs[False], strict=True)]
        n, d = ds.X.shape
        plain = 1e3 * statistics.median(without)
        print(f"{name} ({n} x {d}, k {ds.k}): a pass without bounds {plain:.2f} ms")
        cells = []
        for index, rows, width, dd, pass_counts in seen:
            use = BoundsUse()
            use.record(rows, width, dd, pass_counts)
            keep = "k" if use.wanted() else "-"
            ratio = with_b[index] / without[index]  # the pass records before it returns
            cells.append(f"{pass_counts[0] / rows:.2f}:{ratio:.2f}{keep}")
        print("  relabelled:with/without (k: BoundsUse keeps them)  " + " ".join(cells))


if __name__ == "__main__":
    main()
