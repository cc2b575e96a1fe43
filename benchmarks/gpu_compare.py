"""rbfkm_engine on CUDA against the GEMM floor and the CUDA peers, in one process and one run.

What one run measures, at n = 10^6 and 10^7, d = 128, k = 1024 (Gaussian blobs made on the
GPU from a seeded ``torch.Generator``: 1024 centres ~ N(0, spread^2 I), points = centre +
N(0, I), spread 0.5: nearest-true-centre labels have an ARI of 0.96; float32):

peak     an 8192^3 ``torch.matmul`` in fp32 (TF32 off), TF32 and bf16: the TFLOP/s this
         device attains, once.
floor    per shape: ``torch.matmul`` of X (n x d) by C^T (d x k) in row blocks of 2^20
         into one reused output, in each precision (the GEMM floor of one distance
         step; it also writes the n x k product, which fused kernels do not), the time
         to read X once (``X.sum()``), and the rooflines 2nkd / peak (datasheet H200
         peaks when the device is one, as the issue states them, and the measured ones).
speed    per shape: hard Lloyd ms per iteration from the same initial centres C0 (k
         random rows, fixed seed): each method runs N1 and N2 iterations (5 and 25, tol 0
         or below so that none stops early; the engine still stops at an exact fixed
         point, so the iterations each method reports are used), ms/iter = (wall(N2) -
         wall(N1)) / (N2 - N1), which removes the fixed costs (copies, set-up, the final
         labels). Methods:
         rbfkm-hard once per ``matmul_precision`` (fp32 / TF32 / bf16 products),
         fast-pytorch-kmeans with TF32 off and on, flash-kmeans (Triton) on fp32 input
         (its ``tl.dot`` runs fp32 input in TF32), bf16 and fp16, faiss-gpu if it sees a
         GPU. Each first runs 2 iterations on the full data (Triton JIT, cuBLAS, the
         allocator; not timed). The N2 run's centres go through the float64 judge
         (``common.evaluate_centroids``) so the precisions can be seen to agree.
quality  per shape: whole fits with each method's defaults and own initialisation:
         rbfkm-entmax15 (the annealed fit), rbfkm-hard (k-means++), fast-pytorch-kmeans,
         flash-kmeans (random rows, 25 iterations: its ``FlashKMeans`` defaults),
         faiss-gpu; wall, iterations, inertia and ARI (float64 judge). Every rbfkm fit
         has a deadline through its progress callback: past it the fit stops and is
         reported "stopped at deadline" with the phase it was in.

Parts run as: peak, speed at every shape (smallest first), quality at every shape; the
JSON is rewritten after every method, so a run cut short keeps its figures, and parts
not started once ``--time-budget`` is spent are skipped with a line saying so. Peak memory
is ``torch.cuda.max_memory_allocated`` above what was allocated before (faiss's own
allocator is not seen). Exits 0 with a note when CUDA is not available.

    python benchmarks/gpu_compare.py --json gpu.json --time-budget 220
    python benchmarks/gpu_compare.py --quick --device cpu     # dry run of the code, seconds
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
for _path in (str(REPO), str(HERE)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import common  # noqa: E402

DEFAULT_SHAPES = ((1_000_000, 128, 1024), (10_000_000, 128, 1024))
QUICK_SHAPES = ((8_000, 32, 64), (20_000, 32, 64))
#: Dense tensor-core peaks of an H200 SXM (TFLOP/s, datasheet), the issue's roofline basis.
H200_DATASHEET_TFLOPS = {"tf32": 494.7, "bf16": 989.4}
#: The precisions of the GEMM floor: fp32 with TF32 off, TF32, bf16 inputs and output.
GEMM_PRECISIONS = ("fp32", "tf32", "bf16")
#: The engine's ``matmul_precision`` values and the precision of their products.
ENGINE_PRECISION = {"highest": "fp32", "high": "tf32", "medium": "bf16"}
#: The floor a precision is compared with (fp16 products: the bf16 GEMM's, same width).
FLOOR_OF = {"fp16": "bf16"}
#: The issue's target: a hard iteration within this factor of the TF32 roofline.
TARGET_FACTOR = 2.0


# --------------------------------------------------------------------------- options


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny shapes (a dry run, seconds)")
    p.add_argument("--device", default="cuda", help="cuda (default); cpu only to dry-run")
    p.add_argument("--json", type=Path, default=None, metavar="OUT", help="write all figures")
    p.add_argument(
        "--time-budget", type=float, default=math.inf, help="seconds; later parts are skipped"
    )
    p.add_argument("--iters", default="5,25", help="N1,N2 Lloyd iterations (5,25)")
    p.add_argument("--repeats", type=int, default=1, help="timed Lloyd runs per N, best (1)")
    p.add_argument("--gemm-repeats", type=int, default=5, help="timed GEMMs, best of (5)")
    p.add_argument("--seeds", default="2,1", help="quality seeds per shape (2,1)")
    p.add_argument(
        "--deadlines", default="20,45", help="seconds per rbfkm quality fit, per shape (20,45)"
    )
    p.add_argument("--spread", type=float, default=0.5, help="std of the blob centres (0.5)")
    p.add_argument("--seed", type=int, default=0, help="data and C0 seed (0)")
    p.add_argument("--parts", default="peak,speed,quality", help="which parts to run")
    return p.parse_args(argv)


def per_shape(text: str, count: int, kind: type = int) -> list[Any]:
    """A comma list of one value per shape; the last value repeats for the rest."""
    values = [kind(v) for v in text.split(",") if v.strip()]
    return [values[min(i, len(values) - 1)] for i in range(count)]


def shapes(quick: bool) -> tuple[tuple[int, int, int], ...]:
    """(n, d, k) of the data sets, smallest first."""
    return QUICK_SHAPES if quick else DEFAULT_SHAPES


def shape_name(shape: tuple[int, int, int]) -> str:
    """'1000000x128 k=1024'."""
    n, d, k = shape
    return f"{n}x{d} k={k}"


# --------------------------------------------------------------------------- run state


@dataclass
class Run:
    """What every part needs: options, device, the clock, and the report it adds to."""

    args: argparse.Namespace
    report: dict[str, Any]
    start: float = field(default_factory=time.perf_counter)

    @property
    def device(self) -> str:
        return self.args.device

    @property
    def cuda(self) -> bool:
        return self.device.startswith("cuda")

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def left(self) -> float:
        """Seconds of ``--time-budget`` left."""
        return self.args.time_budget - self.elapsed()

    def out_of_time(self, what: str) -> bool:
        """Whether the budget is spent; if so, say that ``what`` is skipped and record it."""
        if self.left() > 0:
            return False
        line = f"time budget ({self.args.time_budget:g}s) spent: skipping {what}"
        print(line, flush=True)
        self.report["skipped"].append(line)
        return True

    def save(self) -> None:
        """Rewrite the JSON (after every method, so a run cut short keeps its figures)."""
        self.report["elapsed_s"] = self.elapsed()
        if self.args.json:
            self.args.json.write_text(json.dumps(self.report, indent=1, default=str))

    def shape_report(self, shape: tuple[int, int, int]) -> dict[str, Any]:
        """The report's entry of one shape."""
        return self.report["shapes"].setdefault(shape_name(shape), {"shape": list(shape)})


def run_part(run: Run, name: str, body: Callable[[], None]) -> None:
    """Run one part unless the budget is spent; print and record its elapsed time.

    A part that fails (the data or the floor not fitting in memory, say) is recorded and
    the next part goes on.
    """
    if run.out_of_time(f"part {name!r}"):
        return
    t0 = time.perf_counter()
    print(f"\n##### {name} (at {run.elapsed():.1f}s)", flush=True)
    try:
        body()
    except Exception as exc:
        run.report["part_errors"][name] = error_text(exc)
        print(f"##### {name} failed: {error_text(exc)}", flush=True)
        release(run.device)
    took = time.perf_counter() - t0
    run.report["part_s"][name] = took
    print(f"##### {name}: {took:.1f}s (total {run.elapsed():.1f}s)", flush=True)
    run.save()


def error_text(exc: BaseException) -> str:
    """A short one-line description of an exception for the tables and the JSON."""
    return f"{type(exc).__name__}: {exc}".replace("\n", " ")[:240]


def release(device: str) -> None:
    """Free what the last method left (between methods, so each starts from the same)."""
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


# --------------------------------------------------------------------------- machine


def machine_info(device: str) -> dict[str, Any]:
    """GPU name, memory, torch / CUDA / Triton / peers' versions, driver, date."""
    import platform
    from importlib.metadata import version

    info: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": device,
    }
    for dist in ("triton", "fast-pytorch-kmeans", "flash-kmeans", "faiss-gpu", "numpy", "tqdm"):
        try:
            info[dist] = version(dist)
        except Exception:
            info[dist] = None
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(device)
        info.update(gpu=props.name, gpu_mib=props.total_memory // common.MIB)
        info.update(sms=props.multi_processor_count, driver=nvidia_driver())
    else:
        info["gpu"] = "cpu (dry run)"
    return info


def nvidia_driver() -> str | None:
    """The driver version from nvidia-smi (None when it is not there)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 else None
    except Exception:
        return None


# --------------------------------------------------------------------------- data


def make_blobs_on_device(
    n: int, d: int, k: int, seed: int, spread: float, device: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gaussian blobs made on the device: X (n x d, float32) and the true labels.

    Generated by a seeded ``torch.Generator`` on the device (numpy takes minutes for 10^7
    x 128); the centres are added in blocks so no second n x d temporary is made.
    """
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    centres = torch.randn(k, d, generator=gen, device=device) * spread
    y = torch.randint(0, k, (n,), generator=gen, device=device)
    X = torch.randn(n, d, generator=gen, device=device)
    block = 1 << 20
    for start in range(0, n, block):
        X[start : start + block] += centres[y[start : start + block]]
    return X, y


def shared_init(X: torch.Tensor, k: int, seed: int) -> np.ndarray:
    """C0 of the speed runs: k distinct random rows of X (numpy, the same for everyone).

    Random rows rather than k-means++ keep Lloyd moving for all N2 iterations.
    """
    gen = torch.Generator(device=X.device)
    gen.manual_seed(seed + 1)
    rows = torch.randperm(X.shape[0], generator=gen, device=X.device)[:k]
    return X[rows].cpu().numpy()


# --------------------------------------------------------------------------- timing


def best_ms(fn: Callable[[], Any], device: str, repeats: int) -> float:
    """Least milliseconds of ``fn()`` over ``repeats`` calls, after one untimed call.

    CUDA events on a GPU (device time of the queued work), ``perf_counter`` on the CPU.
    """
    fn()
    common.synchronize(device)
    best = math.inf
    for _ in range(max(1, repeats)):
        if device.startswith("cuda"):
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            fn()
            end.record()
            end.synchronize()
            best = min(best, begin.elapsed_time(end))
        else:
            best = min(best, common.timed(fn, device)[0] * 1e3)
    return best


@contextmanager
def peak_memory(device: str) -> Iterator[dict[str, Any]]:
    """MiB allocated by the block above what was allocated before (None on the CPU)."""
    out: dict[str, Any] = {"peak_mib": None}
    if not device.startswith("cuda"):
        yield out
        return
    common.synchronize(device)
    base = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    yield out
    common.synchronize(device)
    out["peak_mib"] = (torch.cuda.max_memory_allocated(device) - base) / common.MIB


def tflops(flop: float, ms: float) -> float:
    """TFLOP/s of ``flop`` operations done in ``ms`` milliseconds."""
    return flop / (ms * 1e-3) / 1e12 if ms > 0 else math.nan


def gemm_dtype(precision: str) -> torch.dtype:
    """The operand dtype of a GEMM precision (TF32 runs on float32 operands)."""
    return torch.bfloat16 if precision == "bf16" else torch.float32


# --------------------------------------------------------------------------- peak, floor


def peak_part(run: Run) -> None:
    """The device's attainable TFLOP/s: a square matmul in each precision (best of a few)."""
    size = 512 if run.args.quick else 8192
    res: dict[str, Any] = {"size": size}
    for precision in GEMM_PRECISIONS:
        dtype = gemm_dtype(precision)
        a = torch.randn(size, size, device=run.device).to(dtype)
        b = torch.randn(size, size, device=run.device).to(dtype)
        c = torch.empty(size, size, device=run.device, dtype=dtype)
        with common.matmul_tf32(precision == "tf32"):
            ms = best_ms(lambda a=a, b=b, c=c: torch.matmul(a, b, out=c), run.device, 5)
        res[precision] = {"ms": ms, "tflops": tflops(2.0 * size**3, ms)}
        del a, b, c
    run.report["peak"] = res
    release(run.device)
    rows = [
        [p, common.fmt(res[p]["ms"], ".3f"), common.fmt(res[p]["tflops"], ".1f")]
        for p in GEMM_PRECISIONS
    ]
    print(f"-- peak: torch.matmul {size}^3")
    print(table(["precision", "ms", "TFLOP/s"], rows))


def blocked_matmul(X: torch.Tensor, CT: torch.Tensor, out: torch.Tensor) -> None:
    """X @ CT in row blocks of ``len(out)`` into the same output buffer (bounded memory)."""
    block = out.shape[0]
    for start in range(0, X.shape[0], block):
        xb = X[start : start + block]
        torch.matmul(xb, CT, out=out[: xb.shape[0]])


def gemm_floor(run: Run, X: torch.Tensor, C: torch.Tensor) -> dict[str, Any]:
    """ms and TFLOP/s of the distance GEMM X @ C^T in each precision (2^20-row blocks)."""
    n, d = X.shape
    k = C.shape[0]
    block = min(n, 4096 if run.args.quick else 1 << 20)
    res: dict[str, Any] = {"block_rows": block}
    for precision in GEMM_PRECISIONS:
        dtype = gemm_dtype(precision)
        Xp = X if dtype == X.dtype else X.to(dtype)
        CT = C.T.contiguous().to(dtype)
        out = torch.empty(block, k, device=X.device, dtype=dtype)
        with common.matmul_tf32(precision == "tf32"):
            ms = best_ms(
                lambda Xp=Xp, CT=CT, out=out: blocked_matmul(Xp, CT, out),
                run.device,
                run.args.gemm_repeats,
            )
        res[precision] = {"ms": ms, "tflops": tflops(2.0 * n * d * k, ms)}
        del Xp, CT, out
        release(run.device)
    return res


def read_once(run: Run, X: torch.Tensor) -> dict[str, Any]:
    """ms to read X once (a sum of X) and the bandwidth that makes."""
    ms = best_ms(lambda: X.sum(), run.device, run.args.gemm_repeats)
    return {"ms": ms, "gb_s": X.numel() * X.element_size() / (ms * 1e-3) / 1e9}


def rooflines(run: Run, shape: tuple[int, int, int], read: dict[str, Any]) -> dict[str, Any]:
    """2nkd over the peaks: the datasheet H200's (the issue's figures) and the measured ones.

    The target basis is the datasheet when the device is an H200, else the measured peak.
    """
    n, d, k = shape
    flop = 2.0 * n * d * k
    measured = {
        p: flop / (v["tflops"] * 1e12) * 1e3
        for p, v in run.report.get("peak", {}).items()
        if isinstance(v, dict)
    }
    datasheet = {p: flop / (t * 1e12) * 1e3 for p, t in H200_DATASHEET_TFLOPS.items()}
    on_h200 = "H200" in str(run.report["machine"].get("gpu", ""))
    basis = datasheet if on_h200 or "tf32" not in measured else measured
    return {
        "gflop_per_gemm": flop / 1e9,
        "datasheet_h200_ms": datasheet,
        "measured_peak_ms": measured,
        "read_x_ms": read["ms"],
        "basis": "H200 datasheet" if basis is datasheet else "measured peak",
        "tf32_ms": basis["tf32"],
        "target_ms": TARGET_FACTOR * basis["tf32"],
    }


def fused_kernel(run: Run, X: torch.Tensor, C: torch.Tensor) -> dict[str, Any]:
    """ms of the engine's fused nearest-centre kernel alone (one hard pass's distances and
    argmin, tuned tiles) in each ``matmul_precision``: the rest of a Lloyd iteration is
    the difference to its ms/iter."""
    from rbfkm_engine import fused

    if not fused.supports(X):
        return {"skipped": "needs CUDA and Triton"}
    x_sq, c_sq = (X * X).sum(dim=1), (C * C).sum(dim=1)
    out = (torch.empty_like(x_sq), torch.empty(X.shape[0], dtype=torch.long, device=X.device))
    res: dict[str, Any] = {}
    for precision in fused.PRECISIONS:
        try:
            fn = lambda p=precision: fused.nearest(X, x_sq, C, c_sq, p, out)  # noqa: E731
            ms = best_ms(fn, run.device, run.args.gemm_repeats)
            res[precision] = {"ms": ms, "tflops": tflops(2.0 * X.numel() * C.shape[0], ms)}
        except Exception as exc:  # one precision failing must not stop the others
            res[precision] = {"error": error_text(exc)}
    return res


def floor_section(run: Run, shape: tuple[int, int, int], X: torch.Tensor, C0: np.ndarray) -> None:
    """The GEMM floor, the fused kernel alone, the read of X and the rooflines of one
    shape, printed and recorded."""
    entry = run.shape_report(shape)
    C = torch.as_tensor(C0, device=X.device)
    entry["floor"] = gemm_floor(run, X, C)
    entry["fused_kernel"] = fused_kernel(run, X, C)
    entry["read_x"] = read_once(run, X)
    entry["roofline"] = rooflines(run, shape, entry["read_x"])
    print_floor(entry)
    print(f"   fused kernel alone (ms): {entry['fused_kernel']}")
    run.save()


def print_floor(entry: dict[str, Any]) -> None:
    """The floor table and the roofline lines of one shape."""
    fmt, floor, roof = common.fmt, entry["floor"], entry["roofline"]
    rows = [
        [p, fmt(floor[p]["ms"], ".2f"), fmt(floor[p]["tflops"], ".1f")] for p in GEMM_PRECISIONS
    ]
    print(
        f"-- GEMM floor: torch.matmul X @ C^T in blocks of {floor['block_rows']} rows"
        " (it also writes the n x k product)"
    )
    print(table(["precision", "ms", "TFLOP/s"], rows))
    data = ", ".join(f"{p} {v:.2f} ms" for p, v in roof["datasheet_h200_ms"].items())
    meas = ", ".join(f"{p} {v:.2f} ms" for p, v in roof["measured_peak_ms"].items())
    print(
        f"   roofline 2nkd = {roof['gflop_per_gemm']:.4g} GFLOP: H200 datasheet {data}; "
        f"measured peak {meas}; read X once {entry['read_x']['ms']:.2f} ms "
        f"({entry['read_x']['gb_s']:.0f} GB/s)"
    )
    print(
        f"   target ({roof['basis']}): hard iteration <= {TARGET_FACTOR:g} x TF32 roofline"
        f" = {roof['target_ms']:.2f} ms"
    )


# --------------------------------------------------------------------------- methods


@dataclass(frozen=True)
class Variant:
    """One method at one setting: the runner (``common.RUNNERS`` key), the precision of its
    distance products, its options, and a note for the tables."""

    label: str
    method: str
    precision: str
    params: dict[str, Any] = field(default_factory=dict)
    note: str = ""

    def spec(
        self,
        run: Run,
        mode: str,
        n_iter: int = 0,
        seed: int = 0,
        init: Any = None,
        callback: Any = None,
    ) -> common.RunSpec:
        """The RunSpec of one call."""
        return common.RunSpec(mode, n_iter, seed, init, run.device, dict(self.params), callback)


def runner(method: str) -> Callable[..., common.RunOutput]:
    """The function that runs ``method`` (faiss-gpu: ``common.faiss_runner(gpu=True)``)."""
    if method == "faiss-gpu":
        return common.faiss_runner(gpu=True)
    return common.RUNNERS[method]


def unavailable(run: Run, method: str) -> str | None:
    """Why ``method`` cannot run here (None: it can)."""
    if method == "faiss-gpu":
        if not run.cuda:
            return "needs CUDA"
        return None if faiss_gpu_available() else "no faiss with GPUs"
    return None if common.method_available(method) else f"{common.REQUIRES[method]} not importable"


def faiss_gpu_available() -> bool:
    """Whether a faiss build with GPU support and a visible GPU imports."""
    try:
        import faiss

        return faiss.get_num_gpus() > 0
    except Exception:
        return False


def engine_precisions() -> list[str | None]:
    """The engine's ``matmul_precision`` values ([None] if it has no such parameter).

    Read from ``rbfkm_engine.params.PARAMETER_CONSTRAINTS`` when it is there, else the
    default only, so this script runs against engines before and after the parameter.
    """
    from rbfkm_engine import RBFKMeans

    params = RBFKMeans(2).get_params()
    if "matmul_precision" not in params:
        return [None]
    try:
        from rbfkm_engine.params import PARAMETER_CONSTRAINTS

        options = PARAMETER_CONSTRAINTS.get("matmul_precision", [])
        values = [v for c in options for v in getattr(c, "values", ())]
    except ImportError:
        values = []
    return values or [params["matmul_precision"]]


def engine_variants() -> list[Variant]:
    """rbfkm-hard once per matmul precision."""
    try:
        precisions = engine_precisions()
    except ImportError:
        return [Variant("rbfkm-hard", "rbfkm-hard", "-")]
    out = []
    for value in precisions:
        if value is None:
            out.append(Variant("rbfkm-hard", "rbfkm-hard", "default", note="no matmul_precision"))
            continue
        precision = ENGINE_PRECISION.get(value, value)
        out.append(
            Variant(f"rbfkm-hard[{value}]", "rbfkm-hard", precision, {"matmul_precision": value})
        )
    return out


def flash_note(run: Run) -> str:
    """flash-kmeans' note: on a CPU only its torch fallback runs (a dry run of the runner)."""
    return "" if run.cuda else "torch fallback (CPU dry run)"


#: fast-pytorch-kmeans sizes its blocks by allocating a trial tensor as large as fits.
FPK_NOTE = "peak includes its memory probe"


def speed_variants(run: Run) -> list[Variant]:
    """Every method and precision of the speed part, the engine first."""
    flash = flash_note(run)
    return [
        *engine_variants(),
        Variant("fpk[fp32]", "fpk", "fp32", {"allow_tf32": False}, FPK_NOTE),
        Variant("fpk[tf32]", "fpk", "tf32", {"allow_tf32": True}, FPK_NOTE),
        Variant(
            "flash-kmeans[fp32]",
            "flash-kmeans",
            "tf32",
            {"dtype": "float32"},
            flash or "fp32 input, tl.dot in TF32",
        ),
        Variant("flash-kmeans[bf16]", "flash-kmeans", "bf16", {"dtype": "bfloat16"}, flash),
        Variant("flash-kmeans[fp16]", "flash-kmeans", "fp16", {"dtype": "float16"}, flash),
        Variant("faiss-gpu", "faiss-gpu", "fp32"),
    ]


def quality_variants(run: Run) -> list[Variant]:
    """The whole fits with defaults: the annealed fit first, the slowest peer (fpk: 100
    iterations, each writing a k x n mask) last, so a short budget cuts that one."""
    return [
        Variant("rbfkm-entmax15", "rbfkm-entmax15", "default", note="annealed"),
        Variant("rbfkm-hard", "rbfkm-hard", "default", note="k-means++"),
        Variant(
            "flash-kmeans",
            "flash-kmeans",
            "tf32",
            {"dtype": "float32"},
            flash_note(run) or "random rows, 25 iters",
        ),
        Variant("faiss-gpu", "faiss-gpu", "fp32", note="random rows, 25 iters"),
        Variant("fpk", "fpk", "fp32", {"allow_tf32": False}, "random rows, max_iter 100"),
    ]


# --------------------------------------------------------------------------- speed


def timed_fit(
    run: Run, variant: Variant, X: torch.Tensor, k: int, spec: common.RunSpec
) -> dict[str, Any]:
    """Wall seconds, peak MiB and output of one call of the variant's runner."""
    fn = runner(variant.method)
    with peak_memory(run.device) as mem:
        wall, out = common.timed(lambda: fn(X, k, spec), run.device)
    return {"wall_s": wall, "peak_mib": mem["peak_mib"], "out": out}


def lloyd_runs(
    run: Run, variant: Variant, X: torch.Tensor, C0: np.ndarray
) -> dict[int, dict[str, Any]]:
    """The warm-up (2 iterations on all of X, untimed) and the best timed run per N."""
    k = C0.shape[0]
    runner(variant.method)(X, k, variant.spec(run, "speed", 2, init=C0))
    release(run.device)
    runs: dict[int, dict[str, Any]] = {}
    for n_iter in per_shape(run.args.iters, 2):
        for _ in range(max(1, run.args.repeats)):
            res = timed_fit(run, variant, X, k, variant.spec(run, "speed", n_iter, init=C0))
            if n_iter not in runs or res["wall_s"] < runs[n_iter]["wall_s"]:
                runs[n_iter] = res
            release(run.device)
    return runs


def lloyd_speed(
    run: Run, variant: Variant, X: torch.Tensor, y: torch.Tensor, C0: np.ndarray
) -> dict[str, Any]:
    """ms per hard iteration by the difference of an N1 and an N2 run, and the N2 quality.

    The iterations are those the method reports (the engine stops at an exact fixed
    point; the others run every iteration with their tol).
    """
    n1, n2 = per_shape(run.args.iters, 2)
    runs = lloyd_runs(run, variant, X, C0)
    iters = {n: runs[n]["out"].n_iter or n for n in (n1, n2)}
    dw, di = runs[n2]["wall_s"] - runs[n1]["wall_s"], iters[n2] - iters[n1]
    ms = dw / di * 1e3 if di > 0 else None
    ev = common.evaluate_centroids(X, runs[n2]["out"].centroids, y, device=run.device)
    n, d = X.shape
    return {
        "precision": variant.precision,
        "note": variant.note,
        "iters": [iters[n1], iters[n2]],
        "wall_s": [runs[n1]["wall_s"], runs[n2]["wall_s"]],
        "ms_per_iter": ms,
        "tflops": tflops(2.0 * n * d * C0.shape[0], ms) if ms else None,
        "peak_mib": runs[n2]["peak_mib"],
        "inertia": ev["inertia"],
        "ari": ev["ari"],
        "n_empty": ev["n_empty"],
    }


def speed_part(run: Run, shape: tuple[int, int, int]) -> None:
    """Floor and hard Lloyd speed of every method at one shape."""
    n, d, k = shape
    X, y = make_blobs_on_device(n, d, k, run.args.seed, run.args.spread, run.device)
    C0 = shared_init(X, k, run.args.seed)
    floor_section(run, shape, X, C0)
    entry = run.shape_report(shape).setdefault("speed", {})
    for variant in speed_variants(run):
        if run.out_of_time(f"speed {variant.label} at {shape_name(shape)}"):
            break
        entry[variant.label] = measure(
            run, variant, lambda v=variant: lloyd_speed(run, v, X, y, C0)
        )
        print(speed_line(variant.label, entry[variant.label]), flush=True)
        run.save()
    print_speed(run, shape)


def measure(run: Run, variant: Variant, body: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``body()`` unless the method cannot run here; a failure is recorded, not raised."""
    why = unavailable(run, variant.method)
    if why:
        return {"skipped": why, "precision": variant.precision}
    t0 = time.perf_counter()
    try:
        res = body()
    except Exception as exc:  # one method failing must not stop the others
        res = {"error": error_text(exc), "precision": variant.precision}
    release(run.device)
    res["part_s"] = time.perf_counter() - t0
    return res


def speed_line(label: str, res: dict[str, Any]) -> str:
    """The progress line printed after each method of the speed part."""
    if "skipped" in res or "error" in res:
        return f"   {label}: {res.get('skipped') or 'error: ' + res['error']}"
    return f"   {label}: {common.fmt(res['ms_per_iter'], '.2f')} ms/iter ({res['part_s']:.1f}s)"


# --------------------------------------------------------------------------- speed report


def table(headers: list[str], rows: list[list[str]]) -> str:
    """``common.format_table`` with short rows (errors, skips) padded to the headers."""
    return common.format_table(headers, [row + [""] * (len(headers) - len(row)) for row in rows])


def speed_rows(res: dict[str, Any], floor: dict[str, Any], tf32_ms: float) -> list[list[str]]:
    """The speed table's rows."""
    fmt = common.fmt
    best = min((r["inertia"] for r in res.values() if "inertia" in r), default=None)
    rows = []
    for label, r in res.items():
        if "ms_per_iter" not in r:
            rows.append(
                [label, r.get("precision", ""), r.get("skipped") or "error: " + r.get("error", "")]
            )
            continue
        ms = r["ms_per_iter"]
        gemm = floor.get(FLOOR_OF.get(r["precision"], r["precision"]), {}).get("ms")
        rows.append(
            [
                label,
                r["precision"],
                "/".join(str(i) for i in r["iters"]),
                "/".join(f"{w:.2f}" for w in r["wall_s"]),
                fmt(ms, ".2f"),
                fmt(r["tflops"], ".0f"),
                fmt(ms / tf32_ms if ms else None, ".2f"),
                fmt(ms / gemm if ms and gemm else None, ".2f"),
                fmt(r["peak_mib"], ".0f"),
                fmt(r["inertia"], ".7g"),
                fmt(r["inertia"] / best - 1 if best else None, ".1e"),
                fmt(r["ari"], ".3f"),
                fmt(r["n_empty"], "d"),
                r.get("note", ""),
            ]
        )
    return rows


SPEED_HEADERS = [
    "method", "prec", "iters N1/N2", "wall s", "ms/iter", "TFLOP/s", "x TF32 roof",
    "x GEMM", "peak MiB", "inertia N2", "vs best", "ARI", "empty", "note",
]  # fmt: skip


def print_speed(run: Run, shape: tuple[int, int, int]) -> None:
    """The speed table of one shape and the engine's ratios to the roofline and peers."""
    entry = run.shape_report(shape)
    n1, n2 = per_shape(run.args.iters, 2)
    print(
        f"\n=== {shape_name(shape)}: hard Lloyd from the same C0,"
        f" ms/iter = (wall({n2}) - wall({n1})) / (iterations({n2}) - iterations({n1}))"
    )
    roof = entry["roofline"]
    print(table(SPEED_HEADERS, speed_rows(entry["speed"], entry["floor"], roof["tf32_ms"])))
    print(
        "   x TF32 roof: ms/iter over the TF32 roofline; x GEMM: over the plain matmul"
        " of the same precision; vs best: inertia over the least of the table, - 1"
    )
    for line in ratio_lines(entry["speed"], roof):
        print("   " + line)
    sys.stdout.flush()


def ratio_lines(res: dict[str, Any], roof: dict[str, Any]) -> list[str]:
    """rbfkm-hard per precision against the target and the peers at the same precision."""
    peers = {
        label: r
        for label, r in res.items()
        if not label.startswith("rbfkm") and r.get("ms_per_iter")
    }
    lines = []
    for label, r in res.items():
        if not label.startswith("rbfkm") or not r.get("ms_per_iter"):
            continue
        ms = r["ms_per_iter"]
        same = [
            f"{p} {ms / q['ms_per_iter']:.2f}x"
            for p, q in peers.items()
            if q["precision"] == r["precision"]
        ]
        line = f"{label} ({r['precision']}): {ms:.2f} ms/iter"
        line += (
            f"; vs peers at {r['precision']} (time ratio, < 1 faster): {', '.join(same) or 'none'}"
        )
        if r["precision"] in ("tf32", "bf16", "default"):
            verdict = "met" if ms <= roof["target_ms"] else "missed"
            line += f"; target <= {roof['target_ms']:.2f} ms {verdict}"
        lines.append(line)
    return lines


# --------------------------------------------------------------------------- quality


class Deadline:
    """An rbfkm progress callback that stops the fit once ``seconds`` have passed.

    It keeps the last :class:`~rbfkm_engine.FitProgress`, so a stopped fit can be
    reported with the phase and iteration it had reached.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.start = time.perf_counter()
        self.last: Any = None
        self.hit = False

    def __call__(self, info: Any) -> bool:
        self.last = info
        if time.perf_counter() - self.start > self.seconds:
            self.hit = True
        return self.hit

    def summary(self) -> dict[str, Any]:
        """Deadline, whether it stopped the fit, and the progress last reported."""
        last = self.last
        return {
            "deadline_s": self.seconds,
            "stopped_at_deadline": self.hit,
            "phase": getattr(last, "phase", None),
            "fraction": getattr(last, "fraction", None),
            "sigma": getattr(last, "sigma", None),
        }


def quality_fit(
    run: Run, variant: Variant, X: torch.Tensor, y: torch.Tensor, k: int, seed: int, deadline: float
) -> dict[str, Any]:
    """One whole fit with the method's defaults: wall, iterations, float64 judge."""
    stop = Deadline(deadline) if variant.method.startswith("rbfkm") else None
    spec = variant.spec(run, "quality", seed=seed, callback=stop)
    res = timed_fit(run, variant, X, k, spec)
    res["note"] = variant.note
    out = res.pop("out")
    ev = common.evaluate_centroids(X, out.centroids, y, device=run.device)
    res.update(
        seed=seed, n_iter=out.n_iter, inertia=ev["inertia"], ari=ev["ari"], n_empty=ev["n_empty"]
    )
    res.update(
        {key: out.extra[key] for key in ("temperatures", "stopped_early") if key in out.extra}
    )
    if stop is not None:
        res.update(stop.summary())
    return res


def warm_quality(run: Run, variant: Variant, X: torch.Tensor, k: int) -> None:
    """One small fit (a slice of X, at most a few seconds) so JIT and set-up stay out of
    the timed fits."""
    small = X[: min(X.shape[0], max(8 * k, 8192))].contiguous()
    spec = variant.spec(
        run,
        "quality",
        seed=99,
        callback=Deadline(3.0) if variant.method.startswith("rbfkm") else None,
    )
    runner(variant.method)(small, k, spec)


def quality_method(
    run: Run,
    variant: Variant,
    shape: tuple[int, int, int],
    data: tuple[torch.Tensor, torch.Tensor],
    seeds: int,
    deadline: float,
) -> list[dict[str, Any]]:
    """Every seed of one method at one shape (stops starting seeds once the budget is spent)."""
    X, y = data
    k = shape[2]
    warm_quality(run, variant, X, k)
    release(run.device)
    fits = []
    for seed in range(seeds):
        if seed and run.out_of_time(f"quality {variant.label} seed {seed} at {shape_name(shape)}"):
            break
        fit = measure(
            run,
            variant,
            lambda s=seed: quality_fit(
                run, variant, X, y, k, s, min(deadline, max(run.left(), 5.0))
            ),
        )
        fits.append(fit)
        print(quality_line(variant.label, fit), flush=True)
    return fits


def quality_part(run: Run, shape: tuple[int, int, int], seeds: int, deadline: float) -> None:
    """Whole fits of every method at one shape."""
    n, d, k = shape
    data = make_blobs_on_device(n, d, k, run.args.seed, run.args.spread, run.device)
    entry = run.shape_report(shape).setdefault("quality", {})
    for variant in quality_variants(run):
        if run.out_of_time(f"quality {variant.label} at {shape_name(shape)}"):
            break
        why = unavailable(run, variant.method)
        if why:
            entry[variant.label] = [{"skipped": why}]
            print(f"   {variant.label}: {why}")
            continue
        try:
            entry[variant.label] = quality_method(run, variant, shape, data, seeds, deadline)
        except Exception as exc:  # the warm-up failed
            entry[variant.label] = [{"error": error_text(exc)}]
        run.save()
        release(run.device)
    print_quality(run, shape, deadline)


def quality_line(label: str, fit: dict[str, Any]) -> str:
    """The progress line printed after each quality fit."""
    if "wall_s" not in fit:
        return f"   {label}: {fit.get('skipped') or 'error: ' + fit.get('error', '')}"
    ari = common.fmt(fit["ari"], ".3f")
    return f"   {label} seed {fit['seed']}: {fit['wall_s']:.2f}s, ARI {ari}{deadline_text(fit)}"


def deadline_text(fit: dict[str, Any]) -> str:
    """', stopped at deadline (30s) in phase anneal, 41% done' or ''."""
    if not fit.get("stopped_at_deadline"):
        return ""
    frac = fit.get("fraction")
    done = f", {frac:.0%} done" if frac is not None else ""
    return f", stopped at deadline ({fit['deadline_s']:g}s) in phase {fit.get('phase')}{done}"


def quality_rows(res: dict[str, Any]) -> list[list[str]]:
    """The quality table's rows, one per fit."""
    fmt = common.fmt
    rows = []
    for label, fits in res.items():
        for fit in fits:
            if "wall_s" not in fit:
                rows.append([label, "-", fit.get("skipped") or "error: " + fit.get("error", "")])
                continue
            rows.append(
                [
                    label,
                    fmt(fit["seed"], "d"),
                    fmt(fit["wall_s"], ".2f"),
                    fmt(fit["n_iter"], "d"),
                    fmt(fit.get("temperatures"), "d"),
                    fmt(fit["inertia"], ".7g"),
                    fmt(fit["ari"], ".4f"),
                    fmt(fit["n_empty"], "d"),
                    fmt(fit["peak_mib"], ".0f"),
                    "; ".join(filter(None, [fit.get("note"), deadline_text(fit)[2:]])),
                ]
            )
    return rows


def print_quality(run: Run, shape: tuple[int, int, int], deadline: float) -> None:
    """The quality table of one shape."""
    res = run.shape_report(shape).get("quality", {})
    print(
        f"\n=== {shape_name(shape)}: whole fits, defaults and own init"
        f" (rbfkm deadline {deadline:g}s)"
    )
    headers = [
        "method",
        "seed",
        "wall s",
        "iters",
        "records",
        "inertia",
        "ARI",
        "empty",
        "peak MiB",
        "note",
    ]
    print(table(headers, quality_rows(res)))
    print("   records: the fit's history_ entries (temperatures + Lloyd phases)")
    sys.stdout.flush()


# --------------------------------------------------------------------------- main


def new_report(args: argparse.Namespace) -> dict[str, Any]:
    """The report skeleton: options, and room for every part."""
    return {
        "args": {key: str(value) for key, value in vars(args).items()},
        "machine": {},
        "shapes": {},
        "part_s": {},
        "part_errors": {},
        "skipped": [],
    }


def no_cuda(run: Run) -> int:
    """The note (and JSON) of a run asked for CUDA where there is none; exit status 0."""
    print("gpu_compare: CUDA is not available here; nothing to measure (skipped).")
    run.report["skipped"].append("no CUDA")
    run.save()
    return 0


def print_header(run: Run) -> None:
    """The machine line."""
    m = run.report["machine"]
    print(
        f"rbfkm GPU benchmark {m['date']}: {m['gpu']}, torch {m['torch']} (CUDA {m['cuda']}, "
        f"driver {m.get('driver')}), triton {m.get('triton')}, fpk {m.get('fast-pytorch-kmeans')}, "
        f"flash-kmeans {m.get('flash-kmeans')}; budget {run.args.time_budget:g}s",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    """Run the parts; print tables; write the JSON after every part."""
    args = parse_args(argv)
    if args.quick:
        args.iters = "2,6" if args.iters == "5,25" else args.iters
    n1, n2 = per_shape(args.iters, 2)
    if not 0 < n1 < n2:
        sys.exit(f"gpu_compare: --iters N1,N2 needs 0 < N1 < N2, got {args.iters!r}")
    run = Run(args, new_report(args))
    if run.cuda and not torch.cuda.is_available():
        return no_cuda(run)
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 unless a variant asks for TF32
    run.report["machine"] = machine_info(args.device)
    print_header(run)
    parts = set(args.parts.split(","))
    if "peak" in parts:
        run_part(run, "peak", lambda: peak_part(run))
    all_shapes = shapes(args.quick)
    seeds = per_shape(args.seeds, len(all_shapes))
    deadlines = per_shape(args.deadlines, len(all_shapes), float)
    for shape in all_shapes if "speed" in parts else ():
        run_part(run, f"speed {shape_name(shape)}", lambda s=shape: speed_part(run, s))
    for i, shape in enumerate(all_shapes if "quality" in parts else ()):
        run_part(
            run,
            f"quality {shape_name(shape)}",
            lambda s=shape, i=i: quality_part(run, s, seeds[i], deadlines[i]),
        )
    run.save()
    print(f"\nelapsed {run.elapsed():.1f}s" + (f"; wrote {args.json}" if args.json else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
