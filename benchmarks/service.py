"""The rbfkm service end to end, against the engine called directly, in one run.

Starts ``python -m service.cli serve`` (embedded Redis on a free loopback port, one worker,
a temporary data directory), measures, and stops it:

1. end to end: upload (.npy) + job + polling + result for (n, d, k) = (100 000, 32, 64),
   against ``RBFKMeans.fit`` with the same parameters on the same data in this process.
   Target: end-to-end time <= 1.1 x fit + 0.3 s.
2. upload rate of a 256 MB .npy (streamed from disk, Content-Length set), and the API
   process's peak RSS during it (VmHWM after a reset through /proc/PID/clear_refs).
   Targets: >= 200 MB/s on loopback; API peak RSS < 3 x the file.
3. status polls: 50 concurrent keep-alive clients GET /v1/jobs/{id} for a fixed time.
   Targets: >= 1000 polls/s, p99 < 50 ms. The clients are a minimal asyncio HTTP/1.1 loop
   (no client library), so that on a small machine the load generator takes as little
   CPU from the server as it can; they share the machine with the server all the same.

    python benchmarks/service.py --quick
    python benchmarks/service.py --json service.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
MB = 1_000_000


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small sizes (well under a minute)")
    p.add_argument("--threads", type=int, default=2, help="threads for the fits (2)")
    p.add_argument(
        "--assignments", default=None, help="comma-separated maps to time end to end (hard)"
    )
    p.add_argument("--repeats", type=int, default=None, help="end-to-end repetitions (2)")
    p.add_argument("--upload-mb", type=float, default=None, help="upload size in MB (256)")
    p.add_argument("--clients", type=int, default=50, help="concurrent pollers (50)")
    p.add_argument("--poll-seconds", type=float, default=None, help="polling window (10)")
    p.add_argument("--json", type=Path, default=None, metavar="OUT", help="write all figures")
    return p.parse_args(argv)


def free_port() -> int:
    """A free TCP port on loopback."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def npy_bytes(X: Any) -> bytes:
    """X as the bytes of a .npy file."""
    import numpy as np

    buf = io.BytesIO()
    np.save(buf, X)
    return buf.getvalue()


# --------------------------------------------------------------------------- the service


class Service:
    """``rbfkm serve`` in a subprocess of its own session, on loopback, until stop()."""

    def __init__(self, data_dir: Path, threads: int) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ)
        for var in ("REDIS_URL", "RBFKM_REDIS_URL", "RBFKM_API_KEYS"):
            env.pop(var, None)
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            env[var] = str(threads)
        env.update(
            PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
            RBFKM_DATA_DIR=str(data_dir),
            RBFKM_DEVICE="cpu",
            RBFKM_WORKERS="1",
        )
        self.log = open(data_dir.parent / "serve.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "service.cli",
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--data-dir",
                str(data_dir),
                "--workers",
                "1",
            ],
            env=env,
            cwd=str(data_dir.parent),
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def wait_ready(self, http: Any, timeout_s: float = 180) -> None:
        """Until /readyz answers 200 (Redis up, a worker alive)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"rbfkm serve exited with {self.proc.returncode}")
            try:
                if http.get("/readyz").status_code == 200:
                    return
            except Exception:
                pass
            time.sleep(0.2)
        raise RuntimeError("rbfkm serve was not ready in time")

    def reset_peak(self) -> int:
        """Reset the API process's RSS high-water mark; return its current RSS in bytes."""
        with open(f"/proc/{self.proc.pid}/clear_refs", "w") as fh:
            fh.write("5")
        return self._status_kb("VmRSS") * 1024

    def peak(self) -> int:
        """The API process's RSS high-water mark since the last reset, bytes."""
        return self._status_kb("VmHWM") * 1024

    def _status_kb(self, field: str) -> int:
        with open(f"/proc/{self.proc.pid}/status") as fh:
            found = re.search(rf"{field}:\s+(\d+)\s+kB", fh.read())
        return int(found.group(1)) if found else 0

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds (user + system) used so far by the API process and by its children."""
        import psutil

        api = psutil.Process(self.proc.pid)
        out = {"api": sum(api.cpu_times()[:2])}
        for child in api.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                name = "redis" if "redis" in child.name() else "worker"
                out[name] = out.get(name, 0.0) + sum(child.cpu_times()[:2])
        return out

    def stop(self) -> None:
        """SIGTERM the serve process (it stops its workers and Redis), then its group."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(40)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        with contextlib.suppress(ProcessLookupError):  # its session: workers, redis-server
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.log.close()


# --------------------------------------------------------------------------- parts


def run_job(http: Any, body: bytes, params: dict[str, Any], poll_s: float = 0.02) -> dict:
    """Upload, submit, poll until finished, fetch the result; timings of each leg."""
    t0 = time.perf_counter()
    up = http.post("/v1/datasets", content=body, headers={"Content-Type": "application/x-npy"})
    up.raise_for_status()
    t1 = time.perf_counter()
    job = http.post("/v1/jobs", json={"dataset_id": up.json()["id"], **params})
    job.raise_for_status()
    job_id = job.json()["id"]
    deadline = time.monotonic() + 3600
    while True:
        status = http.get(f"/v1/jobs/{job_id}").json()
        if status["status"] not in ("queued", "running"):
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"job {job_id} did not finish")
        time.sleep(poll_s)
    t2 = time.perf_counter()
    if status["status"] != "succeeded":
        raise RuntimeError(f"job {job_id} {status['status']}: {status.get('error')}")
    result = http.get(f"/v1/jobs/{job_id}/result")
    result.raise_for_status()
    t3 = time.perf_counter()
    return {
        "job_id": job_id,
        "upload_s": t1 - t0,
        "job_s": t2 - t1,
        "result_s": t3 - t2,
        "total_s": t3 - t0,
        "inertia": result.json()["inertia"],
        "n_iter": result.json()["n_iter"],
    }


def end_to_end_part(http: Any, args: argparse.Namespace, shape: tuple[int, int, int]) -> dict:
    """Service end to end vs RBFKMeans.fit, alternating, on fresh data per repetition."""
    import torch

    sys.path.insert(0, str(HERE))
    import common

    from rbfkm_engine import RBFKMeans

    torch.set_num_threads(args.threads)
    n, d, k = shape
    out: dict[str, Any] = {}
    for assignment in args.assignments:
        params = {"n_clusters": k, "assignment": assignment, "random_state": 0, "device": "cpu"}
        warm = common.make_blobs_dataset(2000, d, k, seed=99).X
        RBFKMeans(**params).fit(warm)  # warm-up: imports, thread pools
        run_job(http, npy_bytes(warm), params)
        reps = []
        for rep in range(args.repeats):
            X = common.make_blobs_dataset(n, d, k, seed=rep).X
            t_fit, model = common.timed(lambda X=X, p=params: RBFKMeans(**p).fit(X))
            e2e = run_job(http, npy_bytes(X), params)
            reps.append(
                {
                    "fit_s": t_fit,
                    "fit_inertia": float(model.inertia_),
                    "fit_n_iter": model.n_iter_,
                    **e2e,
                }
            )
        best_fit = min(r["fit_s"] for r in reps)
        best_e2e = min(r["total_s"] for r in reps)
        out[assignment] = {
            "shape": [n, d, k],
            "runs": reps,
            "fit_s": best_fit,
            "e2e_s": best_e2e,
            "overhead_s": best_e2e - best_fit,
            "limit_s": 1.1 * best_fit + 0.3,
            "pass": best_e2e <= 1.1 * best_fit + 0.3,
            "same_inertia": all(
                abs(r["inertia"] - r["fit_inertia"]) <= 1e-4 * abs(r["fit_inertia"]) for r in reps
            ),
        }
    return out


def upload_part(http: Any, service: Service, size_mb: float, tmp: Path) -> dict:
    """Upload rate of a size_mb .npy streamed from disk, and the API's peak RSS meanwhile."""
    import numpy as np

    d = 64
    n = int(size_mb * MB) // (d * 4)
    path = tmp / "upload.npy"
    rng = np.random.default_rng(int(time.time()))  # new bytes: no deduplication
    np.save(path, rng.standard_normal((n, d), dtype=np.float32))
    size = path.stat().st_size

    def stream() -> Any:
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                yield chunk

    base = service.reset_peak()
    t0 = time.perf_counter()
    resp = http.post(
        "/v1/datasets",
        content=stream(),
        headers={"Content-Type": "application/x-npy", "Content-Length": str(size)},
    )
    wall = time.perf_counter() - t0
    resp.raise_for_status()
    peak = service.peak()
    path.unlink()
    return {
        "bytes": size,
        "wall_s": wall,
        "mb_per_s": size / MB / wall,
        "api_rss_before": base,
        "api_peak_rss": peak,
        "api_peak_over_file": peak / size,
        "api_peak_delta_over_file": (peak - base) / size,
        "pass_rate": size / MB / wall >= 200,
        "pass_memory": peak < 3 * size,
        "status": resp.status_code,
    }


async def _poller(
    port: int, path: str, start_at: float, stop_at: float, lat: list[float], err: list[int]
) -> None:
    """One keep-alive HTTP/1.1 client: GET path in a loop; latencies inside the window.

    ``err[0]`` counts non-200 answers inside the window, ``err[1]`` every request.
    """
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    request = (
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: application/json\r\n\r\n"
    ).encode()
    try:
        while (now := time.perf_counter()) < stop_at:
            writer.write(request)
            status = await reader.readline()
            length, chunked = 0, False
            while (line := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.partition(b":")
                if name.lower() == b"content-length":
                    length = int(value)
                elif name.lower() == b"transfer-encoding" and b"chunked" in value.lower():
                    chunked = True
            if chunked:
                while size := int((await reader.readline()).strip(), 16):
                    await reader.readexactly(size + 2)
                await reader.readline()
            else:
                await reader.readexactly(length)
            done = time.perf_counter()
            err[1] += 1
            if now >= start_at:
                lat.append(done - now)
                if not status.startswith(b"HTTP/1.1 200"):
                    err[0] += 1
    finally:
        writer.close()


def polls_part(service: Service, job_id: str, clients: int, seconds: float) -> dict:
    """Polls/s and latency percentiles of ``clients`` concurrent pollers over ``seconds``.

    Also the CPU time the API and Redis spent per poll: on a shared machine that figure,
    unlike the rate, does not depend on what else runs.
    """
    import numpy as np

    port = service.port

    lat: list[float] = []
    err = [0, 0]  # non-200 inside the window, all requests
    warm = 1.0

    async def main() -> None:
        start_at = time.perf_counter() + warm
        stop_at = start_at + seconds
        await asyncio.gather(
            *(
                _poller(port, f"/v1/jobs/{job_id}", start_at, stop_at, lat, err)
                for _ in range(clients)
            )
        )

    cpu0 = service.cpu_seconds()
    asyncio.run(main())
    cpu1 = service.cpu_seconds()
    total = err[1] or 1
    cpu_ms = {k: (cpu1.get(k, 0.0) - cpu0.get(k, 0.0)) * 1e3 / total for k in cpu1}
    arr = np.array(lat) * 1e3
    rate = len(lat) / seconds
    p99 = float(np.percentile(arr, 99)) if len(arr) else float("nan")
    return {
        "clients": clients,
        "seconds": seconds,
        "requests": len(lat),
        "errors": err[0],
        "polls_per_s": rate,
        "p50_ms": float(np.percentile(arr, 50)) if len(arr) else None,
        "p99_ms": p99,
        "max_ms": float(arr.max()) if len(arr) else None,
        "pass_rate": rate >= 1000,
        "pass_p99": p99 < 50,
        "cpu_ms_per_poll": cpu_ms,  # warm-up polls included in both CPU time and count
    }


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    """Start the service, run the three parts, stop it, print (and write) the figures."""
    args = parse_args(argv)
    args.assignments = (args.assignments or "hard").split(",")
    args.repeats = args.repeats or (1 if args.quick else 2)
    args.upload_mb = args.upload_mb or (16 if args.quick else 256)
    args.poll_seconds = args.poll_seconds or (2 if args.quick else 10)
    shape = (5000, 16, 8) if args.quick else (100_000, 32, 64)
    sys.path.insert(0, str(REPO))
    import httpx

    report: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "cpu_count": os.cpu_count(),
        "loadavg_start": list(os.getloadavg()),
        "args": {k: str(v) for k, v in vars(args).items()},
    }
    print(
        f"rbfkm service benchmark {report['date']}: {os.cpu_count()} cores, load average "
        f"{report['loadavg_start'][0]:.2f} at start; client, API, Redis and worker share them"
    )
    with tempfile.TemporaryDirectory(prefix="rbfkm-svc-bench-") as tmpdir:
        tmp = Path(tmpdir)
        service = Service(tmp / "data", args.threads)
        http = httpx.Client(base_url=service.base_url, timeout=600)
        try:
            service.wait_ready(http)
            print(f"service ready on {service.base_url} (pid {service.proc.pid})")
            report["end_to_end"] = e2e = end_to_end_part(http, args, shape)
            print_e2e(e2e)
            report["upload"] = up = upload_part(http, service, args.upload_mb, tmp)
            print_upload(up)
            job_id = next(iter(e2e.values()))["runs"][-1]["job_id"]
            report["polls"] = polls = polls_part(service, job_id, args.clients, args.poll_seconds)
            print_polls(polls)
        finally:
            http.close()
            service.stop()
            report["serve_log_tail"] = (tmp / "serve.log").read_text(errors="replace")[-2000:]
    report["loadavg_end"] = list(os.getloadavg())
    print(f"load average at end {report['loadavg_end'][0]:.2f} on {os.cpu_count()} cores")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=str))
        print(f"wrote {args.json}")
    return 0


def verdict(ok: bool) -> str:
    """PASS or FAIL."""
    return "PASS" if ok else "FAIL"


def print_e2e(e2e: dict[str, Any]) -> None:
    """End-to-end lines."""
    for assignment, r in e2e.items():
        n, d, k = r["shape"]
        legs = min(r["runs"], key=lambda x: x["total_s"])
        print(
            f"{verdict(r['pass'])}  end to end ({n}x{d}, k={k}, {assignment}): "
            f"{r['e2e_s']:.3f}s (upload {legs['upload_s']:.3f} + job {legs['job_s']:.3f} + "
            f"result {legs['result_s']:.3f}) vs RBFKMeans.fit {r['fit_s']:.3f}s: overhead "
            f"{r['overhead_s']:+.3f}s, limit 1.1 x fit + 0.3 s = {r['limit_s']:.3f}s; "
            f"same inertia: {r['same_inertia']}"
        )


def print_upload(up: dict[str, Any]) -> None:
    """Upload lines."""
    print(
        f"{verdict(up['pass_rate'])}  upload {up['bytes'] / MB:.0f} MB .npy: {up['wall_s']:.2f}s "
        f"= {up['mb_per_s']:.0f} MB/s (target >= 200)"
    )
    print(
        f"{verdict(up['pass_memory'])}  API peak RSS during upload {up['api_peak_rss'] / MB:.0f} "
        f"MB = {up['api_peak_over_file']:.2f} x file (target < 3; it held "
        f"{up['api_rss_before'] / MB:.0f} MB before, peak delta "
        f"{up['api_peak_delta_over_file']:.2f} x file)"
    )


def print_polls(polls: dict[str, Any]) -> None:
    """Polling lines."""
    print(
        f"{verdict(polls['pass_rate'])}  status polls, {polls['clients']} clients, "
        f"{polls['seconds']:.0f}s: {polls['polls_per_s']:.0f}/s (target >= 1000), "
        f"{polls['errors']} non-200"
    )
    print(
        f"{verdict(polls['pass_p99'])}  poll latency p50 {polls['p50_ms']:.1f} ms, "
        f"p99 {polls['p99_ms']:.1f} ms (target < 50), max {polls['max_ms']:.1f} ms"
    )
    cpu = polls["cpu_ms_per_poll"]
    api = cpu.get("api", 0.0)
    print(
        f"      CPU per poll: API {api:.2f} ms, Redis {cpu.get('redis', 0.0):.2f} ms "
        f"(CPU time / all polls, warm-up included); one free core for the API would serve "
        f"about {1000 / api if api else float('nan'):.0f} polls/s"
    )


if __name__ == "__main__":
    sys.exit(main())
