"""One default entmax15 fit of colours4096's 200 000 colours at ``k = 16 384`` (about 12
rows a cell): wall, inertia (the engine's ``inertia_``) and the annealed fixed point over
the end; the engine measured is the one first on ``PYTHONPATH``.

    cd /tmp && PYTHONPATH=<tree> python <this file> > k16384.jsonl
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
    torch.set_num_threads(2)
    X = realdata.load("colours4096").X.astype(np.float32)
    started = time.perf_counter()
    model = RBFKMeans(n_clusters=16_384, random_state=0).fit(X)
    wall = time.perf_counter() - started
    line = {"set": "colours k16384", "seed": 0, "inertia": model.inertia_, "wall": wall}
    line["ann_end"] = common.annealed_inertia(model.history_) / model.inertia_
    line["n_iter"] = model.n_iter_
    print(json.dumps(line))


if __name__ == "__main__":
    main()
