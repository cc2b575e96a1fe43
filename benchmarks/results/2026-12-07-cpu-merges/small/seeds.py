"""Held-out shapes of ``results/2026-12-07-cpu-search-budget/heldout/heldout.py`` (its nine
and its seven new ones) by name, at the seeds ``first`` to ``last - 1``: one JSON line
per fit as that script writes them; the engine measured is the one first on
``PYTHONPATH``.

    cd /tmp && PYTHONPATH=<tree> python <this file> \
        "astronaut-colours k64,motorcycle-colours k48" 0 20
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
from threadpoolctl import threadpool_limits

HELDOUT = Path(__file__).resolve().parents[2] / "2026-12-07-cpu-search-budget" / "heldout"


def main() -> None:
    names, first, last = sys.argv[1].split(","), int(sys.argv[2]), int(sys.argv[3])
    spec = importlib.util.spec_from_file_location("heldout_new", HELDOUT / "heldout.py")
    assert spec is not None and spec.loader is not None
    heldout = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(heldout)
    earlier = heldout.earlier  # the nine shapes, the fits and the judge
    torch.set_num_threads(2)
    threadpool_limits(2)
    for shapes in (earlier.shapes, heldout.new_shapes):
        for name, data, k in shapes():
            if name not in names:
                continue
            X = np.ascontiguousarray(data, dtype=np.float32)
            for seed in range(first, last):
                started = time.perf_counter()
                C = earlier.centres_of("engine", X, k, seed, 1.0)
                wall = time.perf_counter() - started
                row = {"set": name, "seed": seed, "inertia": earlier.inertia(X, C), "wall": wall}
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
