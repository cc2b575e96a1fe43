"""rbfkm_engine on CUDA against the CUDA peers, side by side, in one process and one run.

Peers: a plain ``torch.matmul`` of the distance shape (the ceiling for the distance step),
fast-pytorch-kmeans on CUDA, and ``faiss`` GPU k-means when a faiss with GPUs imports.
Timing is wall time around ``torch.cuda.synchronize``; memory is
``torch.cuda.max_memory_allocated`` over what was allocated before the fit (X on the device),
so faiss's own allocator is not seen. Inertia / ARI / empty clusters come from the same
float64 judge as the CPU benchmark (``common.evaluate_centroids``), run on the GPU.

Exits 0 with a note when CUDA is not available.

    python benchmarks/gpu_compare.py --json gpu.json
    python benchmarks/gpu_compare.py --quick
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

GPU_METHODS = ("rbfkm-hard", "rbfkm-softmax", "rbfkm-entmax15", "fpk", "faiss-gpu")
QUALITY_METHODS = ("rbfkm-entmax15", "rbfkm-hard", "fpk", "faiss-gpu")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small sizes (seconds)")
    p.add_argument("--iters", type=int, default=20, help="speed iterations (20)")
    p.add_argument("--repeats", type=int, default=3, help="timed speed runs (3)")
    p.add_argument("--seeds", type=int, default=3, help="quality seeds (3)")
    p.add_argument(
        "--time-budget", type=float, default=math.inf, help="seconds; later parts are skipped"
    )
    p.add_argument("--tf32", action="store_true", help="allow TF32 matmuls (default: fp32)")
    p.add_argument("--json", type=Path, default=None, metavar="OUT", help="write all figures")
    p.add_argument(
        "--device", default="cuda", help="cuda (default); cpu only to dry-run this script's code"
    )
    return p.parse_args(argv)


def shapes(quick: bool) -> list[tuple[int, int, int]]:
    """(n, d, k) of the data sets."""
    if quick:
        return [(20_000, 32, 64)]
    # smallest first: if the time budget runs out, the finished ones are already written
    return [(200_000, 128, 256), (1_000_000, 32, 64), (1_000_000, 128, 1024)]


def faiss_gpu_available() -> bool:
    """Whether a faiss build with GPU support and a visible GPU imports."""
    try:
        import faiss

        return faiss.get_num_gpus() > 0
    except Exception:
        return False


def main(argv: list[str] | None = None) -> int:
    """Run the CUDA comparison; print tables; optionally write JSON."""
    args = parse_args(argv)
    if args.quick:
        args.iters, args.repeats, args.seeds = min(args.iters, 5), 1, min(args.seeds, 2)
    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(HERE))
    import common
    import torch

    report: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_compare: CUDA is not available here; nothing to measure (skipped).")
        report["skipped"] = "no CUDA"
        if args.json:
            args.json.write_text(json.dumps(report, indent=1))
        return 0
    torch.backends.cuda.matmul.allow_tf32 = bool(args.tf32)
    torch.backends.cudnn.allow_tf32 = bool(args.tf32)
    started = time.perf_counter()
    runners = {m: common.RUNNERS[m] for m in GPU_METHODS if m in common.RUNNERS}
    if faiss_gpu_available():
        runners["faiss-gpu"] = common.faiss_runner(gpu=True)
    available = {m: r for m, r in runners.items() if m == "faiss-gpu" or common.method_available(m)}
    cuda = args.device.startswith("cuda")
    gpu_name = torch.cuda.get_device_properties(args.device).name if cuda else "cpu (dry run)"
    report["machine"] = {
        "gpu": gpu_name,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "tf32": bool(args.tf32),
        "methods": sorted(available),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    print(
        f"rbfkm GPU benchmark {report['machine']['date']}: {gpu_name}, torch {torch.__version__}"
        f" (CUDA {torch.version.cuda}), TF32 {'on' if args.tf32 else 'off'}; methods: "
        f"{', '.join(sorted(available))}"
    )
    report["datasets"] = {}
    for n, d, k in shapes(args.quick):
        if time.perf_counter() - started > args.time_budget:
            print(f"time budget spent: skipping {n}x{d} k={k}")
            continue

        def checkpoint(name: str, res: dict[str, Any]) -> None:
            report["datasets"][name] = res
            if args.json:  # after every part, so a run cut short still leaves its figures
                args.json.write_text(json.dumps(report, indent=1, default=str))

        name, res = bench_dataset(common, available, (n, d, k), args, started, checkpoint)
        checkpoint(name, res)
        print_dataset(common, name, res, args)
        if cuda:
            torch.cuda.empty_cache()
    report["elapsed_s"] = time.perf_counter() - started
    print(f"\nelapsed {report['elapsed_s']:.1f}s")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=str))
        print(f"wrote {args.json}")
    return 0


def bench_dataset(
    common: Any,
    available: dict[str, Any],
    shape: tuple[int, int, int],
    args: argparse.Namespace,
    started: float,
    checkpoint: Any,
) -> tuple[str, dict[str, Any]]:
    """Speed, distance step and quality on one blobs data set of ``shape`` (n, d, k)."""
    import numpy as np
    import torch

    device = args.device
    cuda = device.startswith("cuda")
    n, d, k = shape
    ds = common.make_blobs_dataset(n, d, k, seed=7)
    X = torch.from_numpy(ds.X).to(device)
    rng = np.random.default_rng(0)
    C0 = X[torch.from_numpy(rng.choice(n, k, replace=False)).to(device)].clone()
    res: dict[str, Any] = {"shape": [n, d, k], "speed": {}, "quality": {}}
    res["distance"] = common.distance_step(X, C0, max(3, args.repeats), device)
    try:
        res["distance"]["in_fit"] = common.in_fit_gemm(X, C0, args.iters, device)
    except Exception as exc:  # the profiler is optional here
        res["distance"]["in_fit"] = {"error": f"{type(exc).__name__}: {exc}"[:200]}
    spec = common.RunSpec(mode="speed", n_iter=args.iters, seed=0, init=C0, device=device)
    for m, run in available.items():
        try:
            small = X[: max(4 * k, 4096)].contiguous()
            run(small, k, common.RunSpec("speed", 2, 0, C0, device))  # warm-up
            common.synchronize(device)
            if cuda:
                base = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
            walls, out = [], None
            for _ in range(args.repeats):
                wall, out = common.timed(lambda run=run: run(X, k, spec), device)
                walls.append(wall)
            peak = torch.cuda.max_memory_allocated() - base if cuda else math.nan
            ev = common.evaluate_centroids(X, out.centroids, ds.y, device=device)
            iters = out.n_iter or args.iters
            t_iter = min(walls) / max(iters, 1)
            res["speed"][m] = {
                "iters": iters,
                "wall_s": min(walls),
                "t_iter_s": t_iter,
                "gflops": common.distance_gflops(n, d, k, t_iter),
                "peak_mib": peak / common.MIB if m != "faiss-gpu" else None,
                "inertia": ev["inertia"],
                "ari": ev["ari"],
                "n_empty": ev["n_empty"],
            }
        except Exception as exc:  # a peer failing must not stop the others
            res["speed"][m] = {"error": f"{type(exc).__name__}: {exc}"[:200]}
        if cuda:
            torch.cuda.empty_cache()
    checkpoint(ds.name, res)
    if time.perf_counter() - started < args.time_budget:
        for m in (m for m in QUALITY_METHODS if m in available):
            if time.perf_counter() - started > args.time_budget:
                print(f"time budget spent: no quality runs of {m} on {ds.name}")
                break
            runs = []
            for seed in range(args.seeds):
                try:
                    qspec = common.RunSpec(mode="quality", seed=seed, device=device)
                    wall, out = common.timed(lambda m=m, s=qspec: available[m](X, k, s), device)
                    ev = common.evaluate_centroids(X, out.centroids, ds.y, device=device)
                    runs.append(
                        {
                            "seed": seed,
                            "wall_s": wall,
                            "inertia": ev["inertia"],
                            "ari": ev["ari"],
                            "n_empty": ev["n_empty"],
                        }
                    )
                except Exception as exc:
                    runs.append({"seed": seed, "error": f"{type(exc).__name__}: {exc}"[:200]})
            ok = [r for r in runs if "error" not in r]
            if ok:
                res["quality"][m] = {
                    "seeds": len(ok),
                    "inertia_mean": float(np.mean([r["inertia"] for r in ok])),
                    "inertia_min": float(min(r["inertia"] for r in ok)),
                    "wall_mean_s": float(np.mean([r["wall_s"] for r in ok])),
                    "ari_mean": float(np.mean([r["ari"] for r in ok])),
                    "runs": runs,
                }
            else:
                res["quality"][m] = {"error": runs[0]["error"] if runs else "no runs"}
    return ds.name, res


def print_dataset(common: Any, name: str, res: dict[str, Any], args: argparse.Namespace) -> None:
    """The tables of one data set."""
    fmt = common.fmt
    print(f"\n=== {name} (CUDA)")
    print(common.distance_line(res["distance"], digits=0))
    print(f"-- speed: same C0 (random rows), {args.iters} iterations, best of {args.repeats}")
    rows = []
    for m, r in res["speed"].items():
        if "error" in r:
            rows.append([m, "error: " + r["error"], "", "", "", "", "", "", ""])
            continue
        rows.append(
            [
                m,
                fmt(r["iters"], "d"),
                fmt(r["wall_s"], ".3f"),
                fmt(r["t_iter_s"] * 1e3, ".2f"),
                fmt(r["gflops"], ".0f"),
                fmt(r["peak_mib"], ".0f"),
                fmt(r["inertia"], ".6g"),
                fmt(r["ari"], ".3f"),
                fmt(r["n_empty"], "d"),
            ]
        )
    headers = ["method", "iters", "wall s", "ms/iter", "GFLOP/s", "peak MiB", "inertia", "ARI"]
    print(common.format_table([*headers, "empty"], rows))
    speed = res["speed"]
    base = speed.get("rbfkm-hard", {}).get("t_iter_s")
    for p in ("fpk", "faiss-gpu"):
        if base and speed.get(p, {}).get("t_iter_s"):
            print(f"   rbfkm-hard / {p} time per iteration: {base / speed[p]['t_iter_s']:.2f}x")
    if res["quality"]:
        print("-- quality: own init and defaults")
        rows = []
        for m, r in res["quality"].items():
            if "error" in r:
                rows.append([m, "error: " + r["error"], "", "", "", ""])
                continue
            rows.append(
                [
                    m,
                    fmt(r["seeds"], "d"),
                    fmt(r["inertia_mean"], ".6g"),
                    fmt(r["inertia_min"], ".6g"),
                    fmt(r["wall_mean_s"], ".3f"),
                    fmt(r["ari_mean"], ".3f"),
                ]
            )
        print(
            common.format_table(
                ["method", "seeds", "mean inertia", "min", "mean wall s", "mean ARI"], rows
            )
        )
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
