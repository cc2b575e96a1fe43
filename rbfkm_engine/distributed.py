"""Batch fit of shard files across processes: ``python -m rbfkm_engine.distributed``.

Run it under ``torchrun`` (any number of nodes and processes per node): every process
joins the process group from torchrun's environment (``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT``), reads its contiguous run of the sorted shard files
(:mod:`~rbfkm_engine.shards`) and takes part in one :class:`~rbfkm_engine.RBFKMeans` fit
of them all (:mod:`~rbfkm_engine.reducer`). Rank 0 writes the centroids and a summary;
every rank writes the labels of its own files. Without torchrun's environment it fits in
one process. docs/distributed.md has the Slurm and Kubernetes recipes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from .model import RBFKMeans
from .params import ASSIGNMENTS, DTYPES, INITS
from .progress import FitProgress
from .reducer import Reducer
from .shards import files_of_rank, n_features, read_shard, shard_files, write_array, write_labels

#: Seconds a collective waits for the other ranks before the fit fails.
DEFAULT_TIMEOUT_S = 600


def build_parser(prog: str = "python -m rbfkm_engine.distributed") -> argparse.ArgumentParser:
    """The command line: the shards, the output folder and the fit's parameters."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Fit RBFKMeans on shard files across the processes of torchrun.",
    )
    parser.add_argument("shards", help="glob of the shard files (.npy or .parquet)")
    parser.add_argument("output", type=Path, help="folder for centroids, labels and summary")
    parser.add_argument("--n-clusters", type=int, required=True)
    parser.add_argument("--assignment", choices=ASSIGNMENTS, default="entmax15")
    parser.add_argument("--init", choices=INITS, default="k-means++")
    parser.add_argument("--max-iter", type=int, default=300)
    parser.add_argument("--tol", type=float, default=1e-4)
    parser.add_argument("--cooling", type=float, default=0.8)
    parser.add_argument("--overshoot", type=float, default=1.0, help="anneal past k (1 to 4)")
    parser.add_argument("--dtype", choices=DTYPES, default="float32")
    parser.add_argument("--chunk-size", type=int, default=None, help="rows per block")
    parser.add_argument("--random-state", type=int, default=0)
    parser.add_argument("--device", default="auto", help='"auto", "cpu", "cuda" ...')
    parser.add_argument("--format", choices=["npy", "parquet"], default="npy", dest="fmt")
    parser.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="collective timeout (s)"
    )
    parser.add_argument("--verbose", action="store_true", help="progress on rank 0")
    return parser


def join_group(device: str, timeout_s: float) -> bool:
    """Join torchrun's process group (NCCL when the fit runs on CUDA, else gloo); ``False``
    without torchrun's environment (one process)."""
    if "WORLD_SIZE" not in os.environ or int(os.environ["WORLD_SIZE"]) < 2:
        return False
    on_cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    if on_cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if on_cuda else "gloo", timeout=timedelta(seconds=timeout_s))
    return True


def estimator(args: argparse.Namespace) -> RBFKMeans:
    """The estimator the command line asks for."""
    device = args.device
    if device == "auto" and dist.is_initialized() and torch.cuda.is_available():
        device = f"cuda:{torch.cuda.current_device()}"
    return RBFKMeans(
        n_clusters=args.n_clusters,
        assignment=args.assignment,
        init=args.init,
        max_iter=args.max_iter,
        tol=args.tol,
        cooling=args.cooling,
        overshoot=args.overshoot,
        dtype=args.dtype,
        chunk_size=args.chunk_size,
        random_state=args.random_state,
        device=device,
    )


def fit_shards(args: argparse.Namespace, rank: int, world: int) -> dict:
    """This rank's part of the fit; returns the summary (the same on every rank)."""
    files = shard_files(args.shards)
    shard = read_shard(files_of_rank(files, rank, world), n_features(files[0]))
    model = estimator(args)
    model.fit(shard.X, callback=_reporter() if args.verbose else None)
    write_labels(model.labels_, shard, args.output / "labels", args.fmt)
    summary = {
        "n_clusters": int(model.n_clusters),
        "n_files": len(files),
        "n_samples": sum(Reducer.current().gather_ints(shard.X.shape[0])),
        "world_size": world,
        "inertia": float(model.inertia_),
        "n_iter": int(model.n_iter_),
        "converged": bool(model.converged_),
        "history": model.history_,
    }
    if rank == 0:
        centres = np.asarray(model.cluster_centers_)
        names = [f"x{j}" for j in range(centres.shape[1])]
        write_array(centres, args.output / f"centroids.{args.fmt}", names)
        (args.output / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def _reporter():
    """A callback that prints each iteration (rank 0 alone calls it)."""

    def report(info: FitProgress) -> None:
        print(
            f"{info.phase} iteration={info.iteration} sigma={info.sigma:.4g} "
            f"objective={info.objective:.6g}",
            file=sys.stderr,
        )

    return report


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """Run the batch fit; the exit status is 0 on every rank when it succeeded."""
    parser = build_parser() if prog is None else build_parser(prog)
    args = parser.parse_args(argv)
    grouped = join_group(args.device, args.timeout)
    try:
        rank = dist.get_rank() if grouped else 0
        world = dist.get_world_size() if grouped else 1
        args.output.mkdir(parents=True, exist_ok=True)
        fit_shards(args, rank, world)
    except ValueError as bad:
        print(f"{parser.prog}: {bad}", file=sys.stderr)
        return 2
    finally:
        if grouped:
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
