"""Held-out shapes for the local search's budget: a scratch script kept with its results.

The nine shapes of ``../../2026-12-07-cpu-overshoot/heldout/heldout.py`` (whose uniform
5-d shape then served to choose the search's budget) and, with ``--new``, seven more no
choice was made on. Each line is one fit as JSON (set, seed, inertia recomputed in float64,
wall seconds), two threads for every library; the engine measured is the one imported
(put a tree on ``PYTHONPATH``).

    python heldout.py engine > new.jsonl
    python heldout.py engine --new > new-new.jsonl
    python heldout.py sklearn --new > sklearn-n10-new.jsonl
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from sklearn.datasets import load_iris, make_blobs
from sklearn.preprocessing import StandardScaler

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # benchmarks/
sys.path.insert(
    0, str(Path(__file__).resolve().parents[2] / "2026-12-07-cpu-overshoot" / "heldout")
)
import heldout as earlier  # the nine shapes, the fits, the judge and the command line
import realdata


def new_shapes() -> Iterator[tuple[str, np.ndarray, int]]:
    """(name, X, k) of the seven shapes held out from the search's budget."""
    import skimage.data
    from sklearn.feature_extraction.image import extract_patches_2d

    yield "uniform-3d k200", np.random.RandomState(5).rand(60000, 3), 200
    yield "gaussian-8d k64", np.random.RandomState(6).randn(40000, 8), 64
    motorcycle = skimage.data.stereo_motorcycle()[0] / 255.0
    yield "motorcycle-colours k48", motorcycle.reshape(-1, 3), 48
    grey = motorcycle @ np.array(realdata.LUMA)
    patches = extract_patches_2d(grey, (6, 6), max_patches=30000, random_state=7)
    patches = patches.reshape(len(patches), -1)
    yield "motorcycle-patches-6x6 k128", patches - patches.mean(axis=1, keepdims=True), 128
    faces = skimage.data.lfw_subset().reshape(200, -1).astype(np.float64)
    yield "lfw-faces-625d k10", faces, 10
    yield "iris k3", StandardScaler().fit_transform(load_iris().data), 3
    X, _ = make_blobs(40000, n_features=4, centers=30, cluster_std=1.5, random_state=8)
    yield "blobs-4d k30", X, 30


def main() -> None:
    """The earlier script's command line (``engine`` or ``sklearn``, ``--seeds``,
    ``--only``), on the new shapes with ``--new``."""
    if "--new" in sys.argv:
        sys.argv.remove("--new")
        earlier.shapes = new_shapes
    earlier.main()


if __name__ == "__main__":
    main()
