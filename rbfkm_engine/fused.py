"""Nearest centres on CUDA by one fused kernel: distances and argmin, no ``n x k`` block.

The eager hard pass writes a block of ``m x k`` distances to device memory and reads it
back for the row minimum; at ``k`` in the hundreds that traffic, not the GEMM, bounds the
pass. This Triton kernel keeps each tile of distances in registers: a program takes
``BLOCK_M`` rows, loads them once, and streams the centres through in tiles of
``BLOCK_K``, keeping a running minimum and its column. Only the nearest squared distance
and the label of each row are written.

Precision (:data:`PRECISIONS`) names the products' inputs, as
``torch.set_float32_matmul_precision`` does: ``"highest"`` float32 (three TF32 products
per tile, ``tf32x3``: float32's accuracy on tensor cores; plain FMA products ran two
orders of magnitude slower), ``"high"`` TF32 and ``"medium"`` bfloat16, always accumulated
in float32. Ties go to the lowest index, as ``argmin``'s. Tile sizes are tuned by Triton
on first use, per number of centres, features and precision (:data:`TUNED_CONFIGS`).

Triton is optional: without it, or off CUDA, or for float64 data, :func:`supports` is
false and the passes use the eager path.
"""

import contextlib
from dataclasses import dataclass

import torch

from .params import MATMUL_PRECISIONS as PRECISIONS

try:  # optional: Triton comes with CUDA builds of torch
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the installation
    triton = None
    tl = None

#: Features above this many go through the kernel in slices of ``BLOCK_D`` (the rows
#: are then reloaded per tile of centres, from cache).
_MAX_RESIDENT_FEATURES = 256


@dataclass(frozen=True)
class KernelConfig:
    """Tile sizes and launch options of the kernel."""

    block_m: int = 128
    block_k: int = 64
    num_warps: int = 4
    num_stages: int = 1


#: The tile sizes Triton's autotuner tries on first use (per centres, features and
#: precision); configurations that do not fit the device's shared memory are skipped.
TUNED_CONFIGS = (
    KernelConfig(128, 64, 4, 1),
    KernelConfig(128, 128, 8, 2),
    KernelConfig(128, 64, 4, 3),
    KernelConfig(64, 128, 4, 2),
    KernelConfig(256, 64, 8, 2),
)

#: The products' input precision in Triton's words, by ``matmul_precision``.
_INPUT_PRECISION = {"highest": "tf32x3", "high": "tf32", "medium": "ieee"}

#: Problems of at least this many distances (``n x k``) are worth tuning the tiles for;
#: smaller ones take :func:`default_config`.
_TUNE_FROM = 1 << 27


def default_config(n_features: int) -> KernelConfig:
    """Tiles of problems too small to tune for: wider rows leave room for fewer centres
    per tile (shared memory holds a ``BLOCK_K x BLOCK_D`` tile of centres)."""
    if n_features <= 64:
        return KernelConfig(128, 128, 8, 2)
    if n_features <= _MAX_RESIDENT_FEATURES:
        return KernelConfig(128, 64, 4, 1)
    return KernelConfig(64, 64, 4, 2)


def supports(X: torch.Tensor) -> bool:
    """Whether the fused kernel can take ``X``: float32 on CUDA, with Triton present."""
    return triton is not None and X.is_cuda and X.dtype == torch.float32


def nearest(
    X: torch.Tensor,
    x_sq: torch.Tensor,
    C: torch.Tensor,
    c_sq: torch.Tensor,
    precision: str,
    out: tuple[torch.Tensor, torch.Tensor],
    config: KernelConfig | None = None,
) -> None:
    """Write each row's nearest squared distance (clamped at 0) and its label into
    ``out = (min_dist, labels)`` (float32 and int64, ``X.shape[0]`` each).

    ``X`` (n x d) and ``C`` (k x d) are float32 on one CUDA device, row-major; ``x_sq``
    and ``c_sq`` their squared row norms. ``config``: fixed tiles (default: tuned for large
    problems, :func:`default_config` for small ones).
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    n, d = X.shape
    k = C.shape[0]
    block_d = max(16, triton.next_power_of_2(d))
    resident = block_d <= _MAX_RESIDENT_FEATURES
    if not resident:
        block_d = 64
    low = precision == "medium"
    # bfloat16 centres are cast once here, not in every program.
    centres = C.to(torch.bfloat16) if low else C
    args = (X, centres.contiguous(), c_sq.contiguous(), x_sq, *out, n, k, X.stride(0), d)
    consts = dict(
        BLOCK_D=block_d, RESIDENT=resident, PRECISION=_INPUT_PRECISION[precision], LOW=low
    )
    # Launch on the data's GPU, not the current one (the CPU: Triton's interpreter).
    with torch.cuda.device(X.device) if X.is_cuda else contextlib.nullcontext():
        if config is None and n * k < _TUNE_FROM:
            config = default_config(d)
        if config is None:
            _tuned_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK_M"]),)](*args, **consts)
            return
        _nearest_kernel[(triton.cdiv(n, config.block_m),)](
            *args,
            **consts,
            BLOCK_M=config.block_m,
            BLOCK_K=config.block_k,
            num_warps=config.num_warps,
            num_stages=config.num_stages,
        )


if triton is not None:  # the module imports without Triton; only the kernel needs it

    @triton.jit
    def _nearest_kernel(
        x_ptr,
        c_ptr,
        csq_ptr,
        xsq_ptr,
        dist_ptr,
        label_ptr,
        n,
        k,
        stride_x,
        D: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_K: tl.constexpr,
        BLOCK_D: tl.constexpr,
        RESIDENT: tl.constexpr,
        PRECISION: tl.constexpr,
        LOW: tl.constexpr,
    ):
        """One program: ``BLOCK_M`` rows against every centre, tile by tile.

        The tile's distances without ``||x||^2`` (``||c||^2 - 2 x.c``) are reduced in
        registers; a strictly smaller tile minimum replaces the running one, so ties keep the
        earlier tile and, within a tile, ``argmin``'s lowest index.
        """
        pid = tl.program_id(0)
        rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < n
        row_base = x_ptr + rows.to(tl.int64)[:, None] * stride_x
        dims = tl.arange(0, BLOCK_D)
        best = tl.full((BLOCK_M,), float("inf"), tl.float32)
        best_at = tl.zeros((BLOCK_M,), tl.int32)
        if RESIDENT:
            x = tl.load(
                row_base + dims[None, :], mask=row_ok[:, None] & (dims[None, :] < D), other=0.0
            )
            if LOW:
                x = x.to(tl.bfloat16)
        for k0 in range(0, k, BLOCK_K):
            cols = k0 + tl.arange(0, BLOCK_K)
            col_ok = cols < k
            col_base = c_ptr + cols.to(tl.int64)[None, :] * D
            if RESIDENT:
                c = tl.load(
                    col_base + dims[:, None], mask=col_ok[None, :] & (dims[:, None] < D), other=0.0
                )
                dot = tl.dot(x, c, input_precision=PRECISION)
            else:
                dot = tl.zeros((BLOCK_M, BLOCK_K), tl.float32)
                for d0 in range(0, D, BLOCK_D):
                    at = d0 + dims
                    xs = tl.load(
                        row_base + at[None, :], mask=row_ok[:, None] & (at[None, :] < D), other=0.0
                    )
                    cs = tl.load(
                        col_base + at[:, None], mask=col_ok[None, :] & (at[:, None] < D), other=0.0
                    )
                    if LOW:
                        xs = xs.to(tl.bfloat16)
                    dot += tl.dot(xs, cs, input_precision=PRECISION)
            c_sq = tl.load(csq_ptr + cols, mask=col_ok, other=float("inf"))
            dist = c_sq[None, :] - 2.0 * dot
            tile_min = tl.min(dist, axis=1)
            tile_at = tl.argmin(dist, axis=1).to(tl.int32) + k0
            closer = tile_min < best
            best = tl.where(closer, tile_min, best)
            best_at = tl.where(closer, tile_at, best_at)
        x_sq = tl.load(xsq_ptr + rows, mask=row_ok, other=0.0)
        tl.store(dist_ptr + rows, tl.maximum(best + x_sq, 0.0), mask=row_ok)
        tl.store(label_ptr + rows, best_at.to(tl.int64), mask=row_ok)

    _tuned_kernel = triton.autotune(
        configs=[
            triton.Config(
                {"BLOCK_M": c.block_m, "BLOCK_K": c.block_k},
                num_warps=c.num_warps,
                num_stages=c.num_stages,
            )
            for c in TUNED_CONFIGS
        ],
        key=["k", "D", "PRECISION", "LOW"],
    )(_nearest_kernel)
