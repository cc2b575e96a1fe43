"""Memory and liveness of the API during large uploads.

Starts a real `rbfkm serve` (embedded Redis, no workers) on loopback, uploads a generated
JSON dataset and a `.npy` file streamed from disk by a generator (the client never holds a
body), samples the API process's RSS (psutil) every few milliseconds and polls `/healthz`
every ~10 ms while each upload runs, and prints the peak RSS growth over the body size and
the healthz p50/p99/max.

    python benchmarks/upload_memory.py                     # 200 MB JSON, 2 GiB .npy
    python benchmarks/upload_memory.py --json-mb 50 --npy-mb 256 --csv-mb 50

Free disk under the temp directory is checked first: each body is written once by the
client and spooled once by the API (the `.npy` is then renamed into place), so a run needs
about twice the bodies; with less, the sizes shrink (and say so).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import psutil

ROOT = Path(__file__).resolve().parents[1]
MB = 1_000_000


def write_json(path: Path, size: int, width: int = 10) -> None:
    """A `{"name", "data"}` body of about ``size`` bytes: normal floats as json.dumps writes."""
    rng = np.random.default_rng(0)
    with path.open("w") as fh:
        fh.write('{"name": "bench", "data": [')
        written, first = 0, True
        while written < size:
            rows = json.dumps(rng.normal(size=(20_000, width)).tolist())[1:-1]
            fh.write(("" if first else ", ") + rows)
            written += len(rows) + 2
            first = False
        fh.write("]}")


def write_csv(path: Path, size: int, width: int = 10) -> None:
    rng = np.random.default_rng(0)
    with path.open("w") as fh:
        while fh.tell() < size:
            np.savetxt(fh, rng.normal(size=(20_000, width)), delimiter=",", fmt="%.17g")


def write_npy(path: Path, size: int, width: int = 64) -> None:
    """A float32 `.npy` of about ``size`` bytes, written in blocks (never held whole)."""
    rows = size // (4 * width)
    header = np.lib.format.header_data_from_array_1_0(np.empty((0, width), np.float32))
    header["shape"] = (rows, width)
    rng = np.random.default_rng(0)
    with path.open("wb") as fh:
        np.lib.format.write_array_header_1_0(fh, header)
        for start in range(0, rows, 1 << 16):
            block = rng.normal(size=(min(1 << 16, rows - start), width)).astype(np.float32)
            fh.write(block.tobytes())


def stream(path: Path) -> Iterator[bytes]:
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            yield chunk


class Probe:
    """Samples the API's RSS and polls /healthz in threads until stopped."""

    def __init__(self, pid: int, base_url: str) -> None:
        self.process = psutil.Process(pid)
        self.base_url = base_url
        self.peak = 0
        self.latencies: list[float] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.rss), threading.Thread(target=self.health)]

    def rss(self) -> None:
        while not self.stop.is_set():
            self.peak = max(self.peak, self.process.memory_info().rss)
            time.sleep(0.003)

    def health(self) -> None:
        with httpx.Client(base_url=self.base_url, timeout=30) as http:
            while not self.stop.is_set():
                start = time.perf_counter()
                http.get("/healthz").raise_for_status()
                self.latencies.append(time.perf_counter() - start)
                time.sleep(0.01)

    def __enter__(self) -> Probe:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join()


def upload(base_url: str, pid: int, path: Path, media: str) -> dict[str, float]:
    process = psutil.Process(pid)
    baseline = process.memory_info().rss
    size = path.stat().st_size
    start = time.perf_counter()
    with Probe(pid, base_url) as probe:
        answer = httpx.post(
            f"{base_url}/v1/datasets",
            content=stream(path),
            headers={"Content-Type": media},
            timeout=3600,
        )
    wall = time.perf_counter() - start
    assert answer.status_code in (200, 201), answer.text[:500]
    ms = sorted(1000 * t for t in probe.latencies)
    return {
        "body_mb": size / MB,
        "seconds": wall,
        "baseline_mb": baseline / MB,
        "peak_mb": probe.peak / MB,
        "growth_x_body": (probe.peak - baseline) / size,
        "peak_x_body": probe.peak / size,
        "healthz_n": len(ms),
        "healthz_p50_ms": statistics.median(ms),
        "healthz_p99_ms": ms[min(len(ms) - 1, int(0.99 * len(ms)))],
        "healthz_max_ms": ms[-1],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json-mb", type=int, default=200)
    parser.add_argument("--npy-mb", type=int, default=2048)
    parser.add_argument("--csv-mb", type=int, default=0, help="also a CSV of this size")
    parser.add_argument("--tmp", type=Path, default=Path(tempfile.gettempdir()))
    args = parser.parse_args()
    free = shutil.disk_usage(args.tmp).free
    need = 2.2 * MB * (args.json_mb + args.npy_mb + args.csv_mb)
    if need > free:
        scale = free / need / 1.2
        args.json_mb, args.npy_mb, args.csv_mb = (
            int(v * scale) for v in (args.json_mb, args.npy_mb, args.csv_mb)
        )
        print(f"only {free / MB:.0f} MB free under {args.tmp}: sizes scaled by {scale:.2f}")
    work = Path(tempfile.mkdtemp(prefix="rbfkm-upload-", dir=args.tmp))
    bodies = []
    if args.json_mb:
        write_json(work / "body.json", args.json_mb * MB)
        bodies.append((work / "body.json", "application/json"))
    if args.csv_mb:
        write_csv(work / "body.csv", args.csv_mb * MB)
        bodies.append((work / "body.csv", "text/csv"))
    if args.npy_mb:
        write_npy(work / "body.npy", args.npy_mb * MB)
        bodies.append((work / "body.npy", "application/x-npy"))
    port = 18000 + os.getpid() % 1000
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RBFKM_", "REDIS_URL"))}
    env.update(
        RBFKM_WORKERS="0",
        RBFKM_MAX_UPLOAD_BYTES=str(4 * MB * max(args.json_mb, args.npy_mb, args.csv_mb, 1)),
        PYTHONPATH=str(ROOT),
    )
    command = [sys.executable, "-m", "service.cli", "serve", "--port", str(port)]
    server = subprocess.Popen(
        [*command, "--workers", "0", "--data-dir", str(work / "data")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{base_url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or server.poll() is not None:
                raise SystemExit("rbfkm serve did not start")
            time.sleep(0.2)
        print(f"rbfkm serve pid {server.pid}; {os.cpu_count()} CPUs")
        for path, media in bodies:
            figures = upload(base_url, server.pid, path, media)
            path.unlink()
            print(media, json.dumps({k: round(v, 2) for k, v in figures.items()}))
    finally:
        server.terminate()
        server.wait(60)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
