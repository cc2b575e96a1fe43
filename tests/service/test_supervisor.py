"""The supervisor replaces dead worker processes, so their jobs still run to the end, and
restarts a dead embedded Redis on its port, with its data."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis

from service import supervisor as supervisor_module
from service.embedded import EmbeddedRedis
from service.queue import JobQueue
from service.supervisor import Backoff, RedisSupervisor, WorkerSupervisor
from tests.service.conftest import wait_for
from tests.service.test_worker import SLOW, SlowRBFKMeans, _blobs, _process_settings


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    (tmp_path / "datasets").mkdir()
    np.save(tmp_path / "datasets" / "ds.npy", _blobs())
    return tmp_path


@pytest.mark.slow
def test_a_killed_worker_is_replaced_and_its_job_succeeds(
    redis_server: str, redis_client: redis.Redis, data_dir: Path
) -> None:
    settings = _process_settings(redis_server, data_dir, lease_s=1.0)
    queue = JobQueue.from_settings(redis_client, settings)
    job_id = queue.submit("ds", SLOW)["id"]
    supervisor = WorkerSupervisor(settings, 1, estimator=SlowRBFKMeans, poll_s=0.1).start()
    try:
        (first,) = supervisor.processes

        def running() -> bool:
            job = queue.get(job_id)
            return bool(job and job["status"] == "running" and job["progress"]["iteration"])

        wait_for(running, 120, "the first worker to run the job")
        assert first.pid is not None
        os.kill(first.pid, signal.SIGKILL)
        wait_for(lambda: supervisor.restarts == 1, 30, "a replacement")
        (second,) = supervisor.processes
        assert second.pid != first.pid and second.is_alive()

        def finished() -> dict[str, Any] | None:
            job = queue.get(job_id)
            return job if job and job["status"] == "succeeded" else None

        job = wait_for(finished, 180, "the replacement to take the job over and finish it")
        assert job["attempts"] == 2
    finally:
        supervisor.stop()
    assert not any(process.is_alive() for process in supervisor.processes)
    assert supervisor.restarts == 1  # stopping is not dying: no replacement for those


class _Exited:
    """A worker process that has already exited."""

    pid = 4242
    exitcode = 1

    def is_alive(self) -> bool:
        return False


def test_the_backoff_doubles_for_quick_deaths_and_resets_after_a_stable_run() -> None:
    backoff = Backoff(1.0, 4.0, stable_after_s=10.0)
    backoff.started(0.0)
    assert not backoff.pending and not backoff.due(1e9)
    waits = []
    now = 0.0
    for _ in range(5):  # each restart dies half a second later
        now += 0.5
        waits.append(backoff.exited(now))
        assert backoff.pending and not backoff.due(now + waits[-1] - 0.01)
        now += waits[-1]
        assert backoff.due(now)
        backoff.started(now)
    assert waits == [1.0, 2.0, 4.0, 4.0, 4.0]
    assert backoff.exited(now + 60.0) == 0.0  # it had run a minute: restarted at once
    backoff.started(now + 60.0)
    assert backoff.exited(now + 60.5) == 1.0  # and the delay starts over
    with pytest.raises(ValueError):
        Backoff(0.0, 1.0)


def test_a_worker_that_keeps_dying_waits_longer_each_time(monkeypatch: pytest.MonkeyPatch) -> None:
    spawned: list[int] = []

    def spawn(
        settings: Any, n: int, *, estimator: Any = None, first_index: int = 0, workers: int = 0
    ) -> list:
        assert workers == 2  # a replacement's share of the cores is its slot's of the two
        spawned.append(first_index)
        return [_Exited() for _ in range(n)]

    clock = [1000.0]
    monkeypatch.setattr(supervisor_module, "spawn_workers", spawn)
    monkeypatch.setattr(supervisor_module.time, "monotonic", lambda: clock[0])
    sup = WorkerSupervisor(None, 2, backoff_s=1.0, max_backoff_s=4.0)  # type: ignore[arg-type]
    sup._processes = [_Exited(), _Exited()]  # as start() leaves them, without the thread
    for backoff in sup._backoff:
        backoff.started(clock[0])
    starts = []
    for _ in range(40):  # 20 s in steps of 0.5 s
        before = len(spawned)
        sup._check(1)
        if len(spawned) > before:
            starts.append(clock[0] - 1000.0)
        clock[0] += 0.5
    assert set(spawned) == {1}  # the dead slot's index (its device), not slot 0
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    # Each death is seen at the next 0.5 s check, then waits 1, 2, 4, 4 s (capped).
    assert starts[0] == 1.0 and gaps[:3] == [2.5, 4.5, 4.5]
    assert sup.restarts == len(starts)
    sup._backoff[1].started(clock[0] - 60.0)  # a replacement that ran a minute, then died
    before = len(spawned)
    sup._check(1)
    assert len(spawned) == before + 1  # replaced at once, back-off reset
    assert sup._backoff[1].delay_s == 1.0


class _DeadRedis:
    """An embedded Redis whose every restart dies at once (or fails to start at all)."""

    def __init__(self, fail_every: int = 0) -> None:
        self.port = 6399
        self.starts = 0
        self.fail_every = fail_every
        self.process: Any = None

    def start(self, timeout_s: float = 15.0) -> str:
        self.starts += 1
        if self.fail_every and self.starts % self.fail_every == 0:
            self.process = None  # as EmbeddedRedis.start leaves it when the server did not start
            raise RuntimeError("the embedded redis-server did not start")
        self.process = subprocess.Popen([sys.executable, "-c", "pass"])
        self.process.wait()
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        self.process = None


def test_a_redis_that_keeps_dying_is_restarted_with_a_growing_backoff(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(supervisor_module.time, "monotonic", lambda: clock[0])
    server = _DeadRedis(fail_every=3)  # every third restart does not even start
    sup = RedisSupervisor(server, backoff_s=1.0, max_backoff_s=8.0)  # type: ignore[arg-type]
    sup._launch_all()
    sup._backoff[0].started(clock[0])
    starts = []
    for _ in range(80):  # 40 s in steps of 0.5 s
        before = server.starts
        sup._check(0)
        if server.starts > before:
            starts.append(clock[0] - 1000.0)
        clock[0] += 0.5
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    # A restart that dies is seen at the next 0.5 s check, then waits 1, 2, 4, 8, 8 s
    # (capped); a start that fails (the 3rd and 6th) is a death at once, seen as it fails.
    assert starts[0] == 1.0 and gaps[:5] == [2.5, 4.0, 8.5, 8.5, 8.0]
    assert server.port == 6399  # always the same port: clients find it where it was
    assert sup.restarts == len([n for n in range(2, server.starts + 1) if n % 3])
    sup._stop.set()
    before = server.starts
    clock[0] += 60.0
    sup._check(0)
    assert server.starts == before  # a stopping supervisor restarts nothing


def test_a_killed_redis_is_reaped_and_restarted_with_its_data(tmp_path: Path) -> None:
    sup = RedisSupervisor(EmbeddedRedis(tmp_path), poll_s=0.05, backoff_s=0.1).start()
    try:
        server = sup.server
        url, first = server.url, server.process
        assert first is not None
        client = redis.Redis.from_url(url, socket_connect_timeout=1)
        client.set("kept", "yes")
        os.kill(first.pid, signal.SIGKILL)
        wait_for(lambda: sup.restarts == 1, 30, "a restart")
        assert first.returncode == -signal.SIGKILL  # reaped: no zombie left behind
        assert server.url == url and server.process is not None
        assert server.process.pid != first.pid
        assert client.get("kept") == b"yes", "the same client reconnects; the AOF replayed"
        client.close()
    finally:
        sup.stop()
    assert sup.server.process is None and sup.restarts == 1


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError):
        WorkerSupervisor(None, 1, poll_s=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        WorkerSupervisor(None, 1, backoff_s=5, max_backoff_s=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        RedisSupervisor(None, poll_s=-1)  # type: ignore[arg-type]
