"""Which iris species the clusters hold at k = 3: at the annealing's Lloyd fixed point
and at the fit's end (``python iris3.py``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.datasets import load_iris

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import realdata

from rbfkm_engine import RBFKMeans, solver


def species(labels: np.ndarray, target: np.ndarray) -> list[list[int]]:
    return [np.bincount(target[labels == j], minlength=3).tolist() for j in range(3)]


def main() -> None:
    X = realdata.tabular_dataset("iris", 3).X.astype(np.float32)
    target = load_iris().target
    search = solver.search

    def reporting_search(ctx: Any, C: torch.Tensor) -> torch.Tensor:
        inertia = ctx.passes.hard_labels(C)
        print("annealed", round(inertia, 3), species(ctx.passes.labels.numpy(), target))
        return search(ctx, C)

    solver.search = reporting_search
    for seed in range(3):
        model = RBFKMeans(n_clusters=3, random_state=seed).fit(X)
        print("end", round(model.inertia_, 3), species(model.labels_, target))


if __name__ == "__main__":
    main()
