"""The supervisor replaces dead worker processes, so their jobs still run to the end."""

from __future__ import annotations

import itertools
import os
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis

from service import supervisor as supervisor_module
from service.queue import JobQueue
from service.supervisor import WorkerSupervisor
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


def test_a_worker_that_keeps_dying_waits_longer_each_time(monkeypatch: pytest.MonkeyPatch) -> None:
    spawned: list[int] = []

    def spawn(settings: Any, n: int, *, estimator: Any = None, first_index: int = 0) -> list:
        spawned.append(first_index)
        return [_Exited() for _ in range(n)]

    clock = [1000.0]
    monkeypatch.setattr(supervisor_module, "spawn_workers", spawn)
    monkeypatch.setattr(supervisor_module.time, "monotonic", lambda: clock[0])
    sup = WorkerSupervisor(None, 2, backoff_s=1.0, max_backoff_s=4.0)  # type: ignore[arg-type]
    sup._processes = [_Exited(), _Exited()]  # as start() leaves them, without the thread
    sup._started_at, sup._delay, sup._retry_at = [clock[0]] * 2, [1.0] * 2, [None] * 2
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
    sup._started_at[1] = clock[0] - 60.0  # a replacement that ran a minute, then died
    sup._retry_at[1] = None
    before = len(spawned)
    sup._check(1)
    assert len(spawned) == before + 1  # replaced at once, back-off reset
    assert sup._delay[1] == 1.0


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError):
        WorkerSupervisor(None, 1, poll_s=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        WorkerSupervisor(None, 1, backoff_s=5, max_backoff_s=1)  # type: ignore[arg-type]
