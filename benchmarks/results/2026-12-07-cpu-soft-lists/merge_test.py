"""The grown fit's merge test at many centres: the sweep along the widest coordinate
(``twins.coincident_survivors``) against the whole matrix by blocks
(``twins._blocked_survivors``), on uniform centres in the unit cube with the radii of
cells that fill it; milliseconds, best of 3, after a warm-up.

    cd /tmp && PYTHONPATH=<tree> python <this file>
"""

from __future__ import annotations

import time

import torch

from rbfkm_engine.twins import _blocked_survivors, coincident_survivors


def best_ms(fn, C: torch.Tensor, radius2: torch.Tensor, repeats: int = 3) -> float:
    fn(C, radius2)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn(C, radius2)
        times.append(time.perf_counter() - started)
    return 1e3 * min(times)


def blocked(C: torch.Tensor, radius2: torch.Tensor) -> None:
    _blocked_survivors(C, radius2, None)


def main() -> None:
    torch.set_num_threads(2)
    gen = torch.Generator().manual_seed(0)
    for m in (2048, 4096, 8192, 16384):
        C = torch.rand(m, 3, generator=gen, dtype=torch.float64)
        radius2 = torch.full((m,), 0.6 * m ** (-2 / 3), dtype=torch.float64)
        swept = best_ms(coincident_survivors, C, radius2)
        whole = best_ms(blocked, C, radius2, 1 if m > 8192 else 3)
        print(f"m {m:6d}: sweep {swept:8.1f} ms, whole matrix {whole:8.1f} ms")


if __name__ == "__main__":
    main()
