"""The memory bound of a fit: its terms, and a real fit's peak under it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rbfkm_engine.memory import covariance_fits, fit_memory


def test_covariance_fits_only_when_it_is_no_larger_than_x() -> None:
    assert covariance_fits(100, 100) and covariance_fits(1000, 8)
    assert not covariance_fits(3, 8000) and not covariance_fits(2, 100_000)


def test_the_bound_grows_with_every_dimension_and_knows_the_covariance() -> None:
    base = fit_memory(10_000, 16, 32).total
    assert fit_memory(20_000, 16, 32).total > base
    assert fit_memory(10_000, 32, 32).total > base
    assert fit_memory(10_000, 16, 64).total > base
    assert fit_memory(10_000, 16, 32, dtype="float64").total > base
    assert fit_memory(10_000, 16, 32).covariance == 16 * 16 * 8
    assert fit_memory(10_000, 16, 32, assignment="hard").covariance == 0
    wide = fit_memory(2, 100_000, 2)
    assert wide.covariance < 64 << 20 and wide.total < 96 << 20  # no (d, d) matrix: 80 GB


def test_memory_imports_without_torch() -> None:
    code = "import sys, rbfkm_engine.memory; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


MEASURE = """
import gc, resource, sys, warnings
import numpy as np
from rbfkm_engine import RBFKMeans
from rbfkm_engine.memory import fit_memory
n, d, k, assignment, offset, overshoot = {args}
X = np.random.default_rng(0).normal(size=(n, d)) + offset  # float64: the fit converts it
warnings.simplefilter("ignore")
RBFKMeans(2, assignment=assignment, random_state=0, device="cpu", max_iter=3).fit(X[:50])
gc.collect()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
RBFKMeans(k, assignment=assignment, overshoot=overshoot, random_state=0, device="cpu").fit(X)
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
print(grown, fit_memory(n, d, k, assignment=assignment, overshoot=overshoot).total)
"""


@pytest.mark.parametrize(
    "args",
    [
        (100_000, 32, 64, "entmax15", 0.0, 1.0),
        (50_000, 8, 50, "entmax15", 1e3, 1.0),  # far from the origin: a centred copy
        (2_000, 4_000, 16, "softmax", 0.0, 1.0),  # wider than long: no covariance
        (2, 100_000, 2, "entmax15", 0.0, 1.0),  # Lanczos's vectors, no 80 GB covariance
        (100_000, 32, 64, "hard", 0.0, 1.0),
        (100_000, 3, 256, "entmax15", 0.0, 2.0),  # annealed past k: 512 cells, their fit
    ],
)
def test_a_fits_peak_memory_stays_under_the_bound(args: tuple) -> None:
    # glibc raises its mmap threshold to the size of each mapped block freed, and later
    # blocks of that size stay in the heap once freed: the peak resident size then
    # measures what the allocator keeps, which changes from run to run with the order of
    # the threads' blocks (45 to 100 MB for a fit whose blocks peak at 24 MB, 2 x 100 000).
    # A fixed threshold returns every large block when freed, so the peak is the fit's.
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(128 << 10)}
    out = subprocess.run(
        [sys.executable, "-c", MEASURE.format(args=args)],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    ).stdout
    grown, bound = (int(value) for value in out.split())
    assert grown <= bound, (grown / 2**20, bound / 2**20)


def test_threads_hold_their_own_blocks_and_shares() -> None:
    one = fit_memory(100_000, 16, 64)
    four = fit_memory(100_000, 16, 64, threads=4)
    assert four.blocks == 5 * one.blocks  # four pool threads and the caller's
    assert four.centres > one.centres
    assert fit_memory(100_000, 16, 64, threads=4, device="cuda") == fit_memory(
        100_000, 16, 64, device="cuda"
    )
