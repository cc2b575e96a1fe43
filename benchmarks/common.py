"""Shared helpers for the rbfkm benchmarks.

Data sets, thread pinning, timing, peak-memory probes, the float64 evaluation that every
method's centroids go through, and one runner per method (the engine and its peers).

Run as a script (``python benchmarks/common.py probe SPEC.json``) it is the fresh
subprocess that measures the peak memory of one fit; ``compare.py`` starts it.
"""

from __future__ import annotations

import gc
import json
import math
import os
import re
import sys
import threading
import time
import types
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ENGINE_METHODS = ("rbfkm-hard", "rbfkm-softmax", "rbfkm-entmax15", "rbfkm-overshoot")
PEER_METHODS = ("sklearn-n1", "sklearn-n10", "faiss", "fpk")
ALL_METHODS = ENGINE_METHODS + PEER_METHODS
#: The methods a run compares unless told which: not the engine's options beyond its
#: defaults (``rbfkm-overshoot``: entmax15 with ``overshoot=2``), which ``--only`` names.
DEFAULT_METHODS = tuple(m for m in ALL_METHODS if m != "rbfkm-overshoot")
# Peers that only make sense on a GPU (gpu_compare.py): not part of the CPU comparison.
GPU_PEER_METHODS = ("flash-kmeans",)
# sklearn with n_init=10 and an explicit init makes no sense: it only runs in the quality part.
QUALITY_ONLY = ("sklearn-n10",)
MIB = 1 << 20


def set_thread_env(threads: int) -> None:
    """Set the thread variables that BLAS / OpenMP read at import (call before importing them)."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "BLIS_NUM_THREADS"):
        os.environ[var] = str(threads)


def pin_threads(threads: int) -> Any:
    """Pin torch, faiss and every BLAS/OpenMP pool threadpoolctl sees to ``threads``.

    Returns the threadpoolctl limiter; keep a reference for as long as the limit should hold.
    """
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(threads)
    try:
        import faiss

        faiss.omp_set_num_threads(threads)
    except ImportError:
        pass
    return threadpool_limits(limits=threads)


def thread_report() -> list[dict[str, Any]]:
    """The thread pools loaded in this process and their sizes (for the record)."""
    from threadpoolctl import threadpool_info

    return [
        {k: info.get(k) for k in ("user_api", "internal_api", "num_threads", "prefix")}
        for info in threadpool_info()
    ]


def available(module: str) -> bool:
    """Whether ``module`` imports."""
    try:
        __import__(module)
    except Exception:
        return False
    return True


# --------------------------------------------------------------------------- data sets


@dataclass
class Dataset:
    """One benchmark data set: float32 C-order X, the k to fit, true labels if known."""

    name: str
    X: np.ndarray
    k: int
    y: np.ndarray | None = None
    gating: bool = True  # the speed and memory targets are judged on this data set
    max_quality_seeds: int | None = None
    description: str = ""

    @property
    def shape(self) -> tuple[int, int, int]:
        """(n, d, k)."""
        return self.X.shape[0], self.X.shape[1], self.k


def make_blobs_dataset(n: int, d: int, k: int, seed: int = 0, **extra: Any) -> Dataset:
    """Gaussian blobs, equal sizes, centres in [-10, 10]^d, std 1.5 (mild overlap)."""
    from sklearn.datasets import make_blobs

    X, y = make_blobs(
        n_samples=n,
        n_features=d,
        centers=k,
        cluster_std=1.5,
        center_box=(-10, 10),
        random_state=seed,
    )
    return Dataset(
        name=f"blobs-{n}x{d}-k{k}",
        X=np.ascontiguousarray(X, dtype=np.float32),
        k=k,
        y=y.astype(np.int64),
        description=f"make_blobs n={n} d={d} centers={k} std=1.5",
        **extra,
    )


def make_hard_dataset(n: int, d: int = 8, k: int = 50, seed: int = 0, **extra: Any) -> Dataset:
    """Many uneven, overlapping blobs: Dirichlet(0.5) sizes, log-normal spreads, centres close.

    Local minima are plentiful here (big clusters get split, small ones merged), so the
    initialisation and the number of restarts matter.
    """
    rng = np.random.default_rng(seed)
    weights = rng.dirichlet(np.full(k, 0.5))
    sizes = np.maximum(rng.multinomial(n - 5 * k, weights), 0) + 5
    centres = rng.uniform(-6.0, 6.0, size=(k, d))
    spreads = rng.lognormal(mean=0.0, sigma=0.5, size=k)
    parts = [centres[j] + spreads[j] * rng.standard_normal((sizes[j], d)) for j in range(k)]
    X = np.concatenate(parts)
    y = np.repeat(np.arange(k), sizes)
    order = rng.permutation(X.shape[0])
    return Dataset(
        name=f"hard-{X.shape[0]}x{d}-k{k}",
        X=np.ascontiguousarray(X[order], dtype=np.float32),
        k=k,
        y=y[order].astype(np.int64),
        description=f"{k} blobs, Dirichlet(0.5) sizes, log-normal(0, 0.5) spreads, box [-6, 6]^{d}",
        **extra,
    )


def load_digits_dataset(**extra: Any) -> Dataset:
    """scikit-learn's handwritten digits (1797 x 64, 10 classes), real labels."""
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    return Dataset(
        name="digits-1797x64-k10",
        X=np.ascontiguousarray(X, dtype=np.float32),
        k=10,
        y=y.astype(np.int64),
        description="sklearn.datasets.load_digits (real data, true labels)",
        **extra,
    )


def initial_centroids(X: np.ndarray, k: int, seed: int) -> np.ndarray:
    """The shared initial centroids C0 of the fixed-iteration speed runs: k distinct rows.

    Random rows rather than k-means++: from k-means++ centres, well-separated blobs reach an
    exact fixed point in two or three Lloyd steps, and methods that stop there (sklearn,
    the engine) would spread their fixed costs over fewer iterations than faiss.
    """
    rng = np.random.default_rng(seed)
    return np.ascontiguousarray(X[rng.choice(X.shape[0], k, replace=False)])


# --------------------------------------------------------------------------- evaluation


def evaluate_centroids(
    X: Any,
    C: Any,
    y: Any = None,
    *,
    device: str = "cpu",
    chunk_rows: int = 65536,
) -> dict[str, Any]:
    """The one shared judge: assign every point to its nearest centroid, in float64.

    Returns inertia (sum of squared distances to the nearest centroid), the number of empty
    clusters (centroids no point is nearest to, or non-finite ones), ARI against ``y`` when
    given. Every method's returned centroids go through this function, so the figures do
    not depend on how (or whether) a method reports its own objective.

    X is cast to float64 one block of ``chunk_rows`` rows at a time, so the judge adds
    about ``chunk_rows x (k + d)`` doubles to X, not a float64 copy of X nor an ``n x k``
    block (10^7 x 128 points stay within a few hundred MiB on a GPU); the ARI is computed
    on the device too (:func:`adjusted_rand`), exact in integers.
    """
    import torch

    Xt = torch.as_tensor(X).to(device=device)
    Ct = torch.as_tensor(np.asarray(C) if not torch.is_tensor(C) else C).to(
        device=device, dtype=torch.float64
    )
    finite = torch.isfinite(Ct).all(dim=1)
    Ct = torch.where(finite[:, None], Ct, torch.zeros_like(Ct))
    cn = (Ct * Ct).sum(dim=1)
    cn = torch.where(finite, cn, torch.full_like(cn, math.inf))
    labels = torch.empty(Xt.shape[0], dtype=torch.int64, device=device)
    total = torch.zeros((), dtype=torch.float64, device=device)
    for start in range(0, Xt.shape[0], chunk_rows):
        xb = Xt[start : start + chunk_rows].to(torch.float64)
        dist = (xb * xb).sum(dim=1, keepdim=True) - 2.0 * (xb @ Ct.T) + cn[None, :]
        best, idx = dist.min(dim=1)
        total += best.clamp_min(0).sum()
        labels[start : start + chunk_rows] = idx
    counts = torch.bincount(labels, minlength=Ct.shape[0])
    out: dict[str, Any] = {
        "inertia": float(total),
        "n_empty": int((counts == 0).sum()),
        "ari": None,
        "labels": labels.cpu().numpy(),
    }
    if y is not None:
        out["ari"] = adjusted_rand(torch.as_tensor(y).to(device), labels)
    return out


def adjusted_rand(labels_true: Any, labels_pred: Any) -> float:
    """Adjusted Rand index of two labellings (torch tensors on one device), as sklearn's.

    The contingency table is one ``bincount`` on the device and the pair counts are exact
    integers, so 10^7 labels take milliseconds on a GPU (sklearn's sort-based table takes
    seconds there). Matches ``sklearn.metrics.adjusted_rand_score`` to rounding.
    """
    import torch

    _, a = torch.unique(labels_true.reshape(-1), return_inverse=True)
    _, b = torch.unique(labels_pred.reshape(-1), return_inverse=True)
    n, n_b = a.numel(), int(b.max()) + 1 if b.numel() else 1

    def pairs(counts: Any) -> int:
        counts = counts.to(torch.int64)
        return int((counts * (counts - 1) // 2).sum())

    cells = pairs(torch.bincount(a * n_b + b))
    rows, cols = pairs(torch.bincount(a)), pairs(torch.bincount(b))
    total = n * (n - 1) // 2
    den = (rows + cols) * total - 2 * rows * cols
    if den == 0:  # both labellings trivial (one cluster, or all singletons): sklearn's 1.0
        return 1.0
    return 2 * (cells * total - rows * cols) / den


def distance_gflops(n: int, d: int, k: int, seconds_per_iter: float) -> float:
    """Achieved GFLOP/s of the distance GEMM: 2 n k d flops per iteration."""
    if seconds_per_iter <= 0:
        return math.nan
    return 2.0 * n * k * d / seconds_per_iter / 1e9


# --------------------------------------------------------------------------- timing


def synchronize(device: str) -> None:
    """Wait for queued CUDA work (no-op on CPU)."""
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)


def timed(fn: Callable[[], Any], device: str = "cpu") -> tuple[float, Any]:
    """Wall seconds of ``fn()`` (synchronised on CUDA) and its result."""
    synchronize(device)
    start = time.perf_counter()
    result = fn()
    synchronize(device)
    return time.perf_counter() - start, result


def best_time(fn: Callable[[], Any], repeats: int, device: str = "cpu") -> float:
    """Least wall seconds over ``repeats`` calls (the least is the least disturbed by load)."""
    return min(timed(fn, device)[0] for _ in range(max(1, repeats)))


def engine_chunk_rows(k: int, d: int, itemsize: int, device: str = "cpu") -> int | None:
    """Rows per block that ``RBFKMeans.fit`` uses by default (None without the engine)."""
    try:
        import torch

        from rbfkm_engine.blocks import default_chunk_rows
    except ImportError:
        return None
    return default_chunk_rows(k, d, itemsize, torch.device(device))


def distance_step(X: Any, C: Any, repeats: int = 3, device: str = "cpu") -> dict[str, Any]:
    """GFLOP/s of a plain ``torch.matmul`` (n x d @ d x k) and of the engine's distance step.

    The engine's step is what its fit does per iteration: ``squared_distances`` over the
    row chunks ``RBFKMeans`` uses (``engine_chunk_rows``), with ||x||^2 precomputed.
    """
    import torch

    X = torch.as_tensor(X).to(device)
    C = torch.as_tensor(C).to(device=device, dtype=X.dtype)
    n, d = X.shape
    k = C.shape[0]
    CT = C.T.contiguous()
    torch.matmul(X, CT)  # warm-up
    t_mm = best_time(lambda: torch.matmul(X, CT), repeats, device)
    out: dict[str, Any] = {
        "matmul_s": t_mm,
        "matmul_gflops": distance_gflops(n, d, k, t_mm),
        "engine_s": None,
        "engine_gflops": None,
    }
    chunk = engine_chunk_rows(k, d, X.element_size(), str(X.device))
    if chunk is None:
        return out
    from rbfkm_engine import distances as dist
    from rbfkm_engine.blocks import iter_chunks

    x_sq = dist.squared_norms(X)

    def engine_step() -> None:
        c_sq = dist.squared_norms(C)
        for rows in iter_chunks(n, chunk):
            dist.squared_distances(X[rows], C, x_sq[rows], c_sq)

    engine_step()
    t_en = best_time(engine_step, repeats, device)
    out.update(
        engine_s=t_en,
        engine_gflops=distance_gflops(n, d, k, t_en),
        chunk_rows=chunk,
        fraction=(t_mm / t_en) if t_en > 0 else None,
    )
    return out


def distance_line(dist: dict[str, Any], digits: int = 1) -> str:
    """The printed line for a :func:`distance_step` result (plus its ``in_fit`` entry)."""
    matmul = dist["matmul_gflops"]
    line = f"-- distance step: torch.matmul {matmul:.{digits}f} GFLOP/s"
    if dist.get("engine_gflops"):
        line += (
            f", engine squared_distances (chunks of {dist['chunk_rows']} rows) "
            f"{dist['engine_gflops']:.{digits}f} GFLOP/s = {dist['engine_gflops'] / matmul:.0%}"
        )
    in_fit = dist.get("in_fit") or {}
    if in_fit.get("gflops"):
        line += (
            f"; inside a profiled hard fit {in_fit['gflops']:.{digits}f} GFLOP/s"
            f" = {in_fit['gflops'] / matmul:.0%}"
        )
    return line


def in_fit_gemm(
    X: Any, C0: Any, n_iter: int, device: str = "cpu", repeats: int = 3
) -> dict[str, Any] | None:
    """GFLOP/s of the distance GEMMs inside a real ``RBFKMeans(assignment="hard").fit``.

    Profiles a fit from ``C0`` (``n_iter`` iterations, tol 0) with ``torch.profiler`` and
    sums the time of every top-level ``aten::addmm`` / ``aten::mm`` whose operands are a
    ``(rows, d)`` block of X and the ``(d, k)`` centroids, whatever function of the engine
    issues them: this is the distance step as the solver runs it. The least total over
    ``repeats`` profiled fits is kept. None without the engine.

    On the CPU the fit runs on one thread: the profiler sees only the thread that started
    it, and a fit on several threads runs its blocks on threads of its own (see
    ``rbfkm_engine/parallel.py``). ``matmul_gflops`` is then a plain ``torch.matmul`` of the
    same shape on one thread, the reference for the in-fit rate. On rows of at most
    ``rbfkm_engine.native.DIRECT_MAX_FEATURES`` features the engine's fused kernel computes
    the distances itself, without a GEMM: ``rows`` is then 0.
    """
    try:
        import torch
        from torch.profiler import ProfilerActivity

        from rbfkm_engine import RBFKMeans
    except ImportError:
        return None
    X = torch.as_tensor(X).to(device)
    C0n = np.asarray(_to_numpy(C0))
    d = X.shape[1]
    k = C0n.shape[0]
    cuda = device.startswith("cuda")
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    model = RBFKMeans(k, assignment="hard", init=C0n, max_iter=n_iter, tol=0.0, device=device)
    threads = torch.get_num_threads()
    if not cuda:
        torch.set_num_threads(1)
    try:
        CT = torch.as_tensor(C0n).to(device=device, dtype=X.dtype).T.contiguous()
        t_mm = best_time(lambda: torch.matmul(X, CT), max(1, repeats), device)
        best = _profiled_gemm(model, X, d, k, acts, device, repeats)
    finally:
        torch.set_num_threads(threads)
    total_us, rows = best
    reference = {"matmul_gflops": distance_gflops(X.shape[0], d, k, t_mm)}
    reference["threads"] = threads if cuda else 1
    if total_us <= 0 or not rows:
        return {"gemm_s": None, "rows": 0, "gflops": None, "iterations": int(model.n_iter_)}
    return {
        "gemm_s": total_us / 1e6,
        "rows": rows,
        "gflops": 2.0 * rows * d * k / (total_us * 1e3),
        "iterations": int(model.n_iter_),
        **reference,
    }


def _profiled_gemm(
    model: Any, X: Any, d: int, k: int, acts: list[Any], device: str, repeats: int
) -> tuple[float, int]:
    """The least (microseconds, rows) of the distance GEMMs over ``repeats`` profiled fits."""
    from torch.profiler import profile

    cuda = device.startswith("cuda")
    best: tuple[float, int] | None = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(X[: max(4 * k, 2000)])  # warm-up
        for _ in range(max(1, repeats)):
            with profile(activities=acts, record_shapes=True) as prof:
                model.fit(X)
                synchronize(device)
            total_us, rows = _gemm_time(prof.events(), d, k, cuda)
            if best is None or (rows and total_us < best[0]):
                best = (total_us, rows)
    assert best is not None
    return best


def _gemm_time(events: Any, d: int, k: int, cuda: bool) -> tuple[float, int]:
    """Microseconds and rows of the top-level (rows, d) x (d, k) addmm / mm events."""
    names = ("aten::addmm", "aten::mm")
    total_us, rows = 0.0, 0
    for evt in events:
        if evt.name not in names or not evt.input_shapes:
            continue
        parent = getattr(evt, "cpu_parent", None)
        if parent is not None and parent.name in names:
            continue
        shapes = [list(sh) for sh in evt.input_shapes]
        # addmm(bias, block, C^T) / mm(block, C^T)
        block, other = shapes[1:3] if evt.name == "aten::addmm" else shapes[0:2]
        if len(block) != 2 or block[1] != d or len(other) != 2 or other[0] != d:
            continue
        if other[1] != k:  # another GEMM of the same block (candidates, swaps)
            continue
        if cuda:
            dev_t = getattr(evt, "device_time_total", None)
            total_us += dev_t if dev_t is not None else evt.cuda_time_total
        else:
            total_us += evt.cpu_time_total
        rows += block[0]
    return total_us, rows


# --------------------------------------------------------------------------- memory


def current_rss() -> int:
    """Resident set size of this process, bytes."""
    import psutil

    return int(psutil.Process().memory_info().rss)


@contextmanager
def peak_rss() -> Iterator[dict[str, Any]]:
    """Measure the RSS high-water mark of the block, in bytes.

    On Linux the kernel keeps the high-water mark (VmHWM) and lets a process reset it by
    writing 5 to /proc/self/clear_refs, which makes the reading exact and free of sampling.
    Elsewhere (or when that file is not writable) a thread samples RSS every 2 ms.
    Yields a dict that holds ``baseline``, ``peak`` and ``method`` after the block.
    """
    gc.collect()
    result: dict[str, Any] = {"baseline": current_rss()}
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        result["method"] = "VmHWM"
    except OSError:
        result["method"] = "sampling"
    stop = threading.Event()
    sampled = [result["baseline"]]

    def sample() -> None:
        while not stop.wait(0.002):
            sampled[0] = max(sampled[0], current_rss())

    sampler = None
    if result["method"] == "sampling":
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
    try:
        yield result
    finally:
        if sampler is not None:
            stop.set()
            sampler.join()
            result["peak"] = max(sampled[0], current_rss())
        else:
            with open("/proc/self/status") as fh:
                hwm = re.search(r"VmHWM:\s+(\d+)\s+kB", fh.read())
            result["peak"] = int(hwm.group(1)) * 1024 if hwm else current_rss()


# --------------------------------------------------------------------------- runners


@dataclass
class RunSpec:
    """How to run a method.

    mode "speed": start from ``init`` and run ``n_iter`` iterations (tol 0 where the method
    has one); mode "quality": the method's own initialisation from ``seed``, its defaults.
    """

    mode: str
    n_iter: int = 20
    seed: int = 0
    init: np.ndarray | None = None
    device: str = "cpu"
    # Method-specific options (e.g. the engine's matmul_precision, fpk's allow_tf32,
    # flash-kmeans' dtype) and a progress callback (engine only: FitProgress -> stop?).
    params: dict[str, Any] = field(default_factory=dict)
    callback: Callable[[Any], Any] | None = None


@dataclass
class RunOutput:
    """Centroids (k x d, numpy) and the iterations the method reports having run."""

    centroids: np.ndarray
    n_iter: int | None
    extra: dict[str, Any] = field(default_factory=dict)


def _to_numpy(a: Any) -> np.ndarray:
    import torch

    if torch.is_tensor(a):
        return a.detach().cpu().numpy()
    return np.asarray(a)


def annealed_inertia(history: list[dict[str, float]]) -> float | None:
    """The inertia of the Lloyd fixed point an annealed fit reached before its local
    search: its first ``history_`` record at ``sigma == 0`` after a temperature (the Lloyd
    finish; the records after it are the search's kept moves). ``None`` for a fit
    without temperatures (``assignment="hard"``)."""
    annealed = False
    for record in history:
        if record["sigma"] > 0:
            annealed = True
        elif annealed:
            return float(record["inertia"])
    return None


def _run_rbfkm(assignment: str, **options: Any) -> Callable[[Any, int, RunSpec], RunOutput]:
    """A runner of the engine with ``assignment`` and the estimator's ``options``."""

    def run(X: Any, k: int, spec: RunSpec) -> RunOutput:
        from rbfkm_engine import RBFKMeans

        params: dict[str, Any] = {
            "assignment": assignment,
            "device": spec.device,
            "random_state": spec.seed,
            **options,
        }
        if spec.mode == "speed":
            init = spec.init
            if init is not None and spec.device != "cpu":
                import torch

                init = torch.as_tensor(init).cpu().numpy()
            params.update(init=init, max_iter=spec.n_iter, n_init=1)
            if assignment == "hard":
                # tol 0: Lloyd runs all n_iter iterations unless it reaches an exact fixed point,
                # like sklearn (tol=0) and faiss (niter) do.
                params["tol"] = 0.0
        params.update(spec.params)
        model = RBFKMeans(k, **params).fit(X, callback=spec.callback)
        extra = {
            "temperatures": len(model.history_),
            "sigma": float(model.sigma_),
            "stopped_early": bool(getattr(model, "stopped_early_", False)),
            "annealed_inertia": annealed_inertia(model.history_),
        }
        return RunOutput(_to_numpy(model.cluster_centers_), int(model.n_iter_), extra)

    return run


def _run_sklearn(n_init: int) -> Callable[[Any, int, RunSpec], RunOutput]:
    def run(X: Any, k: int, spec: RunSpec) -> RunOutput:
        from sklearn.cluster import KMeans

        if spec.mode == "speed":
            km = KMeans(
                k,
                init=spec.init,
                n_init=1,
                max_iter=spec.n_iter,
                tol=0.0,
                algorithm="lloyd",
                random_state=spec.seed,
            )
        else:
            km = KMeans(k, n_init=n_init, algorithm="lloyd", random_state=spec.seed)
        km.fit(X)
        return RunOutput(km.cluster_centers_, int(km.n_iter_))

    return run


def faiss_runner(gpu: bool = False) -> Callable[[Any, int, RunSpec], RunOutput]:
    """faiss k-means (on the GPU with ``gpu=True``), trained on every point."""

    def run(X: Any, k: int, spec: RunSpec) -> RunOutput:
        import faiss

        Xn = np.ascontiguousarray(_to_numpy(X), dtype=np.float32)
        n, d = Xn.shape
        kw: dict[str, Any] = {
            # faiss subsamples to 256 points per centroid by default: train on all of X.
            "max_points_per_centroid": n // k + 1,
            "min_points_per_centroid": 1,
            "seed": spec.seed + 1,
            "verbose": False,
        }
        if gpu:
            kw["gpu"] = True
        if spec.mode == "speed":
            km = faiss.Kmeans(d, k, niter=spec.n_iter, **kw)
            init = np.ascontiguousarray(_to_numpy(spec.init), dtype=np.float32)
            km.train(Xn, init_centroids=init)
            n_iter = spec.n_iter
        else:
            km = faiss.Kmeans(d, k, **kw)  # its default niter (25)
            km.train(Xn)
            n_iter = int(km.cp.niter)
        return RunOutput(np.array(km.centroids).reshape(k, d), n_iter)

    return run


@contextmanager
def matmul_tf32(allow: bool | None) -> Iterator[None]:
    """Within the block, CUDA float32 matmuls use TF32 (``True``) or not (``False``);
    ``None`` leaves the setting alone. The previous setting is restored after."""
    import torch

    if allow is None:
        yield
        return
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = bool(allow)
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def _run_fpk(X: Any, k: int, spec: RunSpec) -> RunOutput:
    """fast-pytorch-kmeans; ``spec.params["allow_tf32"]`` sets its matmuls' precision."""
    with matmul_tf32(spec.params.get("allow_tf32")):
        return _run_fpk_plain(X, k, spec)


def _run_fpk_plain(X: Any, k: int, spec: RunSpec) -> RunOutput:
    import torch
    from fast_pytorch_kmeans import KMeans

    Xt = torch.as_tensor(X).to(spec.device)
    if spec.mode == "speed":
        # tol < 0: its stop test (squared centroid shift <= tol) never fires, so exactly n_iter.
        km = KMeans(n_clusters=k, max_iter=spec.n_iter, tol=-1.0, verbose=0)
        init = torch.as_tensor(spec.init).to(device=Xt.device, dtype=Xt.dtype).clone()
        km.fit_predict(Xt, centroids=init)
        n_iter = spec.n_iter
    else:
        torch.manual_seed(spec.seed)
        np.random.seed(spec.seed)
        km = KMeans(n_clusters=k, verbose=0)  # defaults: random init, max_iter 100, tol 1e-4
        km.fit_predict(Xt)
        n_iter = None  # it does not report how many it ran
    return RunOutput(_to_numpy(km.centroids), n_iter)


#: flash-kmeans' own defaults (``FlashKMeans(niter=25, tol=1e-8)``) for the quality runs.
FLASH_DEFAULT_ITERS, FLASH_DEFAULT_TOL = 25, 1e-8


def _flash_kmeans(device: str) -> Callable[..., Any]:
    """flash-kmeans' ``batch_kmeans_Euclid``: the Triton one on CUDA, else its torch
    fallback (which only lets this runner be dry-run on a CPU).

    The Triton one is imported from its module, not from the package: the package's
    ``__init__`` silently swaps in the torch fallback when any import fails, and the one
    that fails where ``tqdm`` is absent (installed with ``--no-deps``) is only a progress
    bar of its self-test, so a stand-in ``tqdm`` is put in its place then.
    """
    if device.startswith("cuda"):
        if not available("tqdm"):
            stand_in = types.ModuleType("tqdm")
            stand_in.trange = range  # type: ignore[attr-defined]
            stand_in.tqdm = lambda iterable=None, *args, **kwargs: iterable  # type: ignore[attr-defined]
            sys.modules["tqdm"] = stand_in
        from flash_kmeans.kmeans_triton_impl import batch_kmeans_Euclid

        return batch_kmeans_Euclid
    from flash_kmeans.torch_fallback import batch_kmeans_Euclid_torch_native

    return batch_kmeans_Euclid_torch_native


def _run_flash(X: Any, k: int, spec: RunSpec) -> RunOutput:
    """flash-kmeans (Triton, batch of one) on X cast to ``spec.params["dtype"]``.

    Its ``tl.dot`` on float32 inputs runs in TF32 (Triton's default input precision);
    ``"bfloat16"`` / ``"float16"`` cast X and the centres. Speed mode: ``tol=0``, which
    its stop test (``shift < tol``) never meets, so exactly ``n_iter`` iterations.
    Quality mode: random rows (``torch.manual_seed(seed)``), 25 iterations, tol 1e-8 (the
    defaults of its ``FlashKMeans`` class, which runs this same function).
    """
    import torch

    dtype = getattr(torch, spec.params.get("dtype", "float32"))
    x = torch.as_tensor(X).to(device=spec.device, dtype=dtype)[None]
    kmeans = _flash_kmeans(spec.device)
    if spec.mode == "speed":
        init = torch.as_tensor(spec.init).to(device=x.device, dtype=dtype)[None].clone()
        _, centres, n_iter = kmeans(x, k, max_iters=spec.n_iter, tol=0.0, init_centroids=init)
    else:
        torch.manual_seed(spec.seed)
        _, centres, n_iter = kmeans(x, k, max_iters=FLASH_DEFAULT_ITERS, tol=FLASH_DEFAULT_TOL)
    return RunOutput(_to_numpy(centres[0].float()), int(n_iter))


def _quiet(run: Callable[[Any, int, RunSpec], RunOutput]) -> Callable[..., RunOutput]:
    """The runner with warnings silenced (fixed-iteration runs warn about convergence)."""

    def quiet(X: Any, k: int, spec: RunSpec) -> RunOutput:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return run(X, k, spec)

    return quiet


RUNNERS: dict[str, Callable[[Any, int, RunSpec], RunOutput]] = {
    name: _quiet(run)
    for name, run in {
        "rbfkm-hard": _run_rbfkm("hard"),
        "rbfkm-softmax": _run_rbfkm("softmax"),
        "rbfkm-entmax15": _run_rbfkm("entmax15"),
        "rbfkm-overshoot": _run_rbfkm("entmax15", overshoot=2.0),
        "sklearn-n1": _run_sklearn(1),
        "sklearn-n10": _run_sklearn(10),
        "faiss": faiss_runner(),
        "fpk": _run_fpk,
        "flash-kmeans": _run_flash,
    }.items()
}

REQUIRES = {
    "rbfkm-hard": "rbfkm_engine",
    "rbfkm-softmax": "rbfkm_engine",
    "rbfkm-entmax15": "rbfkm_engine",
    "rbfkm-overshoot": "rbfkm_engine",
    "sklearn-n1": "sklearn",
    "sklearn-n10": "sklearn",
    "faiss": "faiss",
    "fpk": "fast_pytorch_kmeans",
    "flash-kmeans": "flash_kmeans",
}


def method_available(method: str) -> bool:
    """Whether the library behind ``method`` imports here."""
    return available(REQUIRES[method])


# --------------------------------------------------------------------------- report


def fmt(value: Any, spec: str = ".3g") -> str:
    """Format a number for a table cell; None / NaN print as '-'."""
    if value is None:
        return "-"
    if isinstance(value, float) and math.isnan(value):
        return "-"
    if isinstance(value, (int, float)):
        return format(value, spec)
    return str(value)


def format_table(headers: list[str], rows: list[list[str]]) -> str:
    """A plain fixed-width text table (first column left-aligned, the rest right-aligned)."""
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows, strict=False)]

    def line(cells: list[str]) -> str:
        parts = [
            str(c).ljust(w) if i == 0 else str(c).rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=False))
        ]
        return "  ".join(parts).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), sep, *(line(r) for r in rows)])


def machine_info(threads: int) -> dict[str, Any]:
    """What the figures were measured on: CPU, cores, load, library versions."""
    import platform

    import torch

    info: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "threads": threads,
        "loadavg_start": list(os.getloadavg()),
        "torch": torch.__version__,
        "numpy": np.__version__,
    }
    try:
        with open("/proc/cpuinfo") as fh:
            model = re.search(r"model name\s*:\s*(.+)", fh.read())
        info["cpu_model"] = model.group(1).strip() if model else platform.processor()
    except OSError:
        info["cpu_model"] = platform.processor()
    for mod, attr in (("sklearn", "__version__"), ("faiss", "__version__")):
        try:
            info[mod] = getattr(__import__(mod), attr)
        except ImportError:
            info[mod] = None
    try:
        from importlib.metadata import version

        info["fast_pytorch_kmeans"] = version("fast-pytorch-kmeans")
    except Exception:
        info["fast_pytorch_kmeans"] = None
    return info


# --------------------------------------------------------------------------- memory probe


def probe_command(spec_path: Path) -> list[str]:
    """The command line of a fresh probe subprocess for the spec written at ``spec_path``."""
    return [sys.executable, str(Path(__file__).resolve()), "probe", str(spec_path)]


def _probe(spec_path: str) -> None:
    """Peak RSS of one fit, in this fresh process (prints one JSON line).

    Imports and thread pools are warmed by a tiny fit first; then X is loaded, the RSS is
    the baseline, and the high-water mark is reset, so the figure is what ``fit`` itself
    adds on top of X already being in memory.
    """
    spec = json.loads(Path(spec_path).read_text())
    set_thread_env(spec["threads"])
    repo = str(Path(__file__).resolve().parents[1])
    if repo not in sys.path:
        sys.path.insert(0, repo)
    limiter = pin_threads(spec["threads"])
    run = RUNNERS[spec["method"]]
    init = np.load(spec["init"]) if spec.get("init") else None
    k = int(spec["k"])
    X = np.load(spec["data"])
    small = np.ascontiguousarray(X[: max(4 * k, 2000)])
    run(small, k, RunSpec(mode=spec["mode"], n_iter=2, seed=0, init=init))  # warm-up
    del small
    gc.collect()
    run_spec = RunSpec(mode=spec["mode"], n_iter=spec["n_iter"], seed=spec["seed"], init=init)
    with peak_rss() as mem:
        run(X, k, run_spec)
    print(
        json.dumps(
            {
                "method": spec["method"],
                "rss_method": mem["method"],
                "baseline_rss": mem["baseline"],
                "peak_rss": mem["peak"],
                "fit_extra": max(0, mem["peak"] - mem["baseline"]),
                "x_bytes": int(X.nbytes),
            }
        )
    )
    del limiter


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "probe":
        _probe(sys.argv[2])
    else:
        sys.exit("usage: common.py probe SPEC.json")
