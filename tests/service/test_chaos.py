"""Chaos over real processes: `kill -9` of a worker, the embedded Redis or the whole
`rbfkm serve` (its API runs in that process) at random moments while jobs run.

One seeded plan (``RBFKM_CHAOS_SEED`` replays another) interleaves the submission of
``N_JOBS`` small fits over HTTP with SIGKILLs of a random worker process, of the embedded
redis-server, and of the `rbfkm serve` process itself (then started again on the same data
directory and port: the queue comes back from the AOF). The client retries through the
outages (connection errors, 503, an idempotency key still being accepted), as a real one
would. At the end every job must be terminal, read from the queue's own records: succeeded
exactly once (one committed result in Redis, one attempt directory on disk, the one the
record names, fencing token consistent) with a correct result, or failed with a reason;
none lost, none queued or running, none submitted twice. The counts are printed (run with
``-s`` to see them)::

    .venv/bin/python -m pytest tests/service/test_chaos.py -m slow -s
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import re
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil
import pytest
import redis

from service.embedded import free_port
from tests.service.conftest import blobs, npy_bytes
from tests.service.test_cli import clean_env, start, stop

SEED = int(os.environ.get("RBFKM_CHAOS_SEED", "20240924"))
N_JOBS = 36
#: Kills of each kind in one run.
KILLS = {"worker": 4, "redis": 3, "serve": 2}
N_SAMPLES, N_FEATURES, N_CLUSTERS = 300, 2, 3
TERMINAL = ("succeeded", "failed", "canceled")
#: The statuses an HTTP client retries on: Redis down (503), and a server on its way down.
RETRY_STATUS = {502, 503, 504}
NPY = {"Content-Type": "application/x-npy"}


@dataclass
class Chaos:
    """A running `rbfkm serve` on a fixed port and data directory, and what was done to it."""

    tmp: Path
    port: int
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    logs: list[Path] = field(default_factory=list)
    kills: Counter[str] = field(default_factory=Counter)
    seen: set[int] = field(default_factory=set)  # every pid started, for the clean-up
    outages: Counter[str] = field(default_factory=Counter)  # what the client retried on

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.logs[-1]

    def start(self) -> None:
        log = self.tmp / f"serve-{len(self.logs)}.log"
        self.logs.append(log)
        self.proc = start(["serve", "--port", str(self.port)], log, self.env)
        self.seen.add(self.proc.pid)

    def children(self) -> list[psutil.Process]:
        assert self.proc is not None
        found = []
        with contextlib.suppress(psutil.NoSuchProcess):
            for child in psutil.Process(self.proc.pid).children():
                with contextlib.suppress(psutil.NoSuchProcess):
                    if child.status() != psutil.STATUS_ZOMBIE:
                        found.append(child)
                        self.seen.add(child.pid)
        return found

    def workers(self) -> list[psutil.Process]:
        """The live worker processes (spawned children; not the resource tracker)."""
        found = []
        for child in self.children():
            with contextlib.suppress(psutil.NoSuchProcess):
                line = " ".join(child.cmdline())
                if "spawn_main" in line and "resource_tracker" not in line:
                    found.append(child)
        return found

    def redis_server(self) -> psutil.Process | None:
        for child in self.children():
            with contextlib.suppress(psutil.NoSuchProcess):
                if "redis-server" in child.name():
                    return child
        return None

    def redis_url(self) -> str:
        """The embedded Redis of the current `serve` (its port changes with each start)."""
        found = re.findall(r"embedded Redis on (redis://\S+)", self.log.read_text())
        assert found, self.tail()
        return found[-1]

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"serve exited {self.proc.returncode}\n{self.tail()}"
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.base_url}/readyz", timeout=2).status_code == 200:
                    return
            time.sleep(0.1)
        raise AssertionError(f"not ready after {timeout_s} s\n{self.tail()}")

    def tail(self, lines: int = 60) -> str:
        text = "\n".join(log.read_text(errors="replace") for log in self.logs)
        return "\n".join(text.splitlines()[-lines:])

    # ---- the kills -----------------------------------------------------------------------

    def kill(self, kind: str, rng: random.Random) -> str:
        """SIGKILL one process of ``kind``; what was killed, for the record."""
        if kind == "worker":
            workers = self.workers()
            if not workers:  # all being replaced right now
                return "no live worker"
            victim = rng.choice(sorted(workers, key=lambda p: p.pid))
        elif kind == "redis":
            victim = self.redis_server()
            if victim is None:  # being restarted right now
                return "no live redis-server"
        else:
            assert self.proc is not None
            victim = psutil.Process(self.proc.pid)
        with contextlib.suppress(psutil.NoSuchProcess):
            victim.kill()
            self.kills[kind] += 1
        if kind == "serve":
            assert self.proc is not None
            self.proc.wait()
            self.start()  # on the same port and data directory, at once
        return f"{kind} pid {victim.pid}"

    def clean_up(self) -> None:
        """Stop the serve and anything it left behind."""
        if self.proc is not None and self.proc.poll() is None:
            self.children()
            with contextlib.suppress(AssertionError):
                stop(self.proc, self.log)
        for pid in self.seen:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc = psutil.Process(pid)
                if proc.status() != psutil.STATUS_ZOMBIE:
                    proc.kill()


class Client:
    """An HTTP client that rides out the outages: it retries connection errors, timeouts,
    503 and the 409 of an idempotency key whose first request is still being accepted."""

    def __init__(self, chaos: Chaos, give_up_s: float = 90.0) -> None:
        self.chaos = chaos
        self.give_up_s = give_up_s
        self.http = httpx.Client(base_url=chaos.base_url, timeout=10)

    def call(self, method: str, path: str, ok: Callable[[httpx.Response], bool], **kw: Any) -> Any:
        deadline = time.monotonic() + self.give_up_s
        delay = 0.05
        while True:
            try:
                response = self.http.request(method, path, **kw)
            except httpx.TransportError as exc:
                self.chaos.outages[type(exc).__name__] += 1
            else:
                assert response.status_code < 500 or response.status_code in RETRY_STATUS, (
                    f"{method} {path}: {response.status_code} {response.text}\n{self.chaos.tail()}"
                )
                if ok(response):
                    return response
                retry_409 = response.status_code == 409 and "in progress" in response.text
                if response.status_code not in RETRY_STATUS and not retry_409:
                    raise AssertionError(f"{method} {path}: {response.status_code} {response.text}")
                self.chaos.outages[str(response.status_code)] += 1
            assert time.monotonic() < deadline, f"{method} {path}: gave up\n{self.chaos.tail()}"
            time.sleep(delay)
            delay = min(2 * delay, 1.0)

    def json(self, method: str, path: str, status: int = 200, **kw: Any) -> Any:
        return self.call(method, path, lambda r: r.status_code == status, **kw).json()


@dataclass(frozen=True)
class Planned:
    at_s: float
    what: str  # "submit" or a kind of kill
    index: int = 0


def plan(rng: random.Random) -> list[Planned]:
    """Submissions at random gaps, and the kills at random moments over the same span and
    a little after it (while the last jobs run)."""
    events, now = [], 0.0
    for index in range(N_JOBS):
        now += rng.uniform(0.05, 0.5)
        events.append(Planned(now, "submit", index))
    span = now + 4.0
    for kind, count in KILLS.items():
        events += [Planned(rng.uniform(0.5, span), kind) for _ in range(count)]
    return sorted(events, key=lambda e: (e.at_s, e.what))


def job_body(index: int, datasets: list[str], rng: random.Random) -> dict[str, Any]:
    """Small fits of three kinds: quick hard ones, soft ones, and slow soft ones (a slow
    cooling: a second or two) that the kills are likely to hit while they run."""
    body: dict[str, Any] = {
        "dataset_id": datasets[index % len(datasets)],
        "n_clusters": N_CLUSTERS,
        "assignment": rng.choice(["hard", "entmax15"]),
    }
    if index % 3 == 0:
        body.update(assignment="entmax15", cooling=0.9995, max_iter=50000)
    if rng.random() < 0.6:
        body["random_state"] = rng.randrange(1000)
    return body


def check_result(client: Client, job_id: str, X: np.ndarray) -> float:
    """The result is complete and self-consistent; returns its inertia."""
    result = client.json("GET", f"/v1/jobs/{job_id}/result", params={"exclude": "history"})
    labels, centroids = np.array(result["labels"]), np.array(result["centroids"])
    assert labels.shape == (len(X),), job_id
    assert centroids.shape == (N_CLUSTERS, N_FEATURES), job_id
    assert set(labels.tolist()) <= set(range(N_CLUSTERS)), job_id
    inertia = result["inertia"]
    assert math.isfinite(inertia), job_id
    squared = ((X[:, None, :] - centroids[None]) ** 2).sum(-1)
    assert inertia == pytest.approx(squared[np.arange(len(X)), labels].sum(), rel=1e-6), job_id
    assert inertia == pytest.approx(squared.min(1).sum(), rel=1e-6), job_id
    predicted = client.json("POST", f"/v1/jobs/{job_id}/predict", content=npy_bytes(X), headers=NPY)
    assert predicted["labels"] == labels.tolist(), job_id
    return float(inertia)


def running_in(proc: psutil.Process, directory: Path) -> bool:
    """Whether ``proc`` is a live redis-server working in ``directory`` (it changes into
    its ``--dir``; its command line shows only its address)."""
    with contextlib.suppress(psutil.Error):
        return (
            "redis-server" in (proc.info["name"] or "")
            and proc.status() != psutil.STATUS_ZOMBIE
            and Path(proc.cwd()).resolve() == directory
        )
    return False


@pytest.fixture
def chaos(tmp_path: Path) -> Iterator[Chaos]:
    env = clean_env(
        tmp_path,
        RBFKM_WORKERS="2",
        RBFKM_DEVICE="cpu",
        RBFKM_DATA_DIR=str(tmp_path / "d"),
        RBFKM_LEASE_S="3",
        RBFKM_MAX_ATTEMPTS="4",
        RBFKM_THREADS_PER_WORKER="1",
    )
    state = Chaos(tmp_path, free_port(), env)
    try:
        state.start()
        state.wait_ready()
        yield state
    finally:
        state.clean_up()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_jobs_survive_kill_9_of_workers_redis_and_the_server(chaos: Chaos) -> None:
    rng = random.Random(SEED)
    client = Client(chaos)
    data = [blobs(N_SAMPLES, N_FEATURES, N_CLUSTERS, seed=seed) for seed in range(3)]
    datasets = []
    for X in data:
        uploaded = client.call(
            "POST", "/v1/datasets", lambda r: r.status_code in (200, 201),
            content=npy_bytes(X), headers=NPY,
        )  # fmt: skip
        datasets.append(uploaded.json()["id"])
    by_dataset = dict(zip(datasets, data, strict=True))

    jobs: dict[str, dict[str, Any]] = {}  # job id -> body
    record: list[str] = []
    started = time.monotonic()
    for event in plan(rng):
        wait = event.at_s - (time.monotonic() - started)
        if wait > 0:
            time.sleep(wait)
        if event.what == "submit":
            body = job_body(event.index, datasets, rng)
            key = f"chaos-{SEED}-{event.index}-{uuid.uuid4().hex[:6]}"
            job = client.json("POST", "/v1/jobs", 202, json=body,
                              headers={"Idempotency-Key": key})  # fmt: skip
            assert job["id"] not in jobs, "one job for two submissions"
            jobs[job["id"]] = body
        else:
            record.append(f"{time.monotonic() - started:6.2f} s: {chaos.kill(event.what, rng)}")
    submitted_s = time.monotonic() - started

    # Every job ends, within a bound.
    finals: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + 120
    while len(finals) < len(jobs):
        assert time.monotonic() < deadline, (
            f"unfinished: {[client.json('GET', f'/v1/jobs/{j}') for j in jobs if j not in finals]}"
            f"\n{chaos.tail()}"
        )
        for job_id in jobs:
            if job_id not in finals:
                job = client.json("GET", f"/v1/jobs/{job_id}")
                if job["status"] in TERMINAL:
                    finals[job_id] = job
        time.sleep(0.2)
    ended_s = time.monotonic() - started
    chaos.wait_ready()

    # The queue's own records: one job per submission, each in one status, nothing pending.
    store = redis.Redis.from_url(chaos.redis_url(), decode_responses=True)
    assert store.zcard("rbfkm:jobs:index") == len(jobs), "a job was lost or submitted twice"
    statuses = {s: set(store.zrange(f"rbfkm:jobs:status:{s}", 0, -1)) for s in
                ("queued", "running", *TERMINAL)}  # fmt: skip
    assert not statuses["queued"] and not statuses["running"], statuses
    assert store.xpending("rbfkm:jobs", "workers")["pending"] == 0
    dead = {entry["job"]: entry for _, entry in store.xrange("rbfkm:jobs:dead")}
    results_dir = Path(chaos.env["RBFKM_DATA_DIR"]) / "results"
    succeeded, failed, retried = 0, Counter[str](), 0
    for job_id, body in jobs.items():
        final = finals[job_id]
        raw = store.hgetall(f"rbfkm:job:{job_id}")
        assert raw["status"] == final["status"], (job_id, raw)
        assert [s for s, ids in statuses.items() if job_id in ids] == [final["status"]]
        attempts = int(raw["attempts"])
        retried += attempts > 1
        committed = sorted(p.name for p in (results_dir / job_id).glob("attempt-*"))
        if final["status"] == "succeeded":
            succeeded += 1
            meta = json.loads(raw["result"])
            assert 1 <= meta["attempt"] <= attempts, (job_id, meta, attempts)
            assert committed == [f"attempt-{meta['attempt']}"], (job_id, committed, meta)
            assert "error" not in raw and job_id not in dead, (job_id, raw)
            X = by_dataset[body["dataset_id"]]
            assert meta["n_samples"] == N_SAMPLES and meta["n_clusters"] == N_CLUSTERS
            assert check_result(client, job_id, X) == pytest.approx(meta["inertia"])
        else:
            assert final["status"] == "failed", (job_id, final)  # nobody canceled
            assert final["error"] and raw["error"] == final["error"], (job_id, raw)
            assert "result" not in raw and job_id in dead, (job_id, raw)
            failed[final["error"]] += 1
    logged = Counter(
        match.group(1)
        for log in chaos.logs
        for match in re.finditer(r"job (\w+) attempt \d+ succeeded", log.read_text())
    )
    assert all(n == 1 for n in logged.values()), f"completed twice: {logged.most_common(3)}"
    assert set(logged) <= {j for j, f in finals.items() if f["status"] == "succeeded"}

    print(
        f"\nchaos seed {SEED}: {len(jobs)} jobs submitted in {submitted_s:.1f} s, all ended "
        f"after {ended_s:.1f} s; kills: {dict(chaos.kills)}; succeeded {succeeded}, failed "
        f"{sum(failed.values())} {dict(failed)}; jobs with more than one attempt {retried} "
        f"(attempts in all {sum(f['attempts'] for f in finals.values())}); the client "
        f"retried on {dict(chaos.outages)}\n" + "\n".join(record)
    )

    # Nothing outlives its server: one redis-server on the data dir, the current one's.
    redis_dir = (Path(chaos.env["RBFKM_DATA_DIR"]) / "redis").resolve()
    servers = [p.pid for p in psutil.process_iter(["name"]) if running_in(p, redis_dir)]
    current = chaos.redis_server()
    assert servers == [current.pid if current else None], servers

    assert stop(chaos.proc, chaos.log) == 0, chaos.tail()  # type: ignore[arg-type]
