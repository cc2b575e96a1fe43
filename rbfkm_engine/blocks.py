"""Block sizes: how many rows of the data one pass handles at a time.

Every pass over the data goes block by block, so memory never grows as ``n x k``: blocks
are sized from a memory budget and, on the CPU, to stay in the last-level cache. This
module imports no torch (the service sizes a job's memory before any worker runs it); a
device is a ``torch.device`` or its type's name (``"cpu"``, ``"cuda"``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

#: A ``torch.device`` or a device type's name.
Device = Any

#: Default memory budget for the per-chunk buffers (distances, responsibilities).
DEFAULT_BUDGET_BYTES = 256 * 1024**2

#: Target size of one ``(rows, k)`` block on the CPU (see :func:`cache_chunk_size`).
CPU_BLOCK_BYTES = 8 * 1024**2

#: Rows per chunk on the CPU never exceed this: larger blocks stop paying off in cache
#: behaviour.
MAX_CHUNK_ROWS = 65_536

#: A fit on a GPU sizes its blocks from at most this share of the device memory free at
#: its start, so that fits side by side on one GPU leave each other room.
DEVICE_FREE_SHARE = 1 / 8

#: A GPU fit's block budget stays at most this (beyond it blocks gain nothing).
MAX_DEVICE_BUDGET_BYTES = 4 * 1024**3


def chunk_size_for(
    n_clusters: int,
    n_features: int,
    itemsize: int,
    budget_bytes: int = DEFAULT_BUDGET_BYTES,
    buffers_per_row: int = 4,
    max_rows: int | None = MAX_CHUNK_ROWS,
) -> int:
    """Rows per chunk so that ``buffers_per_row`` ``(rows, k)`` blocks fit in the budget.

    The factor covers the distance block, the scores and the responsibilities, plus one
    ``(rows, d)`` block for weighted points.
    """
    per_row = itemsize * (buffers_per_row * n_clusters + n_features)
    rows = budget_bytes // max(per_row, 1)
    return int(max(1, rows if max_rows is None else min(max_rows, rows)))


def cache_chunk_size(n_clusters: int, device: Device, itemsize: int = 4) -> int:
    """Rows per block for the solver's passes: cache-sized on the CPU.

    With few features the distance GEMM is cheap and the passes over the ``(rows, k)``
    block (minimum, argmin check, candidate count) dominate. Each pass is a few torch ops
    with a fixed cost per op (dispatch, waking the threads): blocks of about 8 MiB, served
    from the last-level cache, need fewer ops per pass than blocks that stay in L2 and
    ran faster (benchmarks/README.md). GPUs prefer large blocks (fewer kernel launches).
    """
    if _device_type(device) == "cuda":
        return MAX_CHUNK_ROWS
    return int(max(256, min(MAX_CHUNK_ROWS, CPU_BLOCK_BYTES // (itemsize * max(n_clusters, 1)))))


def default_chunk_rows(
    n_clusters: int,
    n_features: int,
    itemsize: int,
    device: Device,
    budget_bytes: int = DEFAULT_BUDGET_BYTES,
) -> int:
    """Rows per block of a fit that sets no ``chunk_size``: within ``budget_bytes``, and
    cache-sized on the CPU; on a GPU as large as the budget allows (every block costs
    kernel launches, and large blocks keep the device busy)."""
    if _device_type(device) == "cuda":
        return chunk_size_for(n_clusters, n_features, itemsize, budget_bytes, max_rows=None)
    budget = chunk_size_for(n_clusters, n_features, itemsize, budget_bytes)
    return min(budget, cache_chunk_size(n_clusters, device, itemsize))


def block_budget(device: Device) -> int:
    """Bytes the blocks of a fit on ``device`` may take: :data:`DEFAULT_BUDGET_BYTES` on
    the CPU; on a GPU :data:`DEVICE_FREE_SHARE` of the memory free there now, between
    the default and :data:`MAX_DEVICE_BUDGET_BYTES`."""
    if _device_type(device) != "cuda":
        return DEFAULT_BUDGET_BYTES
    import torch

    free, _ = torch.cuda.mem_get_info(device)
    share = int(free * DEVICE_FREE_SHARE)
    return max(DEFAULT_BUDGET_BYTES, min(MAX_DEVICE_BUDGET_BYTES, share))


def iter_chunks(n: int, chunk_size: int) -> Iterator[slice]:
    """Consecutive row slices of at most ``chunk_size`` rows covering ``range(n)``."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    for start in range(0, n, chunk_size):
        yield slice(start, min(start + chunk_size, n))


def _device_type(device: Device) -> str:
    """``"cpu"`` or ``"cuda"`` for a ``torch.device`` or a device name (``"cuda:1"``)."""
    return str(getattr(device, "type", device)).split(":")[0]
