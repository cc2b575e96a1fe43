"""Inertia and last temperature of default entmax15 fits of the small tables (seeds
0-12), one JSON line per fit, by the engine first on ``PYTHONPATH``: two trees' lines
compare with ``cmp`` (the same fits, bit for bit).

    cd /tmp && PYTHONPATH=<tree> python <this file> iris5,iris12,wine5,wine12,... > <side>.jsonl
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # benchmarks/
import realdata

from rbfkm_engine import RBFKMeans


def main() -> None:
    torch.set_num_threads(2)
    for key in sys.argv[1].split(","):
        ds = realdata.load(key)
        X = ds.X.astype(np.float32)
        for seed in range(13):
            model = RBFKMeans(n_clusters=ds.k, random_state=seed).fit(X)
            line = {"set": key, "seed": seed, "inertia": model.inertia_, "sigma": model.sigma_}
            print(json.dumps(line))


if __name__ == "__main__":
    main()
