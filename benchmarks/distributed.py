"""A data-parallel fit on 1, 2 and 4 processes (gloo on loopback): time per iteration and
the part of it spent in collectives.

Each process takes a contiguous shard of the same data (strong scaling: the total is
fixed), runs one thread, and fits with a fixed number of iterations (``tol=0``). The time
of every collective is recorded on rank 0 (by wrapping ``Reducer._run``, the one place the
engine calls torch.distributed) with the bytes it moved; a collective's time includes the
wait for the slowest rank, so on a machine with fewer free cores than processes it
measures the imbalance as well as the transport.

    python benchmarks/distributed.py                      # 1, 2, 4 processes
    python benchmarks/distributed.py --procs 1 2 --rows 100000 --assignment entmax15

Prints one row per process count: seconds per iteration, collective seconds per
iteration, collectives and bytes reduced per iteration, and the speed-up against one
process measured in the same run.
"""

from __future__ import annotations

import argparse
import multiprocessing
import pickle
import sys
import tempfile
import time
import warnings
from datetime import timedelta
from pathlib import Path

import numpy as np


def _data(rows: int, features: int, seed: int = 0) -> np.ndarray:
    """Overlapping Gaussian blobs, float32."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=4.0, size=(32, features))
    return (centres[rng.integers(0, 32, rows)] + rng.normal(size=(rows, features))).astype(
        np.float32
    )


def _timed_reducer(log: list[tuple[float, int]]) -> None:
    """Record every collective's seconds and bytes in ``log``."""
    import torch

    from rbfkm_engine.reducer import Reducer

    plain = Reducer._run

    def timed(self, what, collective, *args, **kwargs):
        size = sum(a.numel() * a.element_size() for a in args if isinstance(a, torch.Tensor)) + sum(
            t.numel() * t.element_size() for a in args if isinstance(a, list) for t in a
        )
        start = time.perf_counter()
        plain(self, what, collective, *args, **kwargs)
        log.append((time.perf_counter() - start, size))

    Reducer._run = timed


def _rank(rank: int, world: int, store: str, args: argparse.Namespace, out: str) -> None:
    """One process: its shard, the fit, and (rank 0) the timings."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")  # max_iter ends every fit, by design
    from rbfkm_engine import RBFKMeans

    if world > 1:
        dist.init_process_group(
            "gloo", init_method=f"file://{store}", rank=rank, world_size=world,
            timeout=timedelta(seconds=600),
        )  # fmt: skip
    X = _data(args.rows, args.features)
    bounds = np.linspace(0, args.rows, world + 1).astype(int)
    shard = X[bounds[rank] : bounds[rank + 1]]
    log: list[tuple[float, int]] = []
    _timed_reducer(log)
    model = RBFKMeans(
        n_clusters=args.clusters, assignment=args.assignment, max_iter=args.iterations,
        tol=0.0, init="random", device="cpu", random_state=0,
    )  # fmt: skip
    if world > 1:
        dist.barrier()
    start = time.perf_counter()
    model.fit(shard)
    seconds = time.perf_counter() - start
    if rank == 0:
        result = {
            "seconds": seconds,
            "n_iter": model.n_iter_,
            "comm_seconds": sum(t for t, _ in log),
            "collectives": len(log),
            "bytes": sum(b for _, b in log),
            "inertia": model.inertia_,
        }
        Path(out).write_bytes(pickle.dumps(result))
    if world > 1:
        dist.destroy_process_group()


def measure(world: int, args: argparse.Namespace) -> dict:
    """One fit on ``world`` processes; rank 0's figures."""
    ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp:
        store, out = f"{tmp}/store", f"{tmp}/out.pkl"
        procs = [ctx.Process(target=_rank, args=(r, world, store, args, out)) for r in range(world)]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join()
        if any(proc.exitcode for proc in procs):
            raise RuntimeError(f"a rank of the {world}-process fit failed")
        return pickle.loads(Path(out).read_bytes())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--procs", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--clusters", type=int, default=64)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--assignment", default="hard", choices=["hard", "softmax", "entmax15"])
    args = parser.parse_args(argv)
    print(
        f"{args.assignment}, n={args.rows} d={args.features} k={args.clusters}, "
        f"{args.iterations} iterations, one thread per process, gloo on loopback"
    )
    print(f"{'procs':>5} {'s/iter':>8} {'comm s/iter':>11} {'comm %':>6} "
          f"{'coll/iter':>9} {'KiB/iter':>9} {'speed-up':>8}")  # fmt: skip
    base = None
    for world in args.procs:
        r = measure(world, args)
        per_iter = r["seconds"] / r["n_iter"]
        base = base or per_iter
        comm, share = r["comm_seconds"] / r["n_iter"], 100 * r["comm_seconds"] / r["seconds"]
        print(
            f"{world:>5} {per_iter:>8.4f} {comm:>11.4f} {share:>6.1f} "
            f"{r['collectives'] / r['n_iter']:>9.1f} {r['bytes'] / r['n_iter'] / 1024:>9.1f} "
            f"{base / per_iter:>8.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
