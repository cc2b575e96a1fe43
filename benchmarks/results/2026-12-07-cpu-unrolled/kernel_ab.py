"""Two versions of the C kernel in one process: blocks of a hard pass, then whole fits.

Both sources are built as the engine builds its own (``native.library``, cached by
source) and the fits alternate between them, so load falls on both alike; the engine's
Python is this tree's either way.

    git show 3647df6:rbfkm_engine/lloyd_kernel.c > /tmp/old.c
    python kernel_ab.py /tmp/old.c ../../../rbfkm_engine/lloyd_kernel.c \
        --fits iris5,wine12,diabetes12,colours,digits,colours256,patches,patches1024 --rounds 4
"""

from __future__ import annotations

import argparse
import ctypes
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/
import realdata

import rbfkm_engine.native as native
from rbfkm_engine import RBFKMeans
from rbfkm_engine.native import LloydKernel, Rows


def build(source: str) -> ctypes.CDLL:
    native.SOURCE = Path(source)
    lib = native.library.__wrapped__()
    assert lib is not None, f"no kernel built from {source}"
    return lib


def block_time(
    kernel: LloydKernel, X: torch.Tensor, k: int, repeats: int
) -> tuple[float, torch.Tensor]:
    """Best of 7 rounds of ``repeats`` label-only blocks on direct distances (seconds a
    block) and the labels."""
    n = X.shape[0]
    C = X[torch.randperm(n, generator=torch.Generator().manual_seed(0))[:k]].contiguous()
    rows = Rows(X, (X * X).sum(1), None, torch.zeros(n, dtype=torch.int64), torch.empty(n))
    centres = kernel.centres(C, k + (-k % 16), direct=True)
    best = float("inf")
    for _ in range(7):
        started = time.perf_counter()
        for _ in range(repeats):
            kernel.block(rows, centres, None, None, None, 2)
        best = min(best, (time.perf_counter() - started) / repeats)
    return best, rows.labels.clone()


def blocks(libs: dict[str, ctypes.CDLL]) -> None:
    torch.set_num_threads(1)
    kernels = {name: LloydKernel(lib, torch.float32) for name, lib in libs.items()}
    rng = np.random.default_rng(0)
    cases = [("digits", realdata.load("digits").X, 10)]
    cases += [
        (f"normal {d}", rng.standard_normal((4000, d)), k)
        for d in (2, 3, 8, 16, 32, 64)
        for k in (10, 32, 100)
    ]
    print("hard pass blocks (labels only, direct distances, one thread), us a block:")
    for name, X, k in cases:
        X = torch.as_tensor(np.ascontiguousarray(X, dtype=np.float32))
        (t_old, l_old), (t_new, l_new) = (block_time(kernels[s], X, k, 50) for s in ("old", "new"))
        print(
            f"  {name:10s} {X.shape[0]:5d} x {X.shape[1]:2d}, k {k:3d}: {1e6 * t_old:7.1f} -> "
            f"{1e6 * t_new:7.1f}  ({t_new / t_old:.2f})  labels equal: {torch.equal(l_old, l_new)}"
        )


def fits(libs: dict[str, ctypes.CDLL], keys: list[str], rounds: int) -> None:
    torch.set_num_threads(2)
    print(f"default entmax15 fits (seed 0, two threads), {rounds} alternating rounds, seconds:")
    for key in keys:
        ds = realdata.load(key)
        X = ds.X.astype(np.float32)
        walls: dict[str, list[float]] = {"old": [], "new": []}
        inertia = {}
        for r in range(rounds):
            for side in ("old", "new") if r % 2 == 0 else ("new", "old"):
                native.library = lambda lib=libs[side]: lib
                started = time.perf_counter()
                model = RBFKMeans(n_clusters=ds.k, random_state=0).fit(X)
                walls[side].append(time.perf_counter() - started)
                inertia[side] = model.inertia_
        old, new = sorted(walls["old"]), sorted(walls["new"])
        print(
            f"  {key:12s} old {' '.join(f'{w:.3f}' for w in old)}"
            f"  new {' '.join(f'{w:.3f}' for w in new)}"
            f"  best {new[0] / old[0]:.2f}  inertia equal: {inertia['old'] == inertia['new']}",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--fits", default="")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    libs = {"old": build(args.old), "new": build(args.new)}
    blocks(libs)
    if args.fits:
        fits(libs, args.fits.split(","), args.rounds)


if __name__ == "__main__":
    main()
