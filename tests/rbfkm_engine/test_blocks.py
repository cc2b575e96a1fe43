"""Block sizes: budgets, cache-sized CPU blocks, and slices that cover the rows."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from rbfkm_engine.blocks import (
    CPU_BLOCK_BYTES,
    DEFAULT_BUDGET_BYTES,
    cache_chunk_size,
    chunk_size_for,
    default_chunk_rows,
    iter_chunks,
)


def test_iter_chunks_cover_rows_exactly() -> None:
    for n, size in [(0, 3), (1, 1), (10, 3), (10, 10), (10, 11), (1000, 64)]:
        slices = list(iter_chunks(n, size))
        covered = [i for s in slices for i in range(n)[s]]
        assert covered == list(range(n))
        assert all(s.stop - s.start <= size for s in slices)
    with pytest.raises(ValueError, match="chunk_size"):
        list(iter_chunks(10, 0))


def test_memory_budget_bounds_chunks() -> None:
    n, k, d, itemsize = 10_000_000, 1024, 128, 4
    budget = 64 * 1024**2
    rows = chunk_size_for(k, d, itemsize, budget_bytes=budget)
    assert 1 <= rows < n
    # The (rows, k) blocks the chunk is sized for fit in the budget.
    assert rows * k * itemsize <= budget
    assert chunk_size_for(k, d, itemsize) * k * itemsize <= DEFAULT_BUDGET_BYTES
    # Smaller budget, more centres or wider items: never more rows.
    assert chunk_size_for(k, d, itemsize, budget_bytes=budget // 4) <= rows
    assert chunk_size_for(4 * k, d, itemsize, budget_bytes=budget) <= rows
    assert chunk_size_for(k, d, 8, budget_bytes=budget) <= rows
    # A budget smaller than one row still yields a usable chunk.
    assert chunk_size_for(k, d, itemsize, budget_bytes=1) == 1


def test_cache_chunk_size() -> None:
    cpu = torch.device("cpu")
    for k in (1, 8, 256, 4096, 100_000):
        rows = cache_chunk_size(k, cpu, 4)
        assert rows >= 1
        # About CPU_BLOCK_BYTES per (rows, k) block, but never so few rows that the GEMM
        # starves.
        assert rows * k * 4 <= CPU_BLOCK_BYTES or rows <= 256
    assert cache_chunk_size(8, cpu, 8) <= cache_chunk_size(8, cpu, 4)


@pytest.mark.parametrize("device", ("cpu", "cuda", "cuda:1"))
def test_device_names_size_blocks_as_devices_do(device: str) -> None:
    # The service sizes a job without torch: a device's name gives the torch.device's
    # block size.
    as_device = torch.device(device)
    assert cache_chunk_size(64, device) == cache_chunk_size(64, as_device)
    assert default_chunk_rows(64, 32, 4, device) == default_chunk_rows(64, 32, 4, as_device)


def test_blocks_import_without_torch() -> None:
    code = "import sys, rbfkm_engine.blocks; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
