"""The fused nearest-centre kernel: labels and distances as a dense argmin gives them, ties
to the lowest index, every tiling edge; compiled on CUDA, and in Triton's interpreter on
the CPU where Triton is installed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rbfkm_engine import fused
from rbfkm_engine.blocks import block_budget, default_chunk_rows
from rbfkm_engine.params import MATMUL_PRECISIONS

REPO = Path(__file__).resolve().parents[2]

#: (n, d, k): rows not a multiple of a tile, one centre, few features (padded to 16),
#: features past the resident limit (sliced), centres not a multiple of a tile.
SHAPES = ((1000, 3, 7), (777, 128, 300), (500, 300, 65), (300, 16, 1), (2049, 64, 1024))


def separated(n: int, d: int, k: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Points near their centres, far from the others: every precision finds the same
    nearest centre. Centre 0 is repeated as the last centre (a tie)."""
    g = torch.Generator().manual_seed(n + d + k)
    C = 10.0 * torch.randn(k, d, generator=g)
    if k > 1:
        C[-1] = C[0]
    labels = torch.randint(0, k, (n,), generator=g)
    X = C[labels] + 0.05 * torch.randn(n, d, generator=g)
    return X.to(device), C.to(device)


def check_nearest(
    device: str,
    precisions: tuple[str, ...] = MATMUL_PRECISIONS,
    shapes: tuple[tuple[int, int, int], ...] = SHAPES,
) -> None:
    """Compare :func:`fused.nearest` with a float64 dense argmin on every shape."""
    for n, d, k in shapes:
        X, C = separated(n, d, k, device)
        x_sq, c_sq = (X * X).sum(dim=1), (C * C).sum(dim=1)
        D = torch.cdist(X.double(), C.double()) ** 2
        expected, nearest_sq = D.argmin(dim=1), D.min(dim=1).values
        for precision in precisions:
            min_dist = torch.empty(n, device=device)
            labels = torch.empty(n, dtype=torch.long, device=device)
            fused.nearest(X, x_sq, C, c_sq, precision, (min_dist, labels))
            where = f"n={n} d={d} k={k} precision={precision}"
            assert torch.equal(labels.cpu(), expected.cpu()), where
            scale = float(x_sq.max())  # the products' rounding is relative to the norms
            tol = 1e-5 if precision == "highest" else 1e-2
            err = float((min_dist.double() - nearest_sq).abs().max())
            assert err <= tol * scale, f"{where}: distance error {err:.3g}"
            assert bool((min_dist >= 0).all()), where


def test_precisions_are_the_parameter_values() -> None:
    with pytest.raises(ValueError, match="precision must be one of"):
        fused.nearest(*([torch.zeros(1, 1)] * 4), "low", (torch.zeros(1), torch.zeros(1)))


def test_supports_float32_cuda_only() -> None:
    assert not fused.supports(torch.zeros(4, 2))
    assert not fused.supports(torch.zeros(4, 2, dtype=torch.float64))


def test_tiles_suit_the_features() -> None:
    # Triton's products need tiles of at least 16 in every dimension.
    for config in (*fused.TUNED_CONFIGS, *map(fused.default_config, (2, 64, 128, 256, 1000))):
        assert config.block_m >= 16 and config.block_k >= 16


@pytest.mark.skipif(fused.triton is None, reason="needs Triton (its interpreter runs on the CPU)")
def test_kernel_in_the_interpreter() -> None:
    # bfloat16 is left to the GPU: the interpreter's numpy has no bfloat16 products.
    script = (
        "import triton.runtime.interpreter as ti\n"
        "orig = ti._patch_lang_tensor\n"
        "def patched(tensor, scope):\n"  # numpy >= 2.4 refuses int() of a 1-element array
        "    orig(tensor, scope)\n"
        "    tensor.__index__ = lambda self: int(self.handle.data.reshape(-1)[0])\n"
        "ti._patch_lang_tensor = patched\n"
        "from tests.rbfkm_engine.test_fused import check_nearest\n"
        "check_nearest('cpu', ('highest', 'high'))\n"
    )
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr[-3000:]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.skipif(fused.triton is None, reason="needs Triton")
def test_kernel_on_cuda() -> None:
    check_nearest("cuda")
    # Large enough for the tuned tiles: Triton times each configuration on first use.
    check_nearest("cuda", shapes=((1 << 17, 128, 1024),))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_blocks_come_from_free_memory() -> None:
    budget = block_budget(torch.device("cuda"))
    free, _ = torch.cuda.mem_get_info()
    assert budget <= max(free // 4, 256 * 1024**2)
    rows = default_chunk_rows(1024, 128, 4, "cuda", budget)
    assert rows * 4 * (4 * 1024 + 128) <= budget
