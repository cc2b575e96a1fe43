"""A fit's peak memory next to the engine's bound (``rbfkm_engine.memory.fit_memory``),
on long and on wide data, each fit in a process of its own.

    python benchmarks/memory.py                      # this checkout's engine
    PYTHONPATH=/tmp/old python benchmarks/memory.py  # another one (e.g. git archive REV)

Prints, per shape and map: the growth of the process's peak RSS during the fit (after the
libraries are loaded and warmed up), the bound, their ratio and the fit's wall time. An
engine without ``fit_memory`` prints no bound; a fit that fails prints its error.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile

#: (n, d, k, map, offset of the data from the origin); float64 data: the fit converts them.
SHAPES = (
    (100_000, 32, 64, "entmax15", 0.0),
    (100_000, 32, 64, "hard", 0.0),
    (50_000, 8, 50, "entmax15", 1e3),
    (20_000, 500, 100, "entmax15", 0.0),
    (2_000, 4_000, 16, "softmax", 0.0),
    (500, 20_000, 8, "entmax15", 0.0),
    (3, 8_000, 2, "entmax15", 0.0),
    (2, 100_000, 2, "entmax15", 0.0),
)

CHILD = """
import gc, json, resource, sys, time, warnings
import numpy as np
from rbfkm_engine import RBFKMeans
n, d, k, assignment, offset = {shape}
X = np.random.default_rng(0).normal(size=(n, d)) + offset
warnings.simplefilter("ignore")
RBFKMeans(2, assignment=assignment, random_state=0, device="cpu", max_iter=3).fit(X[:50])
gc.collect()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
start = time.perf_counter()
try:
    RBFKMeans(k, assignment=assignment, random_state=0, device="cpu").fit(X)
    error = None
except Exception as exc:
    error = f"{{type(exc).__name__}}: {{str(exc)[:80]}}"
seconds = time.perf_counter() - start
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
try:
    from rbfkm_engine.memory import fit_memory
    bound = fit_memory(n, d, k, assignment=assignment).total
except ImportError:
    bound = None
import rbfkm_engine
where = rbfkm_engine.__path__[0]
print(json.dumps({{"grown": grown, "bound": bound, "s": seconds, "error": error, "engine": where}}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit-gib", type=float, default=16.0, help="address-space cap")
    args = parser.parse_args()
    cap = int(args.limit_gib * 2**30)
    limit = f"import resource; resource.setrlimit(resource.RLIMIT_AS, ({cap}, {cap}))\n"
    print(f"{'n x d, k':<20} {'map':<9} {'peak MiB':>9} {'bound MiB':>10} {'ratio':>6} {'s':>7}")
    engines = set()
    for shape in SHAPES:
        n, d, k, assignment, _ = shape
        code = limit + CHILD.format(shape=shape)
        # Not from the checkout's root: `python -c` puts the working directory first on the
        # path, which would shadow an engine given by PYTHONPATH.
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, cwd=tempfile.gettempdir()
        )
        if proc.returncode != 0:
            print(f"{n} x {d}, {k}: the process failed: {proc.stderr.strip()[-120:]}")
            continue
        row = json.loads(proc.stdout.splitlines()[-1])
        engines.add(row["engine"])
        grown, bound = row["grown"] / 2**20, row["bound"]
        bound_text = "-" if bound is None else f"{bound / 2**20:.1f}"
        ratio = "-" if bound is None else f"{row['grown'] / bound:.2f}"
        label = f"{n} x {d}, {k}"
        line = f"{label:<20} {assignment:<9} {grown:9.1f} {bound_text:>10} {ratio:>6}"
        print(f"{line} {row['s']:7.2f}" + (f"  {row['error']}" if row["error"] else ""))
    print(f"engine: {', '.join(sorted(engines))}")


if __name__ == "__main__":
    main()
