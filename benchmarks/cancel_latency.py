"""How fast a running job stops: on cancel, and at its time limit, through ``rbfkm serve``.

Starts ``rbfkm serve`` (embedded Redis, one CPU worker, a temporary data directory; the
``Service`` of ``benchmarks/service.py``), uploads blobs of ``--rows x --features`` and:

1. cancel: starts a job of ``--clusters`` clusters, cancels it ``--cancel-after`` seconds
   after it started running and queues a 2-cluster job on a small dataset behind it; prints
   the time from the cancel request until the job is ``canceled`` and until the worker has
   started the next job (it is idle again);
2. time limit: a job with ``max_runtime_s = --limit``; prints how long after its limit it
   ended ``failed`` (by the job's own timestamps) and its error, and again when the worker
   started the next job.

    python benchmarks/cancel_latency.py                       # 400 000 x 8, k = 200 000
    python benchmarks/cancel_latency.py --rows 20000 --clusters 2000 --cancel-after 3
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np

HERE = Path(__file__).resolve().parent


def _service_module() -> Any:
    """``benchmarks/service.py`` (its name clashes with the ``service`` package)."""
    spec = importlib.util.spec_from_file_location("service_benchmark", HERE / "service.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--features", type=int, default=8)
    parser.add_argument("--clusters", type=int, default=200_000)
    parser.add_argument("--cancel-after", type=float, default=10.0, help="seconds running")
    parser.add_argument("--limit", type=float, default=20.0, help="max_runtime_s of case 2")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-job-bytes", type=int, default=None, help="RBFKM_MAX_JOB_BYTES")
    return parser.parse_args(argv)


def wait(http: httpx.Client, job_id: str, done: Any, timeout_s: float = 3600) -> dict:
    """Poll the job every 20 ms until ``done(job)``; returns it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = http.get(f"/v1/jobs/{job_id}").json()
        if done(job):
            return job
        time.sleep(0.02)
    raise TimeoutError(f"job {job_id} did not get there in {timeout_s} s")


def submit(http: httpx.Client, dataset_id: str, **params: Any) -> str:
    response = http.post("/v1/jobs", json={"dataset_id": dataset_id, **params})
    if response.status_code != 202:
        raise SystemExit(f"job refused ({response.status_code}): {response.json()['detail']}")
    return response.json()["id"]


def upload(http: httpx.Client, X: np.ndarray, npy_bytes: Any) -> str:
    headers = {"Content-Type": "application/x-npy"}
    return http.post("/v1/datasets", content=npy_bytes(X), headers=headers).json()["id"]


def running(job: dict) -> bool:
    return job["status"] != "queued"


def measure(http: httpx.Client, args: argparse.Namespace, big: str, small: str) -> None:
    job_id = submit(http, big, n_clusters=args.clusters, random_state=0)
    wait(http, job_id, running)
    time.sleep(args.cancel_after)
    asked = time.monotonic()
    http.post(f"/v1/jobs/{job_id}/cancel")
    follow = submit(http, small, n_clusters=2, random_state=0)
    job = wait(http, job_id, lambda j: j["status"] == "canceled")
    canceled = time.monotonic() - asked
    wait(http, follow, running)
    idle = time.monotonic() - asked
    wait(http, follow, lambda j: j["status"] == "succeeded")
    print(
        f"cancel after {args.cancel_after:g} s running (iteration {job['progress']['iteration']}):"
    )
    print(f"  canceled {canceled:.2f} s after the request; next job started after {idle:.2f} s")

    job_id = submit(http, big, n_clusters=args.clusters, random_state=0, max_runtime_s=args.limit)
    follow_at = time.monotonic()
    job = wait(http, job_id, lambda j: j["status"] not in ("queued", "running"))
    follow = submit(http, small, n_clusters=2, random_state=0)
    wait(http, follow, running)
    next_started = time.monotonic() - follow_at
    started = datetime.fromisoformat(job["started_at"])
    finished = datetime.fromisoformat(job["finished_at"])
    over = (finished - started).total_seconds() - args.limit
    print(
        f"time limit {args.limit:g} s: {job['status']} {over:.2f} s after the limit "
        f"(attempts {job['attempts']}); next job started {next_started:.2f} s after submit"
    )
    print(f"  error: {job['error']}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    bench = _service_module()
    if args.max_job_bytes is not None:
        os.environ["RBFKM_MAX_JOB_BYTES"] = str(args.max_job_bytes)
    rng = np.random.default_rng(0)
    centres = rng.uniform(-10, 10, size=(max(2, args.clusters // 4), args.features))
    X = centres[rng.integers(0, centres.shape[0], args.rows)]
    X = (X + rng.normal(size=X.shape)).astype(np.float32)
    print(
        f"{args.rows} x {args.features}, n_clusters={args.clusters}, {args.threads} threads",
        file=sys.stderr,
    )
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        data_dir.mkdir()
        service = bench.Service(data_dir, args.threads)
        try:
            with httpx.Client(base_url=service.base_url, timeout=120) as http:
                service.wait_ready(http)
                big = upload(http, X, bench.npy_bytes)
                small = upload(http, X[:1000], bench.npy_bytes)
                measure(http, args, big, small)
        finally:
            service.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
