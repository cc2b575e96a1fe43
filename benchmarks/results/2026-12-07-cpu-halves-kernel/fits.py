"""End inertia, wall and annealed/end of default entmax15 fits on real sets, one JSON line
per fit; the engine measured is the one first on ``PYTHONPATH`` (run from outside the
repository). ``ann_end``: the Lloyd fixed point annealing reached over the end;
``inertia``: the centres' by the benchmarks' one judge (float64), ``end`` the engine's own.

    cd /tmp && PYTHONPATH=<tree> python <this file> colours4096 1
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/
import common
import realdata

from rbfkm_engine import RBFKMeans


def main() -> None:
    keys, seeds = sys.argv[1].split(","), int(sys.argv[2])
    torch.set_num_threads(2)
    for key in keys:
        ds = realdata.load(key)
        X = ds.X.astype(np.float32)
        RBFKMeans(n_clusters=ds.k, random_state=99, max_iter=5).fit(X[: max(2000, 2 * ds.k)])
        for seed in range(seeds):
            started = time.perf_counter()
            model = RBFKMeans(n_clusters=ds.k, random_state=seed).fit(X)
            wall = time.perf_counter() - started
            line = {"set": key, "seed": seed, "end": model.inertia_, "wall": wall}
            line["ann_end"] = common.annealed_inertia(model.history_) / model.inertia_
            line["n_iter"] = model.n_iter_
            line["inertia"] = common.evaluate_centroids(X, model.cluster_centers_)["inertia"]
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
