"""colours4096's 200 000 colours at ``k = 16 384`` (about 12 rows a cell), one fit per
method with its defaults from one seed: the engine's default entmax15 fit, faiss (its
default 25 iterations, trained on every point) and scikit-learn ``n_init=1``, each judged
by the benchmarks' one judge, two threads each. One JSON line per fit; the engine measured
is the one first on ``PYTHONPATH`` (run from outside the repository).

    cd /tmp && PYTHONPATH=<tree> python <this file> rbfkm,faiss,sklearn-n1 > k16384-peers.jsonl
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/
import common

common.set_thread_env(2)

import numpy as np  # noqa: E402
import realdata  # noqa: E402

RUNNERS = {
    "rbfkm": common._run_rbfkm("entmax15"),
    "faiss": common.faiss_runner(),
    "sklearn-n1": common._run_sklearn(1),
}


def main() -> None:
    pools = common.pin_threads(2)
    X = realdata.load("colours4096").X.astype(np.float32)
    for name in sys.argv[1].split(","):
        started = time.perf_counter()
        out = RUNNERS[name](X, 16_384, common.RunSpec("quality", seed=0))
        wall = time.perf_counter() - started
        judged = common.evaluate_centroids(X, out.centroids, chunk_rows=4096)  # 0.5 GB blocks
        line = {"method": name, "inertia": judged["inertia"], "n_empty": judged["n_empty"]}
        line.update(wall=wall, n_iter=out.n_iter, load=os.getloadavg()[0], **out.extra)
        print(json.dumps(line), flush=True)
    del pools


if __name__ == "__main__":
    main()
