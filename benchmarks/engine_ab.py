"""Two versions of the engine side by side: fit times and inertia, interleaved.

For a change that should not move the engine's speed (a restructuring), or to measure one
that should. Each version is a folder holding an ``rbfkm_engine`` package (a checkout, or
``git archive REV rbfkm_engine | tar -x -C DIR``); every round runs each version in its
own process, alternating, so that load on the machine falls on both alike.

    mkdir -p /tmp/old && git archive HEAD~5 rbfkm_engine | tar -x -C /tmp/old
    python benchmarks/engine_ab.py /tmp/old . --rounds 2

Prints, per data set and map, the median fit time of each version over its runs, the
ratio new / old, and both inertias (the same seeds: equal when the change keeps results).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: (data set, k, fits per round); the data come from benchmarks/common.py.
SETS = (("digits", 10, 15), ("hard-50k", 50, 3), ("blobs-100k", 64, 2))
ASSIGNMENTS = ("hard", "entmax15")


def load(name: str):
    """The named benchmark data set's X."""
    import common

    if name == "digits":
        return common.load_digits_dataset().X
    if name == "hard-50k":
        return common.make_hard_dataset(50_000, d=8, k=50, seed=3).X
    return common.make_blobs_dataset(100_000, 32, 64, seed=1).X


def measure(root: str, threads: int) -> None:
    """Child process: fit every set with the engine under ``root``; print JSON lines."""
    sys.path[:0] = [root, str(HERE)]
    import common

    common.pin_threads(threads)
    import rbfkm_engine
    from rbfkm_engine import RBFKMeans

    assert Path(rbfkm_engine.__file__).resolve().is_relative_to(Path(root).resolve())
    warnings.simplefilter("ignore")
    for name, k, fits in SETS:
        X = load(name)
        for assignment in ASSIGNMENTS:
            for seed in range(fits):
                start = time.perf_counter()
                model = RBFKMeans(k, assignment=assignment, random_state=seed, device="cpu")
                model.fit(X)
                seconds = time.perf_counter() - start
                row = {"set": name, "map": assignment, "seed": seed, "s": seconds}
                print(json.dumps({**row, "inertia": model.inertia_}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", help="folder holding the old rbfkm_engine")
    parser.add_argument("new", help="folder holding the new rbfkm_engine")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        measure(args.child, args.threads)
        return
    runs: dict[tuple[str, str, str], list[float]] = {}
    inertia: dict[tuple[str, str, str, int], float] = {}
    for _ in range(args.rounds):
        for label, root in (("old", args.old), ("new", args.new)):
            command = [sys.executable, __file__, "x", "y", "--threads", str(args.threads)]
            out = subprocess.run(
                [*command, "--child", root], capture_output=True, text=True, check=True
            ).stdout
            for line in out.splitlines():
                row = json.loads(line)
                runs.setdefault((row["set"], row["map"], label), []).append(row["s"])
                inertia[(row["set"], row["map"], label, row["seed"])] = row["inertia"]
    print(f"{'set':<11} {'map':<9} {'old s':>8} {'new s':>8} {'new/old':>8}  inertia equal")
    for name, _, _ in SETS:
        for assignment in ASSIGNMENTS:
            old = statistics.median(runs[(name, assignment, "old")])
            new = statistics.median(runs[(name, assignment, "new")])
            seeds = {key[3] for key in inertia if key[:2] == (name, assignment)}
            same = all(
                inertia[(name, assignment, "old", s)] == inertia[(name, assignment, "new", s)]
                for s in seeds
            )
            print(f"{name:<11} {assignment:<9} {old:8.4f} {new:8.4f} {new / old:8.3f}  {same}")


if __name__ == "__main__":
    main()
