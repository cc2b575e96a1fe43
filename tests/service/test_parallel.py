"""Parallel jobs (``"parallel": N``): a worker fits one job on N rank processes (gloo on
loopback), against a real Redis and the real engine: the result equals the one-process
job's; cancel and a rank killed mid-fit behave as for any job."""

from __future__ import annotations

import functools
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis

from rbfkm_engine import RBFKMeans
from service.parallel import (
    attempt_prefix,
    rank_devices,
    remove_leftovers,
    row_bounds,
    world_size,
)
from service.queue import JobQueue
from service.results import ResultStore
from service.worker import Timing, Worker, dataset_loader
from tests.service.conftest import blobs, committed, wait_for
from tests.service.slow_ranks import SlowRBFKMeans

PARAMS = {"n_clusters": 4, "random_state": 0, "max_iter": 60, "assignment": "entmax15"}
#: The fits of these tests in float64, so that sums in another order agree closely.
FLOAT64 = functools.partial(RBFKMeans, dtype="float64")


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    (tmp_path / "datasets").mkdir()
    np.save(tmp_path / "datasets" / "ds.npy", blobs(300, 2, 4))
    return tmp_path


@pytest.fixture
def queue(redis_client: redis.Redis) -> JobQueue:
    return JobQueue(redis_client, prefix="p")


@pytest.fixture
def make_worker(data_dir: Path) -> Callable[..., Worker]:
    def make(queue: JobQueue, **kwargs: Any) -> Worker:
        kwargs.setdefault("device", "cpu")
        kwargs.setdefault("lock_dir", data_dir)
        kwargs.setdefault("timing", Timing(poll_s=0.05, progress_interval_s=0.05))
        return Worker(queue, ResultStore(data_dir), dataset_loader(data_dir), **kwargs)

    return make


def _run_in_thread(worker: Worker) -> threading.Thread:
    thread = threading.Thread(target=worker.run_once, kwargs={"block_ms": 200}, daemon=True)
    thread.start()
    return thread


def _running_with_progress(queue: JobQueue, job_id: str) -> bool:
    job = queue.get(job_id)
    return bool(job and job["status"] == "running" and job["progress"]["iteration"])


def test_world_size_is_capped_at_what_the_worker_offers() -> None:
    assert [world_size(r, 3) for r in (None, 1, 2, 3, 8, "all")] == [1, 1, 2, 3, 3, 3]
    for bad in (0, -1, "some", 2.5, True):
        with pytest.raises(ValueError, match="parallel must be an integer >= 1"):
            world_size(bad, 3)
    assert row_bounds(10, 3) == [0, 3, 6, 10]
    assert rank_devices("cpu", 2) == ["cpu", "cpu"]


def test_an_attempt_killed_with_its_worker_leaves_nothing_behind(tmp_path: Path) -> None:
    # What a worker killed mid-fit leaves: its attempt directory, with the ranks' files.
    left = tmp_path / f"{attempt_prefix('job1')}x1y2"
    left.mkdir()
    (left / "progress.json").write_text("{}")
    other = tmp_path / f"{attempt_prefix('job2')}z3"
    other.mkdir()
    assert remove_leftovers("job1", tmp_path) == 1
    assert not left.exists() and other.is_dir()  # another job's directory is not touched
    assert remove_leftovers("job1", tmp_path) == 0


def test_a_parallel_job_equals_the_one_process_job(
    queue: JobQueue, make_worker: Callable[..., Worker], data_dir: Path
) -> None:
    worker = make_worker(queue, estimator=FLOAT64, worker_procs=2)
    alone = queue.submit("ds", PARAMS)["id"]
    together = queue.submit("ds", {**PARAMS, "parallel": "all"})["id"]
    assert worker.run_once(block_ms=200) == alone
    assert worker.run_once(block_ms=200) == together

    job = queue.get(together)
    assert job is not None
    assert (job["status"], job["attempts"], job["progress"]["fraction"]) == ("succeeded", 1, 1.0)
    results = ResultStore(data_dir)
    one, two = results.summary(alone), results.summary(together)
    assert (one["processes"], two["processes"]) == (1, 2)
    np.testing.assert_array_equal(results.labels(together), results.labels(alone))
    np.testing.assert_allclose(two["centroids"], one["centroids"], atol=1e-6)
    assert two["inertia"] == pytest.approx(one["inertia"], rel=1e-9)
    assert committed(queue, together)["n_samples"] == 300


def test_cancel_stops_a_running_parallel_job(
    queue: JobQueue, make_worker: Callable[..., Worker]
) -> None:
    worker = make_worker(queue, estimator=SlowRBFKMeans, worker_procs=2)
    job_id = queue.submit("ds", {**PARAMS, "max_iter": 300, "tol": 0.0, "parallel": 2})["id"]
    thread = _run_in_thread(worker)
    wait_for(lambda: _running_with_progress(queue, job_id), 60, "a running parallel job")
    ranks = worker.ranks
    assert ranks is not None and len(ranks.pids) == 2
    assert queue.cancel(job_id)
    thread.join(30)
    assert not thread.is_alive()
    assert queue.get(job_id)["status"] == "canceled"
    assert all(process.poll() is not None for process in ranks.processes)


def test_a_killed_rank_fails_the_attempt_and_the_job_is_retried_whole(
    queue: JobQueue, make_worker: Callable[..., Worker], data_dir: Path
) -> None:
    worker = make_worker(queue, estimator=SlowRBFKMeans, worker_procs=2)
    job_id = queue.submit("ds", {**PARAMS, "parallel": 2})["id"]
    thread = _run_in_thread(worker)
    wait_for(lambda: _running_with_progress(queue, job_id), 60, "a running parallel job")
    os.kill(worker.ranks.pids[1], signal.SIGKILL)
    thread.join(30)
    assert not thread.is_alive()
    job = queue.get(job_id)
    assert (job["status"], job["attempts"]) == ("queued", 1)
    assert "rank 1 of the 2 processes" in job["error"] and "SIGKILL" in job["error"]
    worker.estimator = FLOAT64  # the second attempt at full speed
    assert worker.run_once(block_ms=200) == job_id
    job = queue.get(job_id)
    assert (job["status"], job["attempts"]) == ("succeeded", 2)
    assert ResultStore(data_dir).summary(job_id)["processes"] == 2


def test_a_parallel_job_past_its_time_limit_fails_and_its_ranks_end(
    queue: JobQueue, make_worker: Callable[..., Worker], data_dir: Path
) -> None:
    worker = make_worker(queue, estimator=SlowRBFKMeans, worker_procs=2)
    params = {**PARAMS, "max_iter": 300, "tol": 0.0, "parallel": 2, "max_runtime_s": 1.0}
    job_id = queue.submit("ds", params)["id"]
    thread = _run_in_thread(worker)
    ranks = wait_for(lambda: worker.ranks, 30, "the ranks")
    thread.join(60)
    assert not thread.is_alive()
    job = queue.get(job_id)
    assert (job["status"], job["attempts"]) == ("failed", 1)
    assert "exceeded its time limit of 1 s" in job["error"]
    assert all(process.poll() is not None for process in ranks.processes)
    assert not ResultStore(data_dir).exists(job_id)


def test_a_rank_that_fails_on_bad_input_fails_the_job_without_retries(
    queue: JobQueue, make_worker: Callable[..., Worker], data_dir: Path
) -> None:
    worker = make_worker(queue, worker_procs=2)
    job_id = queue.submit("ds", {**PARAMS, "n_clusters": 500, "parallel": 2})["id"]
    assert worker.run_once(block_ms=200) == job_id
    job = queue.get(job_id)
    assert (job["status"], job["attempts"]) == ("failed", 1)
    assert "n_clusters" in job["error"] and "RankFailed" not in job["error"]
    assert not ResultStore(data_dir).exists(job_id)
